//! Wiring: the broker link, the reconnect task and the MCP service on stdio.
//!
//! The MCP service starts at once, whatever the broker's state, so `initialize` is answered in
//! milliseconds; the broker connection comes up beside it and every later answer reflects it.
//!
//! **Decision: stdin closing ends the agent's calls at once, as `agent_gone`.** A harness that
//! closes stdin (it quit, or was killed) will read no answer, but rmcp goes on draining
//! in-flight responses for five seconds. So the moment the transport reads the end of stdin,
//! the reconnect task closes the broker connection and stops: the broker ends every call of the
//! session with `cancelled` (reason `agent_gone`, the same as when the process exits) and the
//! apps get `client_tool.cancelled` without waiting for rmcp.

use rmcp::service::ServerInitializeError;
use rmcp::transport::IntoTransport;
use rmcp::{RoleServer, ServiceExt};
use tracing::{debug, info};

use crate::cli::Settings;
use crate::discover::RefuseDiscover;
use crate::error::{Result, SidecarError};
use crate::link::BrokerLink;
use crate::reconnect;
use crate::server::Sidecar;
use crate::session::new_session_id;

/// Serves MCP on stdin/stdout until the harness closes it.
pub async fn run(settings: Settings) -> Result<()> {
    let link = BrokerLink::new();
    let session = new_session_id(&settings.agent);
    crate::trace::set_session(&session);
    crate::trace::start_from_env();
    match settings.remote() {
        Some(remote) => {
            info!(agent = %settings.agent, session, url = remote.url(), "leo-mcp starting")
        }
        None => {
            info!(agent = %settings.agent, session, home = %settings.home.root.display(), "leo-mcp starting")
        }
    }
    let (input, output) = crate::stdio::streams();
    tokio::spawn(reconnect::run(
        settings.clone(),
        session,
        link.clone(),
        input.closed(),
    ));

    let stdio = IntoTransport::<RoleServer, std::io::Error, _>::into_transport((input, output));
    let modern = settings.discover;
    let sidecar = Sidecar::new(settings, link);
    let served = if modern {
        sidecar.serve(stdio).await
    } else {
        sidecar.serve(RefuseDiscover::new(stdio)).await
    };
    let service = match served {
        Ok(service) => service,
        // The harness went away before initializing (a config check, a cancelled start).
        Err(ServerInitializeError::ConnectionClosed(why)) => {
            debug!(why, "stdin closed before initialize");
            return Ok(());
        }
        Err(e) => return Err(SidecarError::Serve(Box::new(e))),
    };
    let reason = service.waiting().await.map_err(SidecarError::Join)?;
    info!(?reason, "harness closed the session");
    crate::trace::shutdown().await;
    Ok(())
}
