//! `leo approvals [--watch]`, `leo approve ID [--edit JSON]`, `leo deny ID [--reason …]`: the
//! operator decides the calls that wait for a person's approval (docs/approvals.md). A
//! decision names the call's digest, read from the broker just before, so it holds for that
//! exact call: a call that changed in between is refused (`digest_mismatch`), never approved
//! blind.

use std::io::Write;

use leo_broker::home::Home;
use leo_protocol::approvals::{ApprovalList, ApproveBody, AwaitingApproval, Decided, DenyBody};
use leo_protocol::sanitize::{Lines, sanitize};

use super::api::Api;
use super::style::{Style, Table, clip};
use super::watch::{self, Form, WatchArgs};
use crate::error::CliError;

const ROUTE: &str = "/api/v1/approvals";

#[derive(Debug, clap::Args)]
pub struct ApprovalsArgs {
    /// Print the calls as JSON (their arguments and digests) for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub watch: WatchArgs,
}

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The request id, as `leo approvals` lists it (`r_…`).
    #[arg(value_name = "ID")]
    pub id: String,
    /// Run the call with these arguments instead (a JSON object), where the policy allows edits.
    #[arg(long, value_name = "JSON")]
    pub edit: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct DenyArgs {
    /// The request id, as `leo approvals` lists it (`r_…`).
    #[arg(value_name = "ID")]
    pub id: String,
    /// Why: the agent gets `denied: <reason>`.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

pub fn list(home: &Home, args: &ApprovalsArgs) -> crate::error::Result {
    let api = Api::new(home);
    let style = Style::detect();
    watch::run("leo approvals", args.json, &args.watch, &style, |form| {
        let list: ApprovalList = api.get(ROUTE)?;
        match form {
            Form::Text => Ok(render(&list.approvals, &style)),
            json => Ok(json.encode(&list.approvals)?),
        }
    })
}

pub fn approve(home: &Home, args: &ApproveArgs) -> crate::error::Result {
    let arguments = match &args.edit {
        None => None,
        Some(text) => Some(
            serde_json::from_str(text)
                .map_err(|e| CliError::BadArgument(format!("--edit: not JSON ({e})")))?,
        ),
    };
    let (api, call) = awaiting(home, &args.id)?;
    let body = ApproveBody {
        digest: call.digest,
        arguments,
    };
    let decided: Decided = api.post_body(&decision_route(&call.id, "approve"), json(&body)?)?;
    let edited = if decided.edited {
        " with edited arguments"
    } else {
        ""
    };
    writeln!(std::io::stdout(), "approved {}{edited}", decided.id)?;
    Ok(())
}

pub fn deny(home: &Home, args: &DenyArgs) -> crate::error::Result {
    let (api, call) = awaiting(home, &args.id)?;
    let body = DenyBody {
        digest: call.digest,
        reason: args.reason.clone(),
    };
    let decided: Decided = api.post_body(&decision_route(&call.id, "deny"), json(&body)?)?;
    writeln!(std::io::stdout(), "denied {}", decided.id)?;
    Ok(())
}

/// The awaiting call `id`, as the broker lists it now.
fn awaiting(home: &Home, id: &str) -> Result<(Api, AwaitingApproval), CliError> {
    let id = super::cancel::request_id(id)?;
    let api = Api::new(home);
    let list: ApprovalList = api.get(ROUTE)?;
    let call = list
        .approvals
        .into_iter()
        .find(|a| a.id.as_str() == id)
        .ok_or_else(|| {
            CliError::Other(anyhow::anyhow!(
                "no call {id} awaits approval (leo approvals lists those that do)"
            ))
        })?;
    Ok((api, call))
}

fn decision_route(id: &str, what: &str) -> String {
    format!("{ROUTE}/{id}/{what}")
}

fn json<T: serde::Serialize>(body: &T) -> Result<Vec<u8>, CliError> {
    Ok(serde_json::to_vec(body).map_err(anyhow::Error::from)?)
}

/// A table of the awaiting calls; arguments shown inert (no control or bidi characters).
fn render(calls: &[AwaitingApproval], style: &Style) -> String {
    if calls.is_empty() {
        return "no calls await approval\n".into();
    }
    let mut t = Table::new(&[
        "ID",
        "AGENT",
        "TOOL",
        "SINCE",
        "EXPIRES",
        "EDIT",
        "ARGUMENTS",
    ]);
    for c in calls {
        let args = sanitize(c.arguments.get(), Lines::Join);
        t.row(vec![
            c.id.to_string(),
            sanitize(&c.agent, Lines::Join).into_owned(),
            sanitize(&c.tool, Lines::Join).into_owned(),
            c.requested_at.get(11..19).unwrap_or_default().to_owned(),
            c.expires_at.get(11..19).unwrap_or_default().to_owned(),
            if c.editable { "yes" } else { "no" }.to_owned(),
            clip(&args, 60),
        ]);
    }
    t.render("", style)
}
