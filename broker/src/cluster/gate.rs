//! The leader's side of forwarding: the headers a follower's front sends (`Leo-Cluster-Key`,
//! `Leo-Via`, `Leo-Sidecar-Pipe`), the cluster's key as the leader holds it, and [`gate`], the
//! leader's outermost layer, which marks what a follower forwarded as [`Forwarded`].
//!
//! Why a module of its own, apart from the front: both sides of the cluster read it. The
//! leader's routers (`http::{auth, events, ipc, mcp}`) ask whether a request was
//! [`Forwarded`], the core's `server` serves with the [`ClusterKey`], and the follower's front
//! (`cluster::front`) writes the headers. So it is a leaf: it imports nothing from `http`,
//! `server` or the rest of `cluster`, and every one of them may import it without a circle.

use std::sync::{Arc, RwLock};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderName, Request};
use axum::response::{IntoResponse, Response};
use leo_protocol::ErrorCode;
use tracing::info;

use crate::refusal::Refusal;

/// The header that carries the cluster's key from a follower to the leader.
pub const CLUSTER_KEY: HeaderName = HeaderName::from_static("leo-cluster-key");
/// The header that names the follower a forwarded request came through.
pub const VIA: HeaderName = HeaderName::from_static("leo-via");
/// The header that marks the IPC upgrade a follower opens for a sidecar on its own
/// `run/sidecar.sock` (`open_ipc`): the one forwarded upgrade without a bearer token, whose
/// hello the leader checks. Never taken from a client (`headers_for_leader`).
pub const PIPE: HeaderName = HeaderName::from_static("leo-sidecar-pipe");
/// The cluster's key, as the leader holds it to check what followers forward: the current one,
/// and for a grace after `leo cluster rotate-key` the one it replaced (`cluster` keeps both up
/// to date from the database while this instance leads).
#[derive(Clone)]
pub struct ClusterKey(Arc<RwLock<Keys>>);

type Keys = (Arc<str>, Option<Arc<str>>);

impl ClusterKey {
    pub fn new(current: &str, previous: Option<&str>) -> ClusterKey {
        ClusterKey(Arc::new(RwLock::new((
            current.into(),
            previous.map(Into::into),
        ))))
    }

    /// The keys the database holds now.
    pub fn set(&self, current: &str, previous: Option<&str>) {
        if let Ok(mut keys) = self.0.write()
            && (&*keys.0, keys.1.as_deref()) != (current, previous)
        {
            info!("the cluster's key changed");
            *keys = (current.into(), previous.map(Into::into));
        }
    }

    /// Whether `presented` is one of the keys (both compared, in constant time).
    fn accepts(&self, presented: &[u8]) -> bool {
        let Ok(keys) = self.0.read() else {
            return false;
        };
        let current = crate::agent_tokens::ct_eq_bytes(presented, keys.0.as_bytes());
        let previous = keys
            .1
            .as_ref()
            .is_some_and(|p| crate::agent_tokens::ct_eq_bytes(presented, p.as_bytes()));
        current | previous
    }
}

/// A request a follower forwarded with the cluster's key: which instance it came through.
#[derive(Debug, Clone)]
pub struct Forwarded {
    pub via: String,
    /// The follower's own pipe for a sidecar on its socket (`PIPE`), not a client's request.
    pub pipe: bool,
}

/// The leader's outermost layer: a request with the right `Leo-Cluster-Key` is marked
/// [`Forwarded`] (the Host and Origin checks were the follower's, see `check_host` and
/// `mcp::check`) with its `Leo-Via`; a wrong key, or a `Leo-Via` without the key, is `401`.
pub async fn gate(
    State(key): State<ClusterKey>,
    mut req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let presented = req.headers().get(CLUSTER_KEY).map(|v| v.as_bytes());
    let via = req.headers().get(VIA);
    match (presented, via) {
        (None, None) => next.run(req).await,
        (None, Some(_)) => {
            Refusal::new(ErrorCode::Unauthorized, "Leo-Via without the cluster's key")
                .into_response()
        }
        (Some(presented), via) => {
            if !key.accepts(presented) {
                return Refusal::new(ErrorCode::Unauthorized, "not this cluster's key")
                    .into_response();
            }
            let via = via
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty() && v.len() <= 64)
                .unwrap_or("?")
                .to_owned();
            let pipe = req.headers().contains_key(PIPE);
            req.extensions_mut().insert(Forwarded { via, pipe });
            next.run(req).await
        }
    }
}
