//! `leo status`: what runs now, readable at a glance: apps, agents, tools by group, pending
//! calls. `--json` prints the snapshot (see `snapshot`), `--watch` follows it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use leo_broker::home::Home;

use super::api::Api;
use super::clock::{age_s, human, timeout};
use super::requests;
use super::snapshot::Snapshot;
use super::style::{Style, Table, clip};
use super::watch::{self, Form, WatchArgs};

/// How many pending calls `leo status` lists; `leo requests` lists them all.
const OLDEST_SHOWN: usize = 5;
/// Descriptions are cut to this many characters.
const DESCRIPTION_WIDTH: usize = 60;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print one JSON object (apps, agents, groups, pending, revision, seq) for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub watch: WatchArgs,
}

pub fn run(home: &Home, args: &StatusArgs) -> crate::error::Result {
    let api = Api::new(home);
    let style = Style::detect();
    watch::run("leo status", args.json, &args.watch, &style, |form| {
        let snapshot = Snapshot::fetch(&api)?;
        match form {
            Form::Text => Ok(render(&snapshot, SystemTime::now(), &style)),
            json => Ok(json.encode(&snapshot)?),
        }
    })
}

/// The text form: a summary line, then one section each for apps, agents, tools and pending
/// calls; an empty section says `none`.
pub fn render(s: &Snapshot, now: SystemTime, style: &Style) -> String {
    let tool_count: usize = s.groups.iter().map(|g| g.tools.len()).sum();
    let mut out = format!(
        "{} · revision {} · seq {} · {} · {} · {} · {}\n",
        style.bold("leo broker"),
        s.revision,
        s.seq,
        count(s.apps.len(), "app"),
        count(s.agents.len(), "agent"),
        count(tool_count, "tool"),
        count(s.pending.len(), "pending call"),
    );
    section(&mut out, style, "Apps", s.apps.is_empty(), || {
        apps_table(s, now, style)
    });
    section(&mut out, style, "Agents", s.agents.is_empty(), || {
        agents_table(s, now)
    });
    section(&mut out, style, "Tools", s.groups.is_empty(), || {
        tools_table(s)
    });
    warnings(&mut out, s, style);
    pending(&mut out, s, style);
    if !s.instances.is_empty() {
        section(&mut out, style, "Instances", false, || {
            instances_table(s, now)
        });
    }
    out
}

/// The instances of a cluster, and where each app and agent is connected.
fn instances_table(s: &Snapshot, now: SystemTime) -> Table {
    let mut t = Table::new(&["INSTANCE", "HOST", "URL", "ROLE", "SEEN", "CONNECTED HERE"]);
    for i in &s.instances {
        let here = |via: &Option<String>| match via {
            Some(v) => *v == i.id,
            None => i.role == "leader",
        };
        let apps = s.apps.iter().filter(|a| here(&a.via)).count();
        let agents = s.agents.iter().filter(|a| here(&a.via)).count();
        t.row(vec![
            i.id.clone(),
            i.host.clone(),
            i.url.clone().unwrap_or_else(|| "-".into()),
            i.role.clone(),
            format!("{} ago", since(&i.last_seen, now)),
            format!("{} · {}", count(apps, "app"), count(agents, "agent")),
        ]);
    }
    t
}

fn since(stamp: &str, now: SystemTime) -> String {
    human(age_s(stamp, now))
}

/// How an app is shown: by the name it gave itself, else as unnamed with the token that
/// opened its stream (`unnamed, operator token`), which says who to ask and that a name can
/// be given (`name=` in every SDK).
fn app_label(a: &super::snapshot::App) -> String {
    match &a.name {
        Some(name) => name.clone(),
        None => format!("unnamed, {} token", a.principal),
    }
}

fn apps_table(s: &Snapshot, now: SystemTime, style: &Style) -> Table {
    let mut t = Table::new(&["CLIENT", "NAME", "WHO", "ROLE", "CONNECTED", "GROUPS"]);
    for a in &s.apps {
        t.row(vec![
            a.client_id.clone(),
            app_label(a),
            a.principal.clone(),
            role(a, style),
            format!("{} ago", since(&a.connected_at, now)),
            a.groups.join(", "),
        ]);
    }
    t
}

