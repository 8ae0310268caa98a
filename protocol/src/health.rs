//! `GET /healthz` and `GET /readyz`: what a load balancer or an orchestrator asks of every
//! instance, without a token.
//!
//! Two questions, kept apart because they call for different actions: `/healthz` says the
//! process serves (a failing one is restarted), `/readyz` whether it can take work now (one
//! that is not is left out of the rotation, not restarted: a follower whose database is away
//! comes back by itself). `/readyz` answers `200` when ready and `503` when not, with the same
//! body either way.

use serde::{Deserialize, Serialize};

/// `status` of a live process.
pub const OK: &str = "ok";
/// `status` of an instance that takes work.
pub const READY: &str = "ready";
/// `status` of an instance that does not, now.
pub const NOT_READY: &str = "not_ready";

/// The body of `GET /healthz`: `{"status":"ok"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
}

/// The body of `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    /// [`READY`] or [`NOT_READY`].
    pub status: String,
    /// `single` (a broker on its own, SQLite), `leader` (it decides every call of its
    /// cluster) or `follower` (it forwards to the leader, or waits for the database).
    pub role: String,
    /// This instance's id, in a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The cluster's leader, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<Leader>,
    /// Why it is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The leader of a cluster, as `/readyz` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    pub instance: String,
    /// Where its peers reach it, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Readiness {
    /// An instance in `role` that is ready when `reason` is `None`.
    pub fn new(role: &str, reason: Option<String>) -> Readiness {
        Readiness {
            status: if reason.is_none() { READY } else { NOT_READY }.to_owned(),
            role: role.to_owned(),
            instance: None,
            leader: None,
            reason,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.reason.is_none()
    }
}
