//! After a restart: restored calls keep their deadlines (time spent down counts), wait
//! `client_tools.resume_grace_s` for their sidecars and apps to come back, and whoever did not
//! come back by then loses its calls (`agent_gone`) or claims (parked and offered again).

use leo_protocol::ErrorCode;
use leo_protocol::requests::{Request, RequestState};
use tokio::sync::oneshot;

use super::{
    FakeAgent, FakeApp, Harness, advance_ms, cancel_reasons, code, outcome_now, refused, text, tool,
};
use crate::core::Resumed;
use crate::store::{Restored, StoredCall, StoredClient, now_ms};

const GRACE_10S: &str = "client_tools:\n  resume_grace_s: 10\n";

/// Call `local_id` of rocket's session `rocket-1`, of tool `wait` in group `g`, as stored:
/// claimed by `claimed_by`, with `left_ms` until its deadline (`None`: a handoff).
pub(super) fn stored(local_id: u64, claimed_by: Option<&str>, left_ms: Option<i64>) -> StoredCall {
    StoredCall {
        request: Request {
            id: format!("r_stored{local_id}").into(),
            agent: "rocket".into(),
            session: "rocket-1".into(),
            group: "g".into(),
            tool: "wait".into(),
            arguments: serde_json::value::to_raw_value(&serde_json::json!({})).unwrap(),
            timeout_s: left_ms.map(|_| 60),
            created_at: leo_protocol::time::now(),
            owner: None,
            traceparent: None,
        },
        local_id,
        deadline_ms: left_ms.map(|ms| now_ms() + ms),
        claimed_by: claimed_by.map(Into::into),
        approval: None,
    }
}

pub(super) fn restored(live: Vec<StoredCall>, clients: Vec<StoredClient>) -> Restored {
    Restored {
        live,
        ended: Vec::new(),
        mail: Vec::new(),
        clients,
        ..Restored::default()
    }
}

/// The receivers of the calls `agent` resumes, by local id order.
fn resume(
    h: &Harness,
    agent: &FakeAgent,
    ids: &[u64],
) -> Vec<oneshot::Receiver<leo_protocol::ipc::RawOutcome>> {
    h.broker
        .resume(agent.conn, "rocket", "rocket-1", ids)
        .into_iter()
        .map(|r| match r {
            Resumed::Waiting { rx, .. } => rx,
            Resumed::Ended { request, .. } => panic!("{request:?} ended already"),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn calls_whose_agent_does_not_come_back_end_when_the_grace_ends() {
    let h = Harness::restarted(
        GRACE_10S,
        restored(
            vec![stored(1, None, None), stored(2, None, None)],
            Vec::new(),
        ),
    );
    // Nobody serves `wait` yet: restored calls are spared until the grace ends.
    advance_ms(1_000).await;
    let mut app = h.app();
    app.register("g", vec![tool("wait", Some(0))]);
    let mut offered = app.offered();
    offered.sort();
    assert_eq!(
        offered,
        ["r_stored1", "r_stored2"],
        "offered again once served"
    );
    let agent = h.agent("rocket");
    advance_ms(8_000).await;
    let mut rx = resume(&h, &agent, &[1]).remove(0);

    advance_ms(999).await;
    assert!(app.events_of("client_tool.cancelled").is_empty());
    assert!(h.broker.is_live("r_stored2"));
    advance_ms(1).await;
    let cancelled = app.events_of("client_tool.cancelled");
    assert_eq!(cancel_reasons(&cancelled), ["agent_gone"]);
    assert_eq!(cancelled[0]["id"], "r_stored2");
    // The call whose sidecar came back goes on, and its answer reaches the sidecar.
    app.answer("r_stored1", "after the restart", true)
        .await
        .unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "after the restart");
}

#[tokio::test(start_paused = true)]
async fn a_claim_whose_app_does_not_come_back_is_offered_again_when_the_grace_ends() {
    let old = StoredClient {
        client_id: "c_old".into(),
        resume_key: "k_old".into(),
        principal: "operator".into(),
        name: None,
    };
    let h = Harness::restarted(
        GRACE_10S,
        restored(vec![stored(1, Some("c_old"), None)], vec![old]),
    );
    let mut app = h.app();
    app.register("g", vec![tool("wait", Some(0))]);
    let agent = h.agent("rocket");
    let mut rx = resume(&h, &agent, &[1]).remove(0);
    assert!(app.offered().is_empty(), "claimed by the app that is away");

    advance_ms(9_999).await;
    assert_eq!(h.broker.pending()[0].state, RequestState::Claimed);
    refused(app.claim("r_stored1").await, ErrorCode::AlreadyClaimed);
    advance_ms(1).await;
    assert_eq!(app.offered(), ["r_stored1"]);
    app.answer("r_stored1", "second app", true).await.unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "second app");
    // The old key no longer opens anything.
    assert!(FakeApp::open(&h.broker, Some("k_old")).is_err());
}

#[tokio::test(start_paused = true)]
async fn a_restored_call_keeps_its_deadline_and_time_spent_down_counts() {
    // Deadlines are wall-clock milliseconds: the real time the test takes to start counts too.
    let h = Harness::restarted(
        "client_tools:\n  resume_grace_s: 600\n",
        restored(
            vec![stored(1, None, Some(60_000)), stored(2, None, Some(-5_000))],
            Vec::new(),
        ),
    );
    let agent = h.agent("rocket");
    let mut rxs = resume(&h, &agent, &[1, 2]);
    advance_ms(0).await;
    assert_eq!(
        code(&outcome_now(&mut rxs[1]).unwrap()),
        "timeout",
        "past its deadline"
    );
    // The other ends a minute after the restart (less the real time the test took to get
    // there, which is far less than ten seconds).
    advance_ms(50_000).await;
    assert!(outcome_now(&mut rxs[0]).is_none());
    advance_ms(10_000).await;
    assert_eq!(code(&outcome_now(&mut rxs[0]).unwrap()), "timeout");
}

#[tokio::test(start_paused = true)]
async fn an_app_that_resumes_after_a_restart_and_leaves_again_gets_a_whole_grace_period() {
    let old = StoredClient {
        client_id: "c_old".into(),
        resume_key: "k_old".into(),
        principal: "operator".into(),
        name: None,
    };
    let h = Harness::restarted(
        GRACE_10S,
        restored(vec![stored(1, Some("c_old"), None)], vec![old]),
    );
    let mut mac = h.app();
    mac.register("g", vec![tool("wait", Some(0))]);
    let agent = h.agent("rocket");
    let _rx = resume(&h, &agent, &[1]);
    advance_ms(8_000).await;
    let back = FakeApp::open(&h.broker, Some("k_old")).unwrap();
    back.register("g", vec![tool("wait", Some(0))]);
    advance_ms(1_000).await;
    drop(back);
    mac.events();
    // It left at 9 s: the restart's grace (over at 10 s) is not its grace; its own ends at 19 s.
    advance_ms(9_999).await;
    assert!(
        mac.offered().is_empty(),
        "returned before its grace was over"
    );
    advance_ms(1).await;
    assert_eq!(mac.offered(), ["r_stored1"]);
}