fn agents_table(s: &Snapshot, now: SystemTime) -> Table {
    let mut t = Table::new(&["AGENT", "SESSION", "HARNESS", "MODE", "VIA", "CONNECTED"]);
    for a in &s.agents {
        let harness = match &a.harness {
            Some(h) if h.version.is_empty() => h.name.clone(),
            Some(h) => format!("{} {}", h.name, h.version),
            None => "-".into(),
        };
        t.row(vec![
            a.agent.clone(),
            a.session.clone(),
            harness,
            a.mode.clone(),
            a.transport.clone(),
            format!("{} ago", since(&a.connected_at, now)),
        ]);
    }
    t
}

fn tools_table(s: &Snapshot) -> Table {
    let who: BTreeMap<&str, String> = s
        .apps
        .iter()
        .map(|a| (a.client_id.as_str(), app_label(a)))
        .collect();
    let mut t = Table::new(&["GROUP", "TOOL", "TIMEOUT", "SERVED BY", "DESCRIPTION"]);
    for g in &s.groups {
        for (i, tool) in g.tools.iter().enumerate() {
            let served: Vec<String> = tool
                .clients
                .iter()
                .map(|c| match who.get(c.as_str()) {
                    Some(p) => format!("{c} ({p})"),
                    None => c.clone(),
                })
                .collect();
            t.row(vec![
                if i == 0 {
                    g.group.clone()
                } else {
                    String::new()
                },
                tool_cell(tool),
                timeout(tool.timeout_s),
                served.join(", "),
                clip(&tool.description, DESCRIPTION_WIDTH),
            ]);
        }
    }
    t
}

/// The registration warnings by group; no section at all when there are none.
fn warnings(out: &mut String, s: &Snapshot, style: &Style) {
    if s.warnings.is_empty() {
        return;
    }
    out.push('\n');
    out.push_str(&style.bold("Warnings"));
    out.push('\n');
    for (group, warnings) in &s.warnings {
        for w in warnings {
            out.push_str(&format!("  {group}: {w}\n"));
        }
    }
}

/// The oldest pending calls, and how many more `leo requests` would list.
fn pending(out: &mut String, s: &Snapshot, style: &Style) {
    let title = format!("Pending calls ({})", s.pending.len());
    section(out, style, &title, s.pending.is_empty(), || {
        requests::table(s.pending.iter().take(OLDEST_SHOWN), style)
    });
    if s.pending.len() > OLDEST_SHOWN {
        out.push_str(&format!(
            "  … and {} more (leo requests lists them all)\n",
            s.pending.len() - OLDEST_SHOWN
        ));
    }
}

/// The tool's name, with whom it is offered to when not everyone, and a held definition.
fn tool_cell(tool: &super::snapshot::Tool) -> String {
    let mut cell = tool.name.clone();
    if let Some(agents) = &tool.agents {
        cell.push_str(&format!(" (for {})", agents.join(", ")));
    }
    if tool.awaiting_approval {
        cell.push_str(" (changed, awaiting approval)");
    }
    if tool.needs_approval {
        cell.push_str(" (needs approval)");
    }
    cell
}

fn section(
    out: &mut String,
    style: &Style,
    title: &str,
    empty: bool,
    table: impl FnOnce() -> Table,
) {
    out.push('\n');
    out.push_str(&style.bold(title));
    out.push('\n');
    if empty {
        out.push_str(&format!("  {}\n", style.dim("none")));
    } else {
        out.push_str(&table().render("  ", style));
    }
}

/// `provider`, `watcher`, `webhook`, or a webhook marked unhealthy with why.
fn role(a: &super::snapshot::App, style: &Style) -> String {
    match &a.webhook {
        Some(w) if !w.health.healthy => style.yellow(&format!(
            "webhook UNHEALTHY ({} failed: {})",
            w.health.failures,
            clip(w.health.last_error.as_deref().unwrap_or("-"), 60)
        )),
        Some(_) => "webhook".into(),
        None if a.provider => "provider".into(),
        None => "watcher".into(),
    }
}

/// `1 app`, `2 apps`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
