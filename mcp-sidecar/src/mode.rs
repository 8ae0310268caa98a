//! Deciding native or fallback for this session.
//!
//! `--mode native|fallback` wins; `auto` looks up the harness's `clientInfo.name` in the built-in
//! capability table. The choice is made once, at `initialize`, and kept for the life of the
//! process: a harness never sees its tool surface change shape mid-session.

use std::sync::OnceLock;

use leo_protocol::ipc::Mode;

use crate::caps;
use crate::cli::ModeChoice;

/// The mode to use for a harness named `client_name`.
pub fn resolve(choice: ModeChoice, client_name: Option<&str>) -> Mode {
    match choice {
        ModeChoice::Native => Mode::Native,
        ModeChoice::Fallback => Mode::Fallback,
        ModeChoice::Auto => match client_name {
            Some(name) => caps::builtin().mode_for(name),
            None => Mode::Fallback,
        },
    }
}

/// The mode announced in `hello` before `initialize` has been seen.
pub fn provisional(choice: ModeChoice) -> Mode {
    match choice {
        ModeChoice::Native => Mode::Native,
        ModeChoice::Auto | ModeChoice::Fallback => Mode::Fallback,
    }
}

/// The session's mode, decided once.
#[derive(Debug, Default)]
pub struct SessionMode {
    decided: OnceLock<Mode>,
}

impl SessionMode {
    /// Decides the mode (first call wins) and returns the decision.
    pub fn decide(&self, choice: ModeChoice, client_name: Option<&str>) -> Mode {
        *self.decided.get_or_init(|| resolve(choice, client_name))
    }

    /// The decision, if made.
    pub fn get(&self) -> Option<Mode> {
        self.decided.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_and_auto_uses_the_table() {
        let table = caps::builtin();
        assert_eq!(
            resolve(ModeChoice::Native, Some("codex-mcp-client")),
            Mode::Native
        );
        assert_eq!(
            resolve(ModeChoice::Fallback, Some("claude-code")),
            Mode::Fallback
        );
        for name in [
            "claude-code",
            "opencode",
            "codex-mcp-client",
            "unknown-harness",
        ] {
            assert_eq!(
                resolve(ModeChoice::Auto, Some(name)),
                table.mode_for(name),
                "{name}"
            );
        }
        assert_eq!(resolve(ModeChoice::Auto, None), Mode::Fallback);
        let m = SessionMode::default();
        let first = m.decide(ModeChoice::Native, Some("x"));
        assert_eq!(first, Mode::Native);
        assert_eq!(
            m.decide(ModeChoice::Fallback, Some("y")),
            first,
            "decided once"
        );
    }
}
