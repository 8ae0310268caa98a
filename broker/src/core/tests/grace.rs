//! A provider stream that drops keeps its claims and its ownership for
//! `client_tools.resume_grace_s`: resuming with its key in time, it is the same client again;
//! not resuming, its claims are parked and offered again once the grace is over, to the
//! millisecond.

use leo_protocol::ErrorCode;
use leo_protocol::requests::RequestState;

use leo_protocol::ipc::RawOutcome;
use tokio::sync::oneshot;

use super::{FakeAgent, FakeApp, Harness, advance_ms, code, outcome_now, refused, text, tool};

const GRACE_10S: &str = "client_tools:\n  resume_grace_s: 10\n";

/// The start every scenario here shares: the mac and the phone both serve `read_clip` (with
/// `timeout_s`), the agent `rocket` calls it, and the phone claims the call.
async fn phone_claims_a_call(
    h: &Harness,
    timeout_s: u64,
) -> (
    FakeApp,
    FakeApp,
    FakeAgent,
    String,
    oneshot::Receiver<RawOutcome>,
) {
    let mac = h.app();
    let phone = h.app();
    mac.register("clip", vec![tool("read_clip", Some(timeout_s))]);
    phone.register("clip", vec![tool("read_clip", Some(timeout_s))]);
    let agent = h.agent("rocket");
    let (id, rx) = agent.call(1, "read_clip");
    phone.claim(&id).await.unwrap();
    (mac, phone, agent, id, rx)
}

#[tokio::test(start_paused = true)]
async fn a_claimant_that_does_not_resume_gives_its_claim_back_when_the_grace_ends() {
    let h = Harness::start(GRACE_10S);
    let (mut mac, phone, _agent, id, mut rx) = phone_claims_a_call(&h, 0).await;
    refused(mac.claim(&id).await, ErrorCode::OwnedByOther);
    mac.events();
    drop(phone);

    // The phone's claim waits for it the whole grace period.
    advance_ms(9_999).await;
    assert!(mac.offered().is_empty());
    refused(mac.claim(&id).await, ErrorCode::AlreadyClaimed);
    assert_eq!(h.broker.pending()[0].state, RequestState::Claimed);
    // Then the call is parked, offered again, and the mac may take it.
    advance_ms(1).await;
    assert_eq!(mac.offered(), std::slice::from_ref(&id));
    assert_eq!(h.broker.pending()[0].state, RequestState::Parked);
    mac.answer(&id, "from the mac", true).await.unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "from the mac");
}

#[tokio::test(start_paused = true)]
async fn a_claimant_that_resumes_in_time_keeps_its_claim_past_the_grace() {
    let h = Harness::start(GRACE_10S);
    let (mut mac, phone, _agent, id, mut rx) = phone_claims_a_call(&h, 0).await;
    let (phone_id, key) = (phone.id().to_owned(), phone.resume_key());
    drop(phone);
    advance_ms(9_999).await;
    let phone = FakeApp::open(&h.broker, Some(&key)).unwrap();
    assert_eq!(phone.id(), phone_id, "the same client");
    mac.events();
    advance_ms(60_000).await;
    assert!(mac.offered().is_empty(), "still the phone's");
    refused(mac.claim(&id).await, ErrorCode::OwnedByOther);
    phone.answer(&id, "from the phone", false).await.unwrap();
    assert_eq!(text(&outcome_now(&mut rx).unwrap()), "from the phone");
}

#[tokio::test(start_paused = true)]
async fn a_claimant_that_leaves_again_gets_a_whole_grace_period_again() {
    let h = Harness::start(GRACE_10S);
    let (mut mac, phone, _agent, id, _rx) = phone_claims_a_call(&h, 0).await;
    let key = phone.resume_key();
    drop(phone);
    advance_ms(5_000).await;
    drop(FakeApp::open(&h.broker, Some(&key)).unwrap());
    // It left again at 5 s: its claim waits until 15 s, not until the first grace ended.
    mac.events();
    advance_ms(9_999).await;
    assert!(
        mac.offered().is_empty(),
        "returned before its grace was over"
    );
    advance_ms(1).await;
    assert_eq!(mac.offered(), [id]);
}

#[tokio::test(start_paused = true)]
async fn the_grace_does_not_stop_a_claimed_call_from_timing_out() {
    let h = Harness::start(GRACE_10S);
    let (mut mac, phone, _agent, id, mut rx) = phone_claims_a_call(&h, 3).await;
    drop(phone);
    mac.events();
    advance_ms(3_000).await;
    assert_eq!(code(&outcome_now(&mut rx).unwrap()), "timeout");
    advance_ms(10_000).await;
    assert!(
        !mac.offered().contains(&id),
        "an ended call is not offered again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_grace_too_long_for_the_clock_is_forever_not_a_panic() {
    let h = Harness::start("client_tools:\n  resume_grace_s: 18446744073709551615\n");
    let (mut mac, phone, _agent, _id, _rx) = phone_claims_a_call(&h, 0).await;
    drop(phone);
    mac.events();
    advance_ms(365 * 24 * 3_600_000).await;
    assert!(mac.offered().is_empty(), "a year later, still the phone's");
}
