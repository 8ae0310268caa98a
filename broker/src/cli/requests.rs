//! `leo requests`: the pending calls only, one line each, oldest first: who asked for what,
//! where it stands, how long it has waited and how long it has left.

use std::time::SystemTime;

use leo_broker::home::Home;
use leo_protocol::requests::{PendingRequest, RequestState};

use super::api::Api;
use super::clock::human;
use super::snapshot::{Pending, STATUS_ROUTE, app_names, fetch_pending, name_claimants};
use super::style::{Style, Table};
use super::watch::{self, Form, WatchArgs};

#[derive(Debug, clap::Args)]
pub struct RequestsArgs {
    /// Print one JSON array of pending calls (with age_s and timeout_left_s) for scripts.
    #[arg(long)]
    pub json: bool,
    /// Only the calls of this agent.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Only the calls of this tool.
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    #[command(flatten)]
    pub watch: WatchArgs,
}

impl RequestsArgs {
    fn keeps(&self, r: &PendingRequest) -> bool {
        self.agent.as_ref().is_none_or(|a| *a == r.agent)
            && self.tool.as_ref().is_none_or(|t| *t == r.tool)
    }
}

pub fn run(home: &Home, args: &RequestsArgs) -> anyhow::Result<()> {
    let api = Api::new(home);
    let style = Style::detect();
    watch::run("leo requests", args.json, &args.watch, &style, |form| {
        let status: serde_json::Value = api.get(STATUS_ROUTE)?;
        let mut pending = fetch_pending(&api, SystemTime::now())?;
        pending.retain(|p| args.keeps(&p.request));
        name_claimants(&mut pending, &app_names(&status));
        match form {
            Form::Text => Ok(render(&pending, &style)),
            json => json.encode(&pending),
        }
    })
}

/// One line per call; `no pending calls` when there is none.
pub fn render(pending: &[Pending], style: &Style) -> String {
    if pending.is_empty() {
        return format!("{}\n", style.dim("no pending calls"));
    }
    table(pending, style).render("", style)
}

/// The pending calls' table, shared with `leo status`.
pub fn table<'a>(pending: impl IntoIterator<Item = &'a Pending>, style: &Style) -> Table {
    let mut t = Table::new(&["ID", "AGENT", "TOOL", "STATE", "AGE", "TIMEOUT LEFT"]);
    for p in pending {
        t.row(vec![
            p.request.id.clone(),
            p.request.agent.clone(),
            p.request.tool.clone(),
            state_cell(p, style),
            human(p.age_s),
            p.timeout_left_s.map_or_else(|| "never".into(), human),
        ]);
    }
    t
}

/// The state, parked calls (nobody has taken them yet) in yellow.
pub fn state_cell(p: &Pending, style: &Style) -> String {
    match p.request.state {
        RequestState::Parked => style.yellow(&state_text(p)),
        RequestState::Claimed => state_text(p),
    }
}

/// `parked`, or `claimed by NAME (c_…)`, or `claimed by c_…` for an app with no name.
pub fn state_text(p: &Pending) -> String {
    let r = &p.request;
    match (r.state, &r.claimed_by, &p.claimed_by_name) {
        (RequestState::Parked, _, _) => "parked".into(),
        (RequestState::Claimed, Some(by), Some(name)) => format!("claimed by {name} ({by})"),
        (RequestState::Claimed, Some(by), None) => format!("claimed by {by}"),
        (RequestState::Claimed, None, _) => "claimed".into(),
    }
}
