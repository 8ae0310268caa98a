//! `leo cancel ID`: the operator ends a live call, as the console's Cancel button does. The
//! agent gets `cancelled` and the apps `client_tool.cancelled` with `cancelled_by_operator`.

use std::io::Write;

use leo_broker::home::Home;
use leo_protocol::requests::RequestAck;

use super::api::Api;
use crate::error::CliError;

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The request id, as `leo requests` lists it (`r_…`).
    #[arg(value_name = "ID")]
    pub id: String,
}

pub fn run(home: &Home, args: &CancelArgs) -> crate::error::Result {
    let id = request_id(&args.id)?;
    let ack: RequestAck =
        Api::new(home).post(&format!("/api/v1/client-tools/requests/{id}/cancel"))?;
    writeln!(std::io::stdout(), "cancelled {}", ack.id)?;
    Ok(())
}

/// `text` as a request id. The id goes into a path: anything but an id's characters could aim
/// at another route, and what does not start `r_` is no request id at all (a bad argument,
/// exit 2).
pub fn request_id(text: &str) -> Result<&str, CliError> {
    let id = text.trim();
    let rest = id.strip_prefix("r_").unwrap_or_default();
    if rest.is_empty()
        || !rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(CliError::BadArgument(format!(
            "{text:?} is not a request id (they look like r_…; leo requests lists them)"
        )));
    }
    Ok(id)
}
