//! `leo audit [--follow]`: the audit trail of authenticated changes, oldest first like a log,
//! from `GET /api/v1/audit`; `--follow` keeps printing new entries as they are written.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use leo_broker::home::Home;
use leo_protocol::history::{AuditEntry, AuditList, MAX_PAGE};

use super::api::Api;

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The newest N entries (1 to 500).
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PAGE)))]
    pub limit: u32,
    /// Keep printing new entries as they come, until Ctrl-C.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

/// How often `--follow` asks.
const POLL: Duration = Duration::from_millis(500);

pub fn run(home: &Home, args: &AuditArgs) -> crate::error::Result {
    let api = Api::new(home);
    let list: AuditList = api.get(&format!("/api/v1/audit?limit={}", args.limit))?;
    // Entries below `floor` were before the first page; `printed` are those shown since.
    // With a PostgreSQL store several processes write the trail, so an entry may become
    // visible after one with a higher `seq`: it is new because it was not printed, not because
    // it is above the last one printed.
    let floor = list.entries.last().map_or(0, |e| e.seq);
    let mut printed: BTreeSet<u64> = list.entries.iter().map(|e| e.seq).collect();
    print_entries(list.entries.iter().rev(), args.json)?;
    if !args.follow {
        return Ok(());
    }
    loop {
        std::thread::sleep(POLL);
        let list: AuditList = match api.get(&format!("/api/v1/audit?limit={MAX_PAGE}")) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("leo audit: {e} (retrying)");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        let fresh: Vec<&AuditEntry> = list
            .entries
            .iter()
            .filter(|e| e.seq > floor && !printed.contains(&e.seq))
            .collect();
        printed.extend(fresh.iter().map(|e| e.seq));
        // Only the newest page is read again, so older seqs need not be remembered.
        if let Some(oldest) = list.entries.last() {
            printed = printed.split_off(&oldest.seq);
        }
        print_entries(fresh.into_iter().rev(), args.json)?;
    }
}

fn print_entries<'a>(
    entries: impl Iterator<Item = &'a AuditEntry>,
    json: bool,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for e in entries {
        if json {
            writeln!(out, "{}", serde_json::to_string(e)?)?;
        } else {
            writeln!(out, "{}", line(e))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `TIME  PRINCIPAL (KIND)  ACTION  TARGET  DETAIL`, then `on INSTANCE` with a PostgreSQL
/// store (the instance whose broker or `leo` command made the change).
pub fn line(e: &AuditEntry) -> String {
    let mut text = format!("{}  {} ({})  {}", e.at, e.principal, e.token_kind, e.action);
    for part in [&e.target, &e.detail].into_iter().flatten() {
        text.push_str("  ");
        text.push_str(part);
    }
    if let Some(instance) = &e.instance {
        text.push_str("  on ");
        text.push_str(instance);
    }
    text
}
