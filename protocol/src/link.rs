//! The wire of a cluster's links (the broker's `cluster::link`): a follower carries its agents'
//! sidecar sessions to the leader as yamux streams over an upgraded connection, and each
//! stream starts with one JSON line, a [`Preface`], saying whose session it carries; the leader
//! answers a session that reached the follower over the network with an [`Answer`] line. The
//! session's own frames (`ipc`) follow unchanged.

use serde::{Deserialize, Serialize};

/// The `Upgrade` protocol of a link (on `GET /api/v1/ipc`, with the cluster's key).
pub const UPGRADE: &str = "leo-mux";

/// The first line of every stream, from the follower: whose session it carries. A session of
/// the follower's own socket is checked by its hello, as on the leader's socket; one that
/// reached the follower over the network (`leo-mcp --url`, `GET /api/v1/ipc`) carries the
/// upgrade's credentials, which the leader checks as it checks its own upgrades and answers
/// with an [`Answer`] before the session's first frame. (No `Debug`: it carries a token.)
#[derive(Serialize, Deserialize)]
#[serde(tag = "carry", rename_all = "snake_case", deny_unknown_fields)]
pub enum Preface {
    Socket,
    Network {
        authorization: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
    },
}

/// The leader's answer to a [`Preface::Network`]: `101` and the session follows, or the
/// status and JSON body of the refusal, which the follower answers its client with.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
}
