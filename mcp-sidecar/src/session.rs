//! The session id this sidecar announces in `hello`.
//!
//! One `leo-mcp` process serves one harness session, so the id is made once at start and reused
//! on every reconnect: the broker and the apps see the same `session` for the whole life of the
//! agent, across broker restarts.

/// `<agent>-<pid>-<16 hex digits>`, at most 64 + 1 + 10 + 1 + 16 bytes (under the broker's 128).
pub fn new_session_id(agent: &str) -> String {
    let mut bytes = [0u8; 8];
    // Without OS randomness the pid and the clock still make the id unique on this machine.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        bytes = nanos.to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{agent}-{}-{hex}", std::process::id())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_distinct_and_short() {
        let a = super::new_session_id("claude");
        let b = super::new_session_id("claude");
        assert_ne!(a, b);
        assert!(a.starts_with("claude-"));
        assert!(super::new_session_id(&"a".repeat(64)).len() <= 128);
    }
}
