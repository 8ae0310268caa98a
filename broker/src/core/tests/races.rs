//! The timer, the app's claim and result, and the agent's or operator's cancel race for one
//! call: whichever comes first ends it, once, and the others are refused or do nothing. A
//! call that ended another way leaves no timer behind to end it (or a later call) again.

use std::sync::Arc;
use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::ipc::RawOutcome;
use serde_json::json;

use super::{
    APP_PRINCIPAL, FakeApp, Harness, advance_ms, cancel_reasons, code, outcome_now, refused, text,
    tool,
};
use crate::core::Broker;
use crate::refusal::Refusal;

#[tokio::test(start_paused = true)]
async fn a_result_a_moment_before_the_deadline_wins_and_the_timer_does_nothing() {
    let h = Harness::start("");
    let mut app = h.app();
    app.register("g", vec![tool("slow", Some(5))]);
    let agent = h.agent("rocket");
    let (id, mut rx) = agent.call(1, "slow");
    advance_ms(4_999).await;
    app.answer(&id, "just in time", true).await.unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "just in time");
    advance_ms(3_600_000).await;
    assert!(app.events_of("client_tool.cancelled").is_empty());
    let late = refused(
        app.answer(&id, "again", false).await,
        ErrorCode::AlreadySettled,
    );
    assert!(!late.contains("timeout"), "{late}");
}

/// One call of a 5 s tool, and a result posted with `claim: true` at its deadline, by a task
/// whose timer is armed before the call's (`result_armed_first`) or after it.
async fn race_result_and_timer(result_armed_first: bool) {
    let h = Harness::start("");
    let mut app = h.app();
    app.register("g", vec![tool("slow", Some(5))]);
    let agent = h.agent("rocket");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let slot: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let spawn_post = || {
        let (broker, client, slot) = (h.broker.clone(), app.id().to_owned(), slot.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            let id = slot.lock().unwrap().clone().unwrap();
            post_text(&broker, &client, &id).await
        })
    };
    let (post, rx) = if result_armed_first {
        let post = spawn_post();
        tokio::task::yield_now().await;
        let (id, rx) = agent.call(1, "slow");
        *slot.lock().unwrap() = Some(id);
        (post, rx)
    } else {
        let (id, rx) = agent.call(1, "slow");
        *slot.lock().unwrap() = Some(id);
        tokio::task::yield_now().await;
        (spawn_post(), rx)
    };
    let outcome = rx.await.unwrap();
    let posted = post.await.unwrap();
    agree(&mut app, &outcome, posted);
    assert!(h.broker.pending().is_empty());
}

async fn post_text(broker: &Broker, client_id: &str, id: &str) -> Result<(), Refusal> {
    let body = serde_json::from_value(json!({
        "client_id": client_id, "ok": true, "claim": true,
        "content": [{"type": "text", "text": "at the deadline"}],
    }))
    .unwrap();
    broker.post_result(id, body, APP_PRINCIPAL).await.map(drop)
}

/// The call's outcome, the result's acknowledgement and the events agree on who won.
fn agree(app: &mut FakeApp, outcome: &RawOutcome, posted: Result<(), Refusal>) {
    let cancelled = cancel_reasons(&app.events_of("client_tool.cancelled"));
    match posted {
        Ok(()) => {
            assert_eq!(text(outcome), "at the deadline");
            assert!(cancelled.is_empty(), "{cancelled:?}");
        }
        Err(r) => {
            assert_eq!(r.code, ErrorCode::AlreadySettled, "{r:?}");
            assert!(r.message.contains("by timeout"), "{r:?}");
            assert_eq!(code(outcome), "timeout");
            assert_eq!(cancelled, ["timeout"]);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_result_at_the_very_instant_of_the_timeout_ends_the_call_once() {
    race_result_and_timer(true).await;
    race_result_and_timer(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_claim_at_the_very_instant_of_the_timeout_is_refused_or_timed_out() {
    let h = Harness::start("");
    let mut app = h.app();
    app.register("g", vec![tool("slow", Some(2))]);
    let agent = h.agent("rocket");
    let (id, rx) = agent.call(1, "slow");
    let claim = tokio::spawn({
        let (broker, client, id) = (h.broker.clone(), app.id().to_owned(), id.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            broker.claim(&id, &client, APP_PRINCIPAL).await.map(drop)
        }
    });
    let outcome = rx.await.unwrap();
    // Claimed or not, the call ends `timeout`: a claim is no answer.
    assert_eq!(code(&outcome), "timeout");
    if let Err(r) = claim.await.unwrap() {
        assert_eq!(r.code, ErrorCode::AlreadySettled, "{r:?}");
    }
    assert_eq!(
        cancel_reasons(&app.events_of("client_tool.cancelled")),
        ["timeout"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_ended_another_way_is_not_timed_out_later() {
    let h = Harness::start("");
    let mut app = h.app();
    app.register("g", vec![tool("slow", Some(5))]);
    let agent = h.agent("rocket");
    let other = h.agent("scout");
    let (_, mut by_agent) = agent.call(1, "slow");
    let (by_operator_id, mut by_operator) = agent.call(2, "slow");
    let (_, mut agent_gone) = other.call(1, "slow");
    advance_ms(1_000).await;
    agent.cancel(1);
    h.broker.cancel_request(&by_operator_id).await.unwrap();
    other.close();
    assert_eq!(code(&outcome_now(&mut by_agent).unwrap()), "cancelled");
    assert_eq!(code(&outcome_now(&mut by_operator).unwrap()), "cancelled");
    assert_eq!(code(&outcome_now(&mut agent_gone).unwrap()), "cancelled");
    let mut reasons = cancel_reasons(&app.events_of("client_tool.cancelled"));
    reasons.sort();
    assert_eq!(
        reasons,
        ["agent_gone", "cancelled_by_agent", "cancelled_by_operator"]
    );
    // The same local id again, two seconds later: the first call's timer (at 5 s) must not end
    // the new call, whose own deadline is at 7 s.
    advance_ms(1_000).await;
    let (_, mut again) = agent.call(1, "slow");
    advance_ms(4_999).await;
    assert!(
        outcome_now(&mut again).is_none(),
        "the old timer did nothing"
    );
    assert!(app.events_of("client_tool.cancelled").is_empty());
    advance_ms(1).await;
    assert_eq!(code(&outcome_now(&mut again).unwrap()), "timeout");
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_every_call_once_and_leaves_no_timer() {
    let h = Harness::start("");
    let mut app = h.app();
    app.register("g", vec![tool("slow", Some(5)), tool("handoff", Some(0))]);
    let agent = h.agent("rocket");
    let (_, mut slow) = agent.call(1, "slow");
    let (_, mut handoff) = agent.call(2, "handoff");
    h.broker.begin_shutdown();
    assert_eq!(code(&outcome_now(&mut slow).unwrap()), "cancelled");
    assert_eq!(code(&outcome_now(&mut handoff).unwrap()), "cancelled");
    advance_ms(10_000).await;
    assert_eq!(
        cancel_reasons(&app.events_of("client_tool.cancelled")),
        ["shutdown", "shutdown"]
    );
    let refusal = h
        .broker
        .call(agent.conn, 3, "slow", json!({}), None)
        .unwrap_err();
    assert_eq!(refusal.code, ErrorCode::Cancelled);
}
