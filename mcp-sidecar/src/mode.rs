//! Deciding native or fallback for this session.
//!
//! `--mode native|fallback` wins; then the operator's `agents.NAME.mode` (from the broker's
//! `welcome`); `auto` looks up the harness's `clientInfo.name` in the built-in capability table.
//! A 2026-07-28 session of a harness the table does not know, which subscribes to
//! `tools/list_changed` before anything decided its mode, gets native tools: it said itself
//! that it re-lists. The choice is made once and kept for the life of the session: a harness
//! never sees its tool surface change shape mid-session.

use std::sync::OnceLock;

use leo_protocol::ipc::Mode;

use crate::caps;
use crate::cli::ModeChoice;

/// The mode to use for a harness named `client_name`, with the operator's mode for the agent.
pub fn resolve(choice: ModeChoice, operator: Option<Mode>, client_name: Option<&str>) -> Mode {
    match (choice, operator) {
        (ModeChoice::Native, _) => Mode::Native,
        (ModeChoice::Fallback, _) => Mode::Fallback,
        (ModeChoice::Auto, Some(mode)) => mode,
        (ModeChoice::Auto, None) => match client_name {
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
    pub fn decide(
        &self,
        choice: ModeChoice,
        operator: Option<Mode>,
        client_name: Option<&str>,
    ) -> Mode {
        *self
            .decided
            .get_or_init(|| resolve(choice, operator, client_name))
    }

    /// A 2026-07-28 harness subscribed to `tools/list_changed`: native, if nothing else has
    /// decided (`--mode`, the operator, the table knowing the harness, an earlier request).
    pub fn subscribed(
        &self,
        choice: ModeChoice,
        operator: Option<Mode>,
        client_name: Option<&str>,
    ) -> Mode {
        *self.decided.get_or_init(|| {
            let known = client_name.is_some_and(|n| caps::table().find(n).is_some());
            if choice == ModeChoice::Auto && operator.is_none() && !known {
                Mode::Native
            } else {
                resolve(choice, operator, client_name)
            }
        })
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
    fn an_unknown_harness_that_subscribes_to_list_changes_gets_native_tools() {
        let fresh = || SessionMode::default();
        assert_eq!(
            fresh().subscribed(ModeChoice::Auto, None, Some("conformance-test-client")),
            Mode::Native
        );
        // Not over --mode, the operator, or a decision already made.
        assert_eq!(
            fresh().subscribed(ModeChoice::Fallback, None, Some("x")),
            Mode::Fallback
        );
        assert_eq!(
            fresh().subscribed(ModeChoice::Auto, Some(Mode::Fallback), Some("x")),
            Mode::Fallback
        );
        let decided = fresh();
        decided.decide(ModeChoice::Auto, None, Some("x"));
        assert_eq!(
            decided.subscribed(ModeChoice::Auto, None, Some("x")),
            Mode::Fallback
        );
    }

    #[test]
    fn overrides_win_and_auto_uses_the_table() {
        let table = caps::builtin();
        assert_eq!(
            resolve(ModeChoice::Native, None, Some("codex-mcp-client")),
            Mode::Native
        );
        assert_eq!(
            resolve(
                ModeChoice::Fallback,
                Some(Mode::Native),
                Some("claude-code")
            ),
            Mode::Fallback
        );
        for name in [
            "claude-code",
            "opencode",
            "codex-mcp-client",
            "unknown-harness",
        ] {
            assert_eq!(
                resolve(ModeChoice::Auto, None, Some(name)),
                table.mode_for(name),
                "{name}"
            );
        }
        assert_eq!(resolve(ModeChoice::Auto, None, None), Mode::Fallback);
        // The operator's mode replaces the table's guess, never an explicit --mode.
        assert_eq!(
            resolve(
                ModeChoice::Auto,
                Some(Mode::Native),
                Some("unknown-harness")
            ),
            Mode::Native
        );
        assert_eq!(
            resolve(ModeChoice::Auto, Some(Mode::Fallback), Some("claude-code")),
            Mode::Fallback
        );
        let m = SessionMode::default();
        let first = m.decide(ModeChoice::Native, None, Some("x"));
        assert_eq!(first, Mode::Native);
        assert_eq!(
            m.decide(ModeChoice::Fallback, None, Some("y")),
            first,
            "decided once"
        );
    }
}
