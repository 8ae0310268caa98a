//! `leo cancel ID`: the operator ends a live call, as the console's Cancel button does. The
//! agent gets `cancelled` and the apps `client_tool.cancelled` with `cancelled_by_operator`.

use leo_broker::home::Home;
use leo_protocol::requests::RequestAck;

use super::api::Api;

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The request id, as `leo requests` lists it (`r_…`).
    #[arg(value_name = "ID")]
    pub id: String,
}

pub fn run(home: &Home, args: &CancelArgs) -> anyhow::Result<()> {
    let id = args.id.trim();
    // The id goes into the path: anything but an id's characters could aim at another route.
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(anyhow::Error::new(BadId(args.id.clone())));
    }
    let ack: RequestAck =
        Api::new(home).post(&format!("/api/v1/client-tools/requests/{id}/cancel"))?;
    println!("cancelled {}", ack.id);
    Ok(())
}

/// An id no request can have; a bad argument (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a request id (they look like r_…; leo requests lists them)")]
pub struct BadId(pub String);
