//! A call's timer: it ends the call `timeout` once, at its deadline, parked or claimed; the
//! default comes from the config; a handoff (`timeout_s: 0`) has none; a question to the user
//! ends with its call.

use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::input::InputBody;
use serde_json::json;
use tokio::time::Instant;

use super::{
    APP_PRINCIPAL, Harness, advance_ms, cancel_reasons, code, outcome_now, refused, text, tool,
};

#[tokio::test(start_paused = true)]
async fn a_parked_call_times_out_once_at_its_deadline() {
    let h = Harness::start("");
    let mut app = h.app();
    app.register("g", vec![tool("slow", Some(5))]);
    let agent = h.agent("rocket");
    let start = Instant::now();
    let (id, mut rx) = agent.call(1, "slow");
    assert_eq!(app.offered(), std::slice::from_ref(&id));

    advance_ms(4_999).await;
    assert!(outcome_now(&mut rx).is_none(), "not before its deadline");
    assert!(h.broker.is_parked(&id));
    advance_ms(1).await;
    let outcome = (&mut rx).await.unwrap();
    assert_eq!(code(&outcome), "timeout");
    assert_eq!(start.elapsed(), Duration::from_secs(5), "at its deadline");
    let cancelled = app.events_of("client_tool.cancelled");
    assert_eq!(cancel_reasons(&cancelled), ["timeout"]);
    assert_eq!(cancelled[0]["id"], id.as_str());

    // Nothing more happens to it, however long; an answer after the deadline says why not.
    advance_ms(24 * 3_600_000).await;
    assert!(app.events().is_empty(), "ended once");
    let late = refused(app.claim(&id).await, ErrorCode::AlreadySettled);
    assert!(late.contains("by timeout"), "{late}");
    refused(
        app.answer(&id, "late", true).await,
        ErrorCode::AlreadySettled,
    );
    assert!(h.broker.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_claimed_call_times_out_too() {
    let h = Harness::start("");
    let mut app = h.app();
    app.register("g", vec![tool("slow", Some(3))]);
    let agent = h.agent("rocket");
    let (id, mut rx) = agent.call(1, "slow");
    advance_ms(1_000).await;
    app.claim(&id).await.unwrap();
    advance_ms(1_999).await;
    assert!(outcome_now(&mut rx).is_none());
    advance_ms(1).await;
    assert_eq!(code(&outcome_now(&mut rx).unwrap()), "timeout");
    let late = refused(
        app.answer(&id, "late", false).await,
        ErrorCode::AlreadySettled,
    );
    assert!(late.contains("by timeout"), "{late}");
    assert_eq!(
        cancel_reasons(&app.events_of("client_tool.cancelled")),
        ["timeout"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_configured_default_applies_and_a_handoff_never_times_out() {
    let h = Harness::start("client_tools:\n  default_timeout_s: 2\n");
    let mut app = h.app();
    app.register("g", vec![tool("quick", None), tool("handoff", Some(0))]);
    let agent = h.agent("rocket");
    let (quick, mut quick_rx) = agent.call(1, "quick");
    let (handoff, mut handoff_rx) = agent.call(2, "handoff");
    let offered = app.events_of("client_tool.request");
    assert_eq!(offered[0]["timeout_s"], 2, "the configured default");
    assert_eq!(offered[1]["timeout_s"], json!(null), "a handoff has none");

    advance_ms(1_999).await;
    assert!(outcome_now(&mut quick_rx).is_none());
    advance_ms(1).await;
    assert_eq!(code(&outcome_now(&mut quick_rx).unwrap()), "timeout");
    assert!(!h.broker.is_live(&quick));

    // Thirty days later the handoff still waits, and its answer reaches the agent.
    advance_ms(30 * 24 * 3_600_000).await;
    assert!(outcome_now(&mut handoff_rx).is_none());
    assert!(h.broker.is_parked(&handoff));
    app.claim(&handoff).await.unwrap();
    app.answer(&handoff, "yes", false).await.unwrap();
    assert_eq!(text(&outcome_now(&mut handoff_rx).unwrap()), "yes");
    assert_eq!(
        cancel_reasons(&app.events_of("client_tool.cancelled")),
        ["timeout"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_question_to_the_user_ends_with_its_call_at_the_deadline() {
    let h = Harness::start("");
    let app = h.app();
    app.register("g", vec![tool("deploy", Some(5))]);
    let agent = h.agent("rocket");
    let (outbox, mut frames) = tokio::sync::mpsc::channel(8);
    h.broker.attach_outbox(agent.conn, outbox);
    let (id, mut rx) = agent.call(1, "deploy");
    app.claim(&id).await.unwrap();
    let start = Instant::now();
    let broker = h.broker.clone();
    let body = InputBody {
        client_id: app.id().into(),
        message: "Deploy to production?".into(),
        requested_schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
    };
    let asked = tokio::spawn({
        let id = id.clone();
        async move { broker.ask_input(&id, body, APP_PRINCIPAL).await }
    });
    let frame = frames.recv().await.unwrap();
    assert!(frame.starts_with(br#"{"type":"input""#), "{frame:?}");

    // The harness never answers: the question ends when the call does, at its deadline.
    let answer = asked.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    let refusal = answer.unwrap_err();
    assert!(
        matches!(refusal.code, ErrorCode::Timeout | ErrorCode::AlreadySettled),
        "{refusal:?}"
    );
    assert_eq!(code(&outcome_now(&mut rx).unwrap()), "timeout");
}
