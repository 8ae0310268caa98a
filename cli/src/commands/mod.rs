//! The operator commands that talk to a running broker: `leo status`, `leo requests`,
//! `leo cancel` and `leo call`. They live in the binary, not the library: they are clients of the broker's
//! public doors (`run/leo.sock` with the operator token, `run/sidecar.sock` with the agent
//! token), and use nothing of its internals, so what they show is what any app or sidecar sees.
//!
//! Their exit codes are `crate::error`'s: 0 done, 1 the call ended with an error (`leo call`)
//! or the broker answered with one, 2 the broker cannot be reached or the command line is
//! wrong, 130 Ctrl-C.

pub mod api;
pub mod approvals;
pub mod audit;
pub mod call;
pub mod cancel;
pub mod clock;
pub mod completions;
pub mod doctor;
pub mod requests;
pub mod service;
pub mod snapshot;
pub mod status;
pub mod style;
pub mod tools;
pub mod watch;
pub mod webhook;

use leo_broker::error::BrokerError;
use leo_broker::home::Home;
use leo_broker::read_token_file;
use std::path::{Path, PathBuf};

/// `--help` text on exit codes for `leo status` and `leo requests`.
pub const EXIT_CODES: &str = "Exit codes: 0 done; 1 the broker answered with an error; 2 the \
broker is not running, or a bad argument. With --watch it runs until Ctrl-C and waits out \
broker restarts.";

/// `--help` text for `leo cancel`.
pub const CANCEL_HELP: &str = "The agent's call ends with cancelled: the operator cancelled the \
call; apps get client_tool.cancelled with reason cancelled_by_operator.

Exit codes: 0 cancelled; 1 the broker refused (unknown_request, already_settled: the call had \
already ended); 2 the broker is not running, or ID is not a request id.";

/// `--help` text for `leo approvals`, `leo approve` and `leo deny`.
pub const APPROVALS_HELP: &str = "A call needs approval when its app registered the tool with \
approval: \"required\" or a rule of approvals.require in config.yaml holds it (docs/approvals.md). \
It waits, unseen by any app, until approved, denied, or approvals.expire_s passes (then the \
agent gets approval_timeout). A decision names the call's digest, so it holds for that exact call.

Exit codes: 0 done; 1 the broker refused (already_decided, digest_mismatch, forbidden); 2 the \
broker is not running, or ID is not a request id.";

/// `--help` text for `leo tools approve`.
pub const APPROVE_HELP: &str = "With client_tools.pin_definitions: true, a tool an app re-registers with another definition keeps its previous one until approved; leo status marks it \"awaiting approval\".

Exit codes: 0 approved; 1 the broker refused (not_found: no changed definition of that tool awaits approval); 2 the broker is not running, or NAME is not a tool name.";

/// `--help` text for `leo call`.
pub const CALL_HELP: &str = "Example: leo call reverse_text '{\"text\": \"hello\"}'

Text blocks of the result print as plain text, other blocks as one JSON line each.

Exit codes: 0 the tool answered; 1 the call ended with an error, printed as <code>: <message> \
on stderr (the app's own error, timeout, no_client, denied, invalid_arguments, cancelled); 2 the \
call could not be made (bad ARGS_JSON, broker not running, session refused, connection lost); \
130 interrupted: Ctrl-C cancels the call first.";

/// How to start what is not running, said after every "broker not running".
pub const START: &str = "start it with `leo broker` (same LEO_HOME or --home)";

/// Why a door of the broker (`run/leo.sock`, `run/sidecar.sock`) could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// The socket is missing or refuses connections: both mean nothing listens there.
    #[error("broker not running (nothing listens on {}); {START}", socket.display())]
    NotRunning { socket: PathBuf },
    #[error(
        "broker not running: no {which} token at {} yet; {START}",
        path.display()
    )]
    NoToken { which: &'static str, path: PathBuf },
    /// A broker holds this home (`run/broker.lock` names it) but does not answer on its socket:
    /// it is starting, stopping or stuck, and another start would be refused.
    #[error(
        "the broker of this home (pid {pid}) does not answer on {}; wait for it, or stop it (`kill {pid}`) and start it again",
        socket.display()
    )]
    Unanswered { pid: u32, socket: PathBuf },
    #[error(transparent)]
    Token(BrokerError),
    #[error("cannot connect to {}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The `--url` broker: not listening, not reachable, or its TLS refused.
    #[error("cannot reach the broker at {endpoint}")]
    Remote {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
}

impl Unreachable {
    /// True when no broker is there (as opposed to a token or socket that is wrong); a `--url`
    /// broker that cannot be reached, for whatever reason, counts as not there (exit 2).
    pub fn not_running(&self) -> bool {
        matches!(
            self,
            Unreachable::NotRunning { .. }
                | Unreachable::Unanswered { .. }
                | Unreachable::NoToken { .. }
                | Unreachable::Remote { .. }
        )
    }

    /// A failed connect to `socket`: nobody listens there, or something else went wrong.
    pub fn connecting(socket: &Path, source: std::io::Error) -> Unreachable {
        use std::io::ErrorKind::{ConnectionRefused, NotFound};
        let socket = socket.to_path_buf();
        // `run/leo.sock` → the home, whose lock file names the broker that runs there.
        let home = socket.parent().and_then(Path::parent).map(Home::new);
        let holder = home.as_ref().and_then(leo_broker::home::holder);
        match source.kind() {
            NotFound | ConnectionRefused => match holder.and_then(|h| h.pid) {
                Some(pid) => Unreachable::Unanswered { pid, socket },
                None => Unreachable::NotRunning { socket },
            },
            _ => Unreachable::Connect { socket, source },
        }
    }
}

/// Reads the `which` (operator, agent) token; its absence means the broker never ran here.
pub fn read_token(path: &Path, which: &'static str) -> Result<String, Unreachable> {
    read_token_file(path).map_err(|e| match &e {
        BrokerError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Unreachable::NoToken {
                which,
                path: path.to_path_buf(),
            }
        }
        _ => Unreachable::Token(e),
    })
}
