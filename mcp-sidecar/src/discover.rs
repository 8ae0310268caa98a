//! Keeps every client on the `initialize` handshake by refusing `server/discover`, when
//! `--no-discover` (`LEO_MCP_DISCOVER=0`) turns the 2026-07-28 lifecycle off; it is on by
//! default, since every measured harness works with it (Claude Code uses it; codex and
//! opencode send `initialize`).
//!
//! rmcp 3.11 implements the 2026-07-28 lifecycle, where a client may open with `server/discover`
//! and never send `initialize`. There, `list_changed` only travels on a `subscriptions/listen`
//! stream, and `clientInfo` (which picks native or fallback) arrives per request. Turned off,
//! `server/discover` is answered with -32601 so that discover-first clients fall back to
//! `initialize`, which every harness we know speaks. rmcp would answer a
//! discover without complete `_meta` with -32602 before any handler runs, so the refusal is
//! made here, on the transport, for every `server/discover` whatever its shape.
//!
//! By default, this wrapper is left out and rmcp serves both lifecycles: `discover` is
//! answered from the server info, a request with complete `_meta` starts a stateless session
//! (its client info picks native or fallback, see `server`), and `list_changed` travels on
//! `subscriptions/listen` (see `native::listen`). Server-to-client requests do not exist
//! there, so an app's question travels as an `input_required` result (see `mrtr`).

use std::borrow::Cow;

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, DiscoverRequestMethod, ErrorData, ServerJsonRpcMessage,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The method refused.
pub const DISCOVER: &str = "server/discover";

/// The variable behind `--discover`.
pub const ENV: &str = "LEO_MCP_DISCOVER";

/// A transport that answers `server/discover` itself and passes everything else through.
pub struct RefuseDiscover<T> {
    inner: T,
}

impl<T> RefuseDiscover<T> {
    pub fn new(inner: T) -> Self {
        RefuseDiscover { inner }
    }
}

fn is_discover(msg: &ClientJsonRpcMessage) -> bool {
    match msg {
        ClientJsonRpcMessage::Request(req) => {
            matches!(req.request, ClientRequest::DiscoverRequest(_))
                || req.request.method() == DISCOVER
        }
        _ => false,
    }
}

impl<T> Transport<RoleServer> for RefuseDiscover<T>
where
    T: Transport<RoleServer>,
{
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        "RefuseDiscover".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    /// rmcp polls `receive` inside a `select!` and may drop it at any await, so the refusal is
    /// written by its own task: nothing here awaits after a discover has been taken off the
    /// wire, and the next await is the inner (cancel-safe) `receive`.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let msg = self.inner.receive().await?;
            if !is_discover(&msg) {
                return Some(msg);
            }
            let ClientJsonRpcMessage::Request(req) = msg else {
                continue;
            };
            tracing::debug!("refused server/discover; the client should fall back to initialize");
            let refusal = ServerJsonRpcMessage::error(
                ErrorData::method_not_found::<DiscoverRequestMethod>(),
                Some(req.id),
            );
            let sending = self.inner.send(refusal);
            tokio::spawn(async move {
                if let Err(e) = sending.await {
                    tracing::debug!(error = %e, "cannot answer server/discover");
                }
            });
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
