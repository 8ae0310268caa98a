//! `leo audit [--follow]`: the audit trail of authenticated changes, oldest first like a log,
//! from `GET /api/v1/audit`; `--follow` keeps printing new entries as they are written.
//! `leo audit verify` walks this host's trail where the broker keeps it and reports the first
//! entry that does not chain (docs/security.md "The audit trail").

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
    #[command(subcommand)]
    pub command: Option<AuditCommand>,
}

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Check that every entry carries the hash of the one before: reads the trail where this
    /// host's broker keeps it (state/history.db, or the PostgreSQL store), running or not.
    #[command(after_help = VERIFY_HELP)]
    Verify {
        /// The verdict as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// `--help` text for `leo audit verify`.
const VERIFY_HELP: &str = "Exit codes: 0 every entry chains; 3 an entry does not chain (it \
is named: changed, removed or inserted after it was written); 1 the trail cannot be read.";

/// `leo audit verify`'s exit code when an entry does not chain.
const EXIT_BROKEN: u8 = 3;

/// How often `--follow` asks.
const POLL: Duration = Duration::from_millis(500);

pub fn run(home: &Home, args: &AuditArgs) -> crate::error::Result {
    if let Some(AuditCommand::Verify { json }) = args.command {
        return verify(home, json);
    }
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

/// `leo audit verify`.
fn verify(home: &Home, json: bool) -> crate::error::Result {
    use leo_broker::audit_chain::Verdict;
    let verdict = leo_broker::verify_local(home)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&verdict).map_err(anyhow::Error::from)?
        )?;
    } else {
        writeln!(out, "{}", verdict_line(&verdict))?;
    }
    out.flush()?;
    crate::error::reported(match verdict {
        Verdict::Chains { .. } => 0,
        Verdict::Broken { .. } => EXIT_BROKEN,
    })
}

/// What `leo audit verify` says of `v`.
fn verdict_line(v: &leo_broker::audit_chain::Verdict) -> String {
    use leo_broker::audit_chain::Verdict;
    match v {
        Verdict::Chains {
            entries,
            before_chain,
            head_seq,
            head,
            pruned,
        } => {
            let mut text = format!("The audit trail chains: {entries} entries");
            if let (Some(seq), Some(head)) = (head_seq, head) {
                text.push_str(&format!(", the newest #{seq} with hash {head}"));
            }
            text.push('.');
            if *pruned {
                text.push_str(" Older entries were removed by history.keep_days or history.max_rows; the check starts at the oldest kept.");
            }
            if *before_chain > 0 {
                text.push_str(&format!(
                    " {before_chain} older entries were written before the trail was chained and are not checked."
                ));
            }
            text
        }
        Verdict::Broken { seq, why, entries } => format!(
            "Audit entry #{seq} does not chain: {}. ({entries} entries before it chain.)",
            why.as_str()
        ),
    }
}
