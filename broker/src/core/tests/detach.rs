//! A piped session lost with its follower (`session_detached`): its calls wait for the sidecar
//! to resume on another connection, for `client_tools.resume_grace_s` from the loss, with the
//! outcomes written towards it just before; whatever it does not come back for ends
//! `agent_gone` then, to the millisecond, and not with a restart's grace.

use leo_protocol::ipc::RawOutcome;
use tokio::sync::oneshot;

use super::restart::{restored, stored};
use super::{
    FakeAgent, FakeApp, Harness, advance_ms, cancel_reasons, code, outcome_now, text, tool,
};
use crate::core::{Left, Orphan, Resumed};

const GRACE_10S: &str = "client_tools:\n  resume_grace_s: 10\n";

/// The session of `agent` is lost with `calls` (local id, request id, receiver) in flight.
fn lose(
    h: &Harness,
    agent: &FakeAgent,
    calls: Vec<(u64, &str, oneshot::Receiver<RawOutcome>)>,
    resend: Vec<(u64, &str, &str)>,
) {
    let left = Left {
        calls: calls
            .into_iter()
            .map(|(local_id, id, rx)| Orphan {
                local_id,
                request: id.into(),
                rx,
            })
            .collect(),
        resend: resend
            .into_iter()
            .map(|(local_id, id, outcome)| (local_id, id.into(), outcome.to_owned()))
            .collect(),
    };
    h.broker.session_detached(agent.conn, left);
}

/// An app serving `wait` (a handoff), and the session `rocket-1` of agent `rocket`.
fn app_and_agent(h: &Harness) -> (FakeApp, FakeAgent) {
    let app = h.app();
    app.register("g", vec![tool("wait", Some(0))]);
    (app, h.agent("rocket"))
}

/// The sidecar of `rocket-1` back on a new connection, resuming `ids`.
fn back(h: &Harness, ids: &[u64]) -> (FakeAgent, Vec<Resumed>) {
    let agent = h.agent("rocket");
    let resumed = h.broker.resume(agent.conn, "rocket", "rocket-1", ids);
    (agent, resumed)
}

fn waiting(resumed: Resumed) -> oneshot::Receiver<RawOutcome> {
    match resumed {
        Resumed::Waiting { rx, .. } => rx,
        Resumed::Ended { request, .. } => panic!("{request:?} ended already"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_sessions_calls_wait_for_its_sidecar_and_are_answered_after_it_resumes() {
    let h = Harness::start(GRACE_10S);
    let (mut app, agent) = app_and_agent(&h);
    let (parked, rx1) = agent.call(1, "wait");
    let (claimed, rx2) = agent.call(2, "wait");
    app.claim(&claimed).await.unwrap();
    app.events();
    lose(
        &h,
        &agent,
        vec![(1, &parked, rx1), (2, &claimed, rx2)],
        vec![],
    );
    assert!(h.broker.status().agents.is_empty(), "no longer connected");
    advance_ms(9_000).await;
    assert!(app.events_of("client_tool.cancelled").is_empty());
    let mut rxs: Vec<_> = back(&h, &[1, 2]).1.into_iter().map(waiting).collect();
    app.answer(&claimed, "claimed", false).await.unwrap();
    app.answer(&parked, "parked", true).await.unwrap();
    assert_eq!(text(&outcome_now(&mut rxs[0]).unwrap()), "parked");
    assert_eq!(text(&outcome_now(&mut rxs[1]).unwrap()), "claimed");
    // The grace of the loss ends with nothing left to end.
    advance_ms(60_000).await;
    assert!(app.events_of("client_tool.cancelled").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lost_session_that_does_not_come_back_ends_its_calls_when_its_grace_ends() {
    let h = Harness::start(GRACE_10S);
    advance_ms(3_000).await;
    let (mut app, agent) = app_and_agent(&h);
    let (id, rx) = agent.call(1, "wait");
    app.events();
    lose(&h, &agent, vec![(1, &id, rx)], vec![]);
    advance_ms(9_999).await;
    assert!(h.broker.is_live(&id));
    advance_ms(1).await;
    let cancelled = app.events_of("client_tool.cancelled");
    assert_eq!(cancel_reasons(&cancelled), ["agent_gone"]);
    assert!(!h.broker.is_live(&id));
}

#[tokio::test(start_paused = true)]
async fn a_session_lost_again_gets_a_whole_grace_period_again() {
    let h = Harness::start(GRACE_10S);
    let (mut app, agent) = app_and_agent(&h);
    let (one, rx1) = agent.call(1, "wait");
    let (two, rx2) = agent.call(2, "wait");
    lose(&h, &agent, vec![(1, &one, rx1), (2, &two, rx2)], vec![]);
    advance_ms(5_000).await;
    // Back at 5 s for call 1 only (its harness gave up on 2), and lost again at 6 s.
    let (again, mut resumed) = back(&h, &[1]);
    let rx1 = waiting(resumed.remove(0));
    advance_ms(1_000).await;
    lose(&h, &again, vec![(1, &one, rx1)], vec![]);
    app.events();
    // The first loss's grace (over at 10 s) is not the second's, over at 16 s.
    advance_ms(9_999).await;
    assert!(h.broker.is_live(&one) && h.broker.is_live(&two));
    advance_ms(1).await;
    let cancelled = app.events_of("client_tool.cancelled");
    assert_eq!(cancel_reasons(&cancelled), ["agent_gone", "agent_gone"]);
}

#[tokio::test(start_paused = true)]
async fn an_outcome_written_before_the_loss_is_sent_again_to_a_sidecar_that_asks() {
    let h = Harness::start(GRACE_10S);
    let agent = h.agent("rocket");
    let outcome = r#"{"content":[{"type":"text","text":"lost in the pipe"}]}"#;
    lose(&h, &agent, vec![], vec![(3, "r_three", outcome)]);
    advance_ms(1_000).await;
    match back(&h, &[3]).1.remove(0) {
        Resumed::Ended {
            local_id,
            request,
            outcome,
        } => {
            assert_eq!((local_id, request.as_deref()), (3, Some("r_three")));
            assert_eq!(text(&outcome), "lost in the pipe");
        }
        Resumed::Waiting { .. } => panic!("waiting"),
    }
    // Once the grace is over it is forgotten: the broker has no record of it any more.
    lose(&h, &agent, vec![], vec![(4, "r_four", outcome)]);
    advance_ms(10_000).await;
    let Resumed::Ended { outcome, .. } = back(&h, &[4]).1.remove(0) else {
        panic!("waiting")
    };
    assert_eq!(code(&outcome), "no_client");
}

#[tokio::test(start_paused = true)]
async fn a_session_lost_after_a_restart_waits_out_its_own_grace_not_the_restarts() {
    let h = Harness::restarted(GRACE_10S, restored(vec![stored(1, None, None)], Vec::new()));
    let mut app = h.app();
    app.register("g", vec![tool("wait", Some(0))]);
    let (first, mut resumed) = back(&h, &[1]);
    let rx = waiting(resumed.remove(0));
    advance_ms(5_000).await;
    lose(&h, &first, vec![(1, "r_stored1", rx)], vec![]);
    app.events();
    advance_ms(5_000).await;
    assert!(h.broker.is_live("r_stored1"), "the restart's grace is over");
    advance_ms(5_000).await;
    assert_eq!(
        cancel_reasons(&app.events_of("client_tool.cancelled")),
        ["agent_gone"]
    );
}
