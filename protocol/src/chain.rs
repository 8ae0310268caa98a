//! An error and its causes on one line, for the log lines of every Leo part.
//!
//! `thiserror` types keep the cause in `#[source]`, out of the message (the style the
//! workspace follows), so a log line that printed only `Display` would lose it.

/// `error: cause: cause`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn joins_the_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot reach the broker")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("no such file"));
        assert_eq!(
            super::error_chain(&e),
            "cannot reach the broker: no such file"
        );
    }
}
