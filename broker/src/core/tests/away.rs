//! A call parked for an app whose stream dropped waits for it: its tools leave the agents'
//! lists at once, but the call ends `tool_withdrawn` only when the app's
//! `client_tools.resume_grace_s` is over without it (or another app) serving the tool again.
//! Coming back with its key and registering, the app is offered the call and answers it. An
//! app that withdraws the tool itself ends its calls at once.

use leo_protocol::ErrorCode;
use leo_protocol::ipc::RawOutcome;
use leo_protocol::requests::RequestState;
use leo_protocol::tool::ToolDef;
use serde_json::json;
use tokio::sync::oneshot;

use super::{FakeAgent, FakeApp, Harness, advance_ms, cancel_reasons, outcome_now, refused};
use super::{text, tool};

const GRACE_10S: &str = "client_tools:\n  resume_grace_s: 10\n";

/// The start every scenario here shares: the phone serves `read_clip` (a handoff, which never
/// times out) in group `clip`, the agent `rocket` calls it, and the phone's stream drops before
/// it claims the call. Returns the phone's resume key.
fn parked_then_dropped(h: &Harness) -> (String, FakeAgent, String, oneshot::Receiver<RawOutcome>) {
    let phone = h.app();
    phone.register("clip", vec![tool("read_clip", Some(0))]);
    let agent = h.agent("rocket");
    let (id, rx) = agent.call(1, "read_clip");
    let key = phone.resume_key();
    drop(phone);
    (key, agent, id, rx)
}

/// [`parked_then_dropped`], then the phone resumes with its key and registers `tools` in
/// group `clip`.
fn dropped_and_back(
    h: &Harness,
    tools: Vec<ToolDef>,
) -> (FakeApp, FakeAgent, oneshot::Receiver<RawOutcome>) {
    let (key, agent, _id, rx) = parked_then_dropped(h);
    let phone = FakeApp::open(&h.broker, Some(&key)).unwrap();
    phone.register("clip", tools);
    (phone, agent, rx)
}

/// Asserts that the call on `rx` has ended, `cancelled` for `tool` withdrawn, as the harness
/// shows it (`"<code>: <message>"`).
fn assert_withdrawn(rx: &mut oneshot::Receiver<RawOutcome>, tool: &str) {
    match outcome_now(rx) {
        Some(RawOutcome::Error { error }) => assert_eq!(
            format!("{}: {}", error.code, error.message),
            format!("cancelled: tool {tool:?} was withdrawn")
        ),
        other => panic!("not ended withdrawn: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_parked_call_waits_for_its_app_to_come_back_and_answer() {
    let h = Harness::start(GRACE_10S);
    let (key, agent, id, mut rx) = parked_then_dropped(&h);

    // Gone from the agents' lists at once: a new call is refused as today.
    assert!(h.broker.tools().tools.is_empty());
    let late = h.broker.call(agent.conn, 2, "read_clip", json!({}), None);
    refused(late.map(drop), ErrorCode::NoClient);
    // The parked call waits, to the end of the grace.
    advance_ms(9_999).await;
    assert!(outcome_now(&mut rx).is_none());
    assert_eq!(h.broker.pending()[0].state, RequestState::Parked);

    let mut phone = FakeApp::open(&h.broker, Some(&key)).unwrap();
    phone.events();
    phone.register("clip", vec![tool("read_clip", Some(0))]);
    assert_eq!(phone.offered(), std::slice::from_ref(&id), "offered again");
    advance_ms(60_000).await;
    phone.answer(&id, "from the phone", true).await.unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "from the phone");
}

#[tokio::test(start_paused = true)]
async fn a_parked_call_ends_withdrawn_when_its_app_does_not_come_back() {
    let h = Harness::start(GRACE_10S);
    let mut watcher = h.app();
    let (_key, _agent, _id, mut rx) = parked_then_dropped(&h);
    advance_ms(9_999).await;
    assert!(outcome_now(&mut rx).is_none());
    assert!(watcher.events_of("client_tool.cancelled").is_empty());
    advance_ms(1).await;
    assert_withdrawn(&mut rx, "read_clip");
    assert_eq!(
        cancel_reasons(&watcher.events_of("client_tool.cancelled")),
        ["tool_withdrawn"]
    );
}

#[tokio::test(start_paused = true)]
async fn another_app_serving_the_tool_is_offered_the_waiting_call() {
    let h = Harness::start(GRACE_10S);
    let (_key, _agent, id, mut rx) = parked_then_dropped(&h);
    advance_ms(5_000).await;
    let mut mac = h.app();
    mac.events();
    mac.register("clip", vec![tool("read_clip", Some(0))]);
    assert_eq!(mac.offered(), std::slice::from_ref(&id));
    // The phone's grace ends while the mac serves the tool: the call goes on waiting for it.
    advance_ms(60_000).await;
    assert!(outcome_now(&mut rx).is_none());
    mac.answer(&id, "from the mac", true).await.unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "from the mac");
}

#[tokio::test(start_paused = true)]
async fn an_app_back_without_the_tool_ends_its_call_at_once() {
    let h = Harness::start(GRACE_10S);
    let (_phone, _agent, mut rx) = dropped_and_back(&h, vec![tool("write_clip", Some(0))]);
    assert_withdrawn(&mut rx, "read_clip");
}

#[tokio::test(start_paused = true)]
async fn withdrawing_the_tool_ends_its_calls_at_once_even_after_a_drop() {
    let h = Harness::start(GRACE_10S);
    let (phone, agent, mut first) = dropped_and_back(&h, vec![tool("read_clip", Some(0))]);
    assert!(outcome_now(&mut first).is_none());
    let (_, mut second) = agent.call(2, "read_clip");
    phone.register("clip", Vec::new());
    for rx in [&mut first, &mut second] {
        assert_withdrawn(rx, "read_clip");
    }
}

/// An app serving two groups registers them again one by one after it resumes: registering
/// the first ends neither the calls parked for the second nor its claims there, which wait
/// until it registers that group again, past its grace.
#[tokio::test(start_paused = true)]
async fn a_group_not_registered_again_yet_keeps_its_calls() {
    let h = Harness::start(GRACE_10S);
    let phone = h.app();
    phone.register("clip", vec![tool("read_clip", Some(0))]);
    phone.register("files", vec![tool("read_file", Some(0))]);
    let agent = h.agent("rocket");
    let (file, mut file_rx) = agent.call(1, "read_file");
    let (claimed, mut claimed_rx) = agent.call(2, "read_file");
    phone.claim(&claimed).await.unwrap();
    let key = phone.resume_key();
    drop(phone);
    advance_ms(4_000).await;

    let mut phone = FakeApp::open(&h.broker, Some(&key)).unwrap();
    phone.register("clip", vec![tool("read_clip", Some(0))]);
    advance_ms(60_000).await;
    assert!(outcome_now(&mut file_rx).is_none(), "waits for its group");
    assert!(outcome_now(&mut claimed_rx).is_none(), "still the phone's");
    phone.events();
    phone.register("files", vec![tool("read_file", Some(0))]);
    assert_eq!(phone.offered(), std::slice::from_ref(&file));
    phone.answer(&file, "the file", true).await.unwrap();
    phone
        .answer(&claimed, "the claimed file", false)
        .await
        .unwrap();
    assert_eq!(text(&outcome_now(&mut file_rx).unwrap()), "the file");
    assert_eq!(
        text(&outcome_now(&mut claimed_rx).unwrap()),
        "the claimed file"
    );
}
