//! An app's log messages during a call, as MCP `notifications/message`, filtered by the level
//! the harness chose with `logging/setLevel`.
//!
//! The level is the session's (one per MCP session, shared by its calls); until the harness
//! sets one, every message passes: MCP leaves the default to the server, and an app that logs
//! means to be heard. A 2026-07-28 request has no session level: it opts in with
//! `io.modelcontextprotocol/logLevel` in its `_meta`, and without it hears nothing (SEP-2575).
//! The messages are sent from the call's own handler, so over stdio they come in order with the
//! call's progress; over Streamable HTTP they travel on the call's own stream, before its
//! result (`streams`), so a client that never opens the standalone stream hears them too.
#![allow(deprecated)] // rmcp marks logging deprecated (SEP-2577); MCP 2025-11-25 has it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use leo_protocol::logging::{LogLevel, sanitized_data};
use leo_protocol::sanitize::{Lines, sanitize};
use rmcp::model::{
    LoggingLevel, LoggingMessageNotification, LoggingMessageNotificationParam, ProtocolVersion,
    RequestId, ServerNotification,
};
use rmcp::service::{OriginatingRequestId, RequestContext};
use rmcp::{Peer, RoleServer};
use serde_json::Value;

/// The session's level; cheap to clone, shared by the session's calls.
#[derive(Debug, Clone, Default)]
pub struct LogFilter(Arc<AtomicU8>);

/// `LogFilter`'s value while no level is set.
const UNSET: u8 = 0;
/// Above every level: nothing passes.
const SILENT: u8 = 9;

/// The filter for request `ctx`'s call: the session's, or the 2026-07-28 request's own opt-in.
pub fn for_request(session: &LogFilter, ctx: &RequestContext<RoleServer>) -> LogFilter {
    let modern = ctx
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
    if !modern {
        return session.clone();
    }
    let filter = LogFilter(Arc::new(AtomicU8::new(SILENT)));
    if let Some(level) = ctx.meta.log_level() {
        filter.set(level);
    }
    filter
}

impl LogFilter {
    /// `logging/setLevel`: from now on, messages below `level` are dropped.
    pub fn set(&self, level: LoggingLevel) {
        self.0.store(rank(of_mcp(level)), Ordering::Relaxed);
    }

    /// Whether a message at `level` goes to the harness.
    pub fn passes(&self, level: LogLevel) -> bool {
        let min = self.0.load(Ordering::Relaxed);
        min == UNSET || rank(level) >= min
    }
}

/// 1 for `debug` up to 8 for `emergency` (0 is "unset").
fn rank(level: LogLevel) -> u8 {
    level as u8 + 1
}

fn of_mcp(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}

fn to_mcp(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

/// The notification for an app's message (its text sanitized once more, as everything the
/// sidecar hands the harness).
pub fn notification(
    level: LogLevel,
    logger: Option<String>,
    data: Value,
) -> LoggingMessageNotificationParam {
    let mut param = LoggingMessageNotificationParam::new(to_mcp(level), sanitized_data(data));
    param.logger = logger.map(|l| sanitize(&l, Lines::Join).into_owned());
    param
}

/// Sends `note` of request `origin`'s call to the harness; a client gone meanwhile misses it
/// (the call ends anyway). The notification is tagged with `origin`, so that over Streamable
/// HTTP it travels on that request's stream (`streams::Routed`); stdio has one stream anyway.
pub async fn send(
    peer: &Peer<RoleServer>,
    origin: Option<RequestId>,
    note: LoggingMessageNotificationParam,
) {
    let mut notification = LoggingMessageNotification::new(note);
    if let Some(origin) = origin {
        notification.extensions.insert(OriginatingRequestId(origin));
    }
    let notification = ServerNotification::LoggingMessageNotification(notification);
    if peer.send_notification(notification).await.is_err() {
        tracing::debug!("cannot send a log message; the client may be gone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_passes_until_a_level_is_set_then_only_that_and_above() {
        let filter = LogFilter::default();
        assert!(filter.passes(LogLevel::Debug));
        filter.set(LoggingLevel::Warning);
        assert!(!filter.passes(LogLevel::Info));
        assert!(filter.passes(LogLevel::Warning) && filter.passes(LogLevel::Emergency));
        filter.clone().set(LoggingLevel::Debug);
        assert!(filter.passes(LogLevel::Debug), "clones share the level");
    }
}
