//! How a `leo` command failed, and the exit code that says so: the one place that maps errors to
//! exit codes (docs/cli.md lists them).
//!
//! - 0: done. A closed stdout (`leo status | head`) is done too, not a failure.
//! - 1: the command failed, or the broker answered with an error.
//! - 2: the broker cannot be reached, or an argument is bad (clap exits 2 for the ones it sees).
//! - 130: Ctrl-C (`leo call`).
//!
//! Commands that decide their own code (`leo call` prints how the call ended, `leo doctor` its
//! checks, `leo service` what it did) have already said everything and return
//! [`CliError::Reported`].

use std::io::ErrorKind;

use crate::commands::api::GetError;

/// The broker cannot be reached, or the command line is wrong.
pub const EXIT_UNREACHABLE: u8 = 2;
/// Ctrl-C.
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// An argument clap let through but the command refuses (a request id, a tool or webhook
    /// name, a tools file): exit 2, as clap's own usage errors.
    #[error("{0}")]
    BadArgument(String),
    /// A request to the broker's operator socket failed: exit 2 when no broker runs there,
    /// 1 when one answered with an error.
    #[error(transparent)]
    Broker(#[from] GetError),
    /// Writing the answer failed: a closed pipe is success, anything else exit 1.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Any other failure: exit 1.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
    /// The command printed its outcome itself and ends with this code.
    #[error("exit code {0}")]
    Reported(u8),
}

impl From<leo_broker::BrokerError> for CliError {
    fn from(e: leo_broker::BrokerError) -> CliError {
        CliError::Other(e.into())
    }
}

impl CliError {
    /// The process's exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::BadArgument(_) => EXIT_UNREACHABLE,
            CliError::Broker(GetError::Unreachable(u)) if u.not_running() => EXIT_UNREACHABLE,
            CliError::Reported(code) => *code,
            CliError::Broker(_) | CliError::Io(_) | CliError::Other(_) => 1,
        }
    }

    /// True when the reader of stdout went away (`leo status | head`): the command is done.
    pub fn is_broken_pipe(&self) -> bool {
        let broken = |e: &std::io::Error| e.kind() == ErrorKind::BrokenPipe;
        match self {
            CliError::Io(e) => broken(e),
            CliError::Other(e) => e
                .chain()
                .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(broken)),
            _ => false,
        }
    }

    /// What to print on stderr after `leo: `; `None` when the command already said it all.
    pub fn message(&self) -> Option<String> {
        match self {
            CliError::Reported(_) => None,
            CliError::Other(e) => Some(format!("{e:#}")),
            e => {
                // Each cause once, as anyhow's `{:#}` says them.
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    text.push_str(&format!(": {c}"));
                    cause = c.source();
                }
                Some(text)
            }
        }
    }
}

/// A command's outcome.
pub type Result<T = ()> = std::result::Result<T, CliError>;

/// The outcome of a command that printed everything itself and ends with `code`.
pub fn reported(code: u8) -> Result {
    if code == 0 {
        Ok(())
    } else {
        Err(CliError::Reported(code))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Error, ErrorKind};
    use std::path::PathBuf;

    use anyhow::Context;

    use super::*;
    use crate::commands::Unreachable;

    #[test]
    fn each_failure_has_its_documented_exit_code() {
        let not_running = GetError::Unreachable(Unreachable::NotRunning {
            socket: PathBuf::from("/x/run/leo.sock"),
        });
        let other_io = GetError::Unreachable(Unreachable::Connect {
            socket: PathBuf::from("/x/run/leo.sock"),
            source: Error::from(ErrorKind::PermissionDenied),
        });
        let cases = [
            (CliError::BadArgument("bad id".into()), 2),
            (CliError::Broker(not_running), 2),
            (CliError::Broker(other_io), 1),
            (CliError::Other(anyhow::anyhow!("failed")), 1),
            (CliError::Io(Error::from(ErrorKind::Other)), 1),
            (CliError::Reported(130), 130),
        ];
        for (error, code) in cases {
            assert_eq!(error.exit_code(), code, "{error:?}");
        }
        assert_eq!(reported(0).ok(), Some(()));
        assert!(CliError::Reported(3).message().is_none());
    }

    #[test]
    fn a_closed_stdout_is_success_however_deep_the_cause() {
        let pipe = || Error::from(ErrorKind::BrokenPipe);
        assert!(CliError::Io(pipe()).is_broken_pipe());
        let wrapped: anyhow::Result<()> = Err(pipe()).context("writing the status");
        let Err(wrapped) = wrapped else {
            panic!("an error")
        };
        assert!(CliError::from(wrapped).is_broken_pipe());
        assert!(!CliError::Io(Error::from(ErrorKind::NotFound)).is_broken_pipe());
        assert!(!CliError::BadArgument("x".into()).is_broken_pipe());
    }

    #[test]
    fn the_message_names_every_cause_once() {
        let e = CliError::Broker(GetError::Unreachable(Unreachable::Connect {
            socket: PathBuf::from("/x/run/leo.sock"),
            source: Error::new(ErrorKind::PermissionDenied, "denied"),
        }));
        assert_eq!(
            e.message().as_deref(),
            Some("cannot connect to /x/run/leo.sock: denied")
        );
    }
}
