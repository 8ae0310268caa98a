//! Offer tools to AI coding agents from a Rust app, through the local Leo broker.
//!
//! An app registers groups of tools and answers their calls; agents (Claude Code, opencode,
//! codex… each through its `leo-mcp`) see them as their own tools. This crate is the app side:
//! it holds the broker's event stream, registers the groups, claims each call, runs its
//! handler, posts the answer, and keeps doing so across broker restarts.
//!
//! ```no_run
//! use leo_app::{App, Call, JsonSchema, Reply, Tool};
//! use serde::Deserialize;
//!
//! /// The input schema is derived from this struct, doc comments included.
//! #[derive(Deserialize, JsonSchema)]
//! struct Args {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), leo_app::Error> {
//!     let greet = Tool::typed("greet", "Greet someone by name", |args: Args, call: Call| async move {
//!         tokio::select! {
//!             () = call.cancelled() => Err(Reply::error("cancelled", "no greeting")),
//!             () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
//!                 Ok(Reply::text(format!("Hello, {}!", args.name)))
//!             }
//!         }
//!     })
//!     .timeout_s(60);
//!     // $LEO_HOME/run/leo.sock with the operator token; `.url(…)`, `.device(…)` to change.
//!     let app = App::builder().group("greeter", [greet]).max_concurrent(8).build()?;
//!     app.run_until(async { tokio::signal::ctrl_c().await.unwrap_or(()) }).await
//! }
//! ```
//!
//! `Tool::new` with `.schema(json!(…))` and `call.args()` is the untyped form, for schemas
//! written by hand.
//!
//! # Connecting
//!
//! By default the app connects to `$LEO_HOME/run/leo.sock` (`LEO_HOME` defaults to `~/.leo`)
//! with the operator token `state/operator.token`. `Builder::url("http://127.0.0.1:8370")`
//! uses TCP (the Host header is the URL's `host:port`, which the broker checks);
//! `Builder::device("phone")` presents the token of a paired device
//! (`state/devices/phone.token`); `token` and `token_file` take any other. Token files are read
//! at every connection attempt, so an app may start before the broker ever ran.
//!
//! The app names itself on its event stream, so `leo status`, `leo requests` and the web
//! console can tell it from other apps: `Builder::name("Photo booth")`, by default the
//! program's file name.
//!
//! # Calls
//!
//! Every `client_tool.request` for one of the app's tools is claimed, then handed to the tool's
//! handler as a `Call`; the `Reply` it returns is posted as `{ok: true, content}` or, for
//! `Reply::error`, `{ok: false, error: {code, message}}`. A claim that loses a race
//! (`already_claimed`, `owned_by_other`, `already_settled`) is dropped quietly: another
//! instance of the app answers. A handler that panics answers `internal`. A reply the broker
//! refuses (bad content, over 1 MiB) is replaced by an app error with the broker's message.
//!
//! **Cancellation.** When the broker ends a running call (timeout, the agent cancelled or went
//! away, the tool was withdrawn, or the app came back from an outage as another client), the
//! call's token is cancelled at
//! once; the handler has the cancel grace (`Builder::cancel_grace`, 5 s) to return, and is
//! dropped after it. Its reply is not posted: the call is over. At shutdown
//! (`App::run_until`) handlers are cancelled the same way, but a reply they give within the
//! grace is still posted, since those calls are still live.
//!
//! **Concurrency.** At most `max_concurrent` calls (default 64) run at once. A request that
//! arrives while every slot is taken waits in the app unclaimed, so another instance of the
//! app can take it, and leaves the queue if the broker cancels it.
//!
//! **Large results.** Content is serialized once, when the reply is made, and written to the
//! socket without another copy. `Reply::raw_content(bytes)` posts a JSON array of content
//! blocks serialized ahead of time, for an app that answers the same payload many times.
//!
//! # Reconnecting and recovery
//!
//! When the stream ends or the broker is down, the app retries with a capped, jittered
//! exponential backoff (100 ms doubling to 5 s), sends `Last-Event-ID` so a short outage
//! replays what it missed, and reopens the stream with the resume key of the last one, so the
//! broker knows it as the same client with its claims. It registers every group again (the
//! broker withdrew them with the old stream), then lists
//! `GET /api/v1/client-tools/requests?pending=1` and serves every unclaimed request for its
//! tools it has not seen yet (calls that waited while it was away because another client of the
//! same group kept the tool alive, or that were published before it subscribed), and every
//! request listed as claimed by itself that it does not run (a claim whose answer a broker kill
//! lost), without claiming again. Handlers running through the outage go on; a reply that gets
//! no answer (the broker died mid-post, or does not know the app again yet) is posted again
//! with a backoff until the broker answers, and a reply it had already taken answers
//! `already_settled`: the first accepted reply is the call's result. Only when the key has
//! expired and the app comes back as a new client are the old client's handlers cancelled
//! (its claims are parked and offered again). `App::status` follows all this.
//!
//! Errors that retrying cannot fix end `run` with an `Error` (`Error::is_fatal`): a wrong
//! setting, a token the broker refuses, or a group the broker will not register
//! (`invalid_tool`, `name_conflict`, `too_many_tools`, with the broker's message).

mod app;
mod approver;
mod call;
mod calls;
mod endpoint;
mod error;
mod offers;
mod reply;
mod sampling;
mod session;
mod tool;
mod transport;
mod worker;

pub use app::{App, Builder, DEFAULT_CANCEL_GRACE, DEFAULT_MAX_CONCURRENT, Status};
pub use approver::{Approver, Requests};
pub use call::Call;
pub use endpoint::{Endpoint, TokenSource, default_home};
pub use error::{Error, Result};
pub use leo_protocol::ErrorCode;
/// What an approver sees of a call and answers with (`leo_protocol::approvals`).
pub use leo_protocol::approvals::{AwaitingApproval, Decided, Decision, RequiredBy};
pub use leo_protocol::content::AppError;
pub use leo_protocol::input::{InputAction, InputAnswer};
pub use leo_protocol::logging::LogLevel;
pub use leo_protocol::offers::OfferKind;
pub use leo_protocol::tool::{Execution, ToolAnnotations};
pub use offers::{Notifier, Prompt, Read, Resource, ResourceTemplate};
pub use reply::{RawContent, Reply, content};
/// The derive and trait of `Tool::typed` argument types (`#[derive(JsonSchema)]`).
pub use schemars::{self, JsonSchema};
pub use tokio_util::sync::CancellationToken;
pub use tool::{Tool, schema_for};

/// The HTTP client the SDK talks to the broker with (unix socket or TCP, keep-alive), for
/// other clients of the broker's JSON routes: `leo`'s CLI and the relay bench use it.
pub mod http {
    pub use crate::transport::{Answer, Client, Connector, REQUEST_TIMEOUT, connector};
}
