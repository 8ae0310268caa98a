//! `leo requests`: the pending calls, one line each, oldest first: who asked for what,
//! where it stands, how long it has waited and how long it has left. `--ended`: the history of
//! ended calls instead, newest first, with each outcome and duration.

use std::time::SystemTime;

use leo_broker::home::Home;
use leo_protocol::requests::{PendingRequest, RequestState};

use super::api::Api;
use leo_protocol::history::{CallOutcome, EndedList, EndedRequest};

use super::clock::{age_s, human};
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
    /// The ended calls (the history), newest first, instead of the pending ones.
    #[arg(long)]
    pub ended: bool,
    /// With --ended: only this outcome (result, error, timeout, cancelled, no_client).
    #[arg(long, value_name = "OUTCOME", requires = "ended")]
    pub outcome: Option<String>,
    /// With --ended: at most this many calls (1 to 500).
    #[arg(long, value_name = "N", requires = "ended", default_value_t = 20)]
    pub limit: u32,
    #[command(flatten)]
    pub watch: WatchArgs,
}

impl RequestsArgs {
    fn keeps(&self, r: &PendingRequest) -> bool {
        self.agent.as_ref().is_none_or(|a| *a == r.agent)
            && self.tool.as_ref().is_none_or(|t| *t == r.tool)
    }
}

pub fn run(home: &Home, args: &RequestsArgs) -> crate::error::Result {
    let api = Api::new(home);
    let style = Style::detect();
    if args.ended {
        let route = ended_route(args);
        return watch::run(
            "leo requests --ended",
            args.json,
            &args.watch,
            &style,
            |form| {
                let list: EndedList = api.get(&route)?;
                match form {
                    Form::Text => Ok(render_ended(&list.calls, SystemTime::now(), &style)),
                    json => Ok(json.encode(&list.calls)?),
                }
            },
        );
    }
    watch::run("leo requests", args.json, &args.watch, &style, |form| {
        let status: serde_json::Value = api.get(STATUS_ROUTE)?;
        let mut pending = fetch_pending(&api, SystemTime::now())?;
        pending.retain(|p| args.keeps(&p.request));
        name_claimants(&mut pending, &app_names(&status));
        match form {
            Form::Text => Ok(render(&pending, &style)),
            json => Ok(json.encode(&pending)?),
        }
    })
}

/// The history route with the flags' filters.
fn ended_route(args: &RequestsArgs) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("state", "ended");
    q.append_pair("limit", &args.limit.to_string());
    for (key, value) in [
        ("agent", &args.agent),
        ("tool", &args.tool),
        ("outcome", &args.outcome),
    ] {
        if let Some(v) = value {
            q.append_pair(key, v);
        }
    }
    format!("/api/v1/client-tools/requests?{}", q.finish())
}

/// One line per ended call, newest first; `no ended calls` when there is none.
pub fn render_ended(calls: &[EndedRequest], now: SystemTime, style: &Style) -> String {
    if calls.is_empty() {
        return format!("{}\n", style.dim("no ended calls"));
    }
    let mut t = Table::new(&["ID", "AGENT", "TOOL", "OUTCOME", "APP", "DURATION", "ENDED"]);
    for c in calls {
        let outcome = match (&c.error_code, &c.reason) {
            (Some(code), _) => format!("error {code}"),
            (None, Some(reason)) if c.outcome != CallOutcome::Timeout => {
                format!("{} ({reason})", c.outcome.as_str())
            }
            _ => c.outcome.as_str().to_owned(),
        };
        let outcome = match c.outcome {
            CallOutcome::Result => outcome,
            _ => style.yellow(&outcome),
        };
        let app = c.app.as_ref().map_or_else(
            || "-".to_owned(),
            |a| a.name.clone().unwrap_or_else(|| a.client_id.to_string()),
        );
        t.row(vec![
            c.id.to_string(),
            c.agent.clone(),
            c.tool.clone(),
            outcome,
            app,
            millis(c.duration_ms),
            format!("{} ago", human(age_s(&c.ended_at, now))),
        ]);
    }
    t.render("", style)
}

/// A duration in milliseconds: `340ms`, `2.5s`, then as `human`.
fn millis(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => human(ms / 1000),
    }
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
            p.request.id.to_string(),
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
        RequestState::Parked | RequestState::AwaitingApproval => style.yellow(&state_text(p)),
        RequestState::Claimed => state_text(p),
    }
}

/// `parked`, or `claimed by NAME (c_…)`, or `claimed by c_…` for an app with no name.
pub fn state_text(p: &Pending) -> String {
    let r = &p.request;
    match (r.state, &r.claimed_by, &p.claimed_by_name) {
        (RequestState::Parked, _, _) => "parked".into(),
        (RequestState::AwaitingApproval, _, _) => "awaiting approval".into(),
        (RequestState::Claimed, Some(by), Some(name)) => format!("claimed by {name} ({by})"),
        (RequestState::Claimed, Some(by), None) => format!("claimed by {by}"),
        (RequestState::Claimed, None, _) => "claimed".into(),
    }
}
