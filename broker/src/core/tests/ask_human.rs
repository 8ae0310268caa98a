//! The console's `ask_human`: a handoff, so a question waits for the operator however long
//! (no default timeout applies), until it is answered, cancelled, or the switch goes off.

use leo_protocol::ErrorCode;
use leo_protocol::console::ASK_HUMAN;
use serde_json::json;

use super::{Harness, advance_ms, cancel_reasons, code, outcome_now, refused, text};

fn question() -> serde_json::Value {
    json!({"question": "Ship the release?", "choices": ["yes", "no"]})
}

#[tokio::test(start_paused = true)]
async fn a_question_waits_for_the_operator_past_any_default_timeout() {
    let h = Harness::start("client_tools:\n  default_timeout_s: 1\n");
    let mut watcher = h.app();
    h.broker.set_ask_human(true).unwrap();
    let agent = h.agent("rocket");
    let (id, mut rx) = agent.call_with(1, ASK_HUMAN, question());
    let offered = watcher.events_of("client_tool.request");
    assert_eq!(offered[0]["timeout_s"], json!(null), "no time limit");

    advance_ms(7 * 24 * 3_600_000).await;
    assert!(outcome_now(&mut rx).is_none(), "still waiting a week later");
    assert!(h.broker.is_parked(&id));
    h.broker.answer_from_console(&id, "ship it").await.unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "ship it");
    refused(
        h.broker.answer_from_console(&id, "twice").await,
        ErrorCode::AlreadySettled,
    );
    assert!(watcher.events_of("client_tool.cancelled").is_empty());
}

#[tokio::test(start_paused = true)]
async fn switching_off_ends_waiting_questions_at_once_and_leaves_no_timer() {
    let h = Harness::start("");
    let mut watcher = h.app();
    h.broker.set_ask_human(true).unwrap();
    let agent = h.agent("rocket");
    let (id, mut rx) = agent.call_with(1, ASK_HUMAN, question());
    advance_ms(3_600_000).await;
    h.broker.set_ask_human(false).unwrap();
    assert_eq!(code(&outcome_now(&mut rx).unwrap()), "cancelled");
    let late = refused(
        h.broker.answer_from_console(&id, "too late").await,
        ErrorCode::AlreadySettled,
    );
    assert!(late.contains("by cancellation"), "{late}");
    advance_ms(30 * 24 * 3_600_000).await;
    assert_eq!(
        cancel_reasons(&watcher.events_of("client_tool.cancelled")),
        ["tool_withdrawn"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_operator_cancels_a_question_the_agent_cancels_another() {
    let h = Harness::start("");
    let mut watcher = h.app();
    h.broker.set_ask_human(true).unwrap();
    let agent = h.agent("rocket");
    let (first, mut first_rx) = agent.call_with(1, ASK_HUMAN, question());
    let (_, mut second_rx) = agent.call_with(2, ASK_HUMAN, question());
    advance_ms(60_000).await;
    h.broker.cancel_request(&first).await.unwrap();
    agent.cancel(2);
    assert_eq!(code(&outcome_now(&mut first_rx).unwrap()), "cancelled");
    assert_eq!(code(&outcome_now(&mut second_rx).unwrap()), "cancelled");
    assert_eq!(
        cancel_reasons(&watcher.events_of("client_tool.cancelled")),
        ["cancelled_by_operator", "cancelled_by_agent"]
    );
    refused(
        h.broker.answer_from_console(&first, "late").await,
        ErrorCode::AlreadySettled,
    );
}
