//! The cluster: several instances on one PostgreSQL database, all serving at once, one of
//! them leading (running the one core), every other forwarding to it.
//!
//! Everything that exists because there may be several instances lives here, so that a
//! single broker on SQLite reads none of it and the core knows nothing of it:
//!
//! - [`instance`]: one instance's life in its cluster (waiting for the database, following,
//!   leading), which `daemon` runs on the bound listeners;
//! - [`election`]: who leads, as a state machine over a lease (the database's in production,
//!   a fake one in its tests), timed by [`election::Timing`] (`cluster.heartbeat_ms`,
//!   `cluster.lease_ms`, `cluster.poll_ms`);
//! - [`front`]: a follower's listeners, served as a reverse proxy to the leader;
//! - [`gate`]: the leader's side of forwarding (the cluster's key, [`gate::Forwarded`]), a
//!   leaf that the leader's routers import;
//! - [`link`]: the few multiplexed connections that carry a follower's sidecar sessions to
//!   the leader, both ends (the leader's is served from `http::ipc`);
//! - [`tokens`]: the tokens every instance shares, kept in the database.
//!
//! The direction of imports: `cluster` uses `server` (to run a core for each term it leads)
//! and `http` (the front's servers); `server` and `http` import only [`gate`] and [`link`] from here.

pub(crate) mod election;
pub(crate) mod front;
pub mod gate;
pub(crate) mod instance;
pub mod link;
pub mod tokens;

pub(crate) use instance::{Joining, run};
