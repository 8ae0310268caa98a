//! The Rust SDK as an approver, against the real broker over TCP and the real `leo-mcp`: a
//! paired device's `Approver` receives the calls that need approval (asked before it
//! connected, and after), approves one as asked, one with edited arguments and denies one with
//! a reason; the agent gets each outcome; a stale digest and a second decision are typed errors.

use leo_app::{AppError, Approver, Call, Endpoint, Error, Reply, RequiredBy, TokenSource, Tool};
use leo_testkit::agent::{Agent, AgentOpts, content_json, error_text, text_of};
use leo_testkit::{Broker, WAIT};
use serde_json::json;

use crate::support::{Running, builder};

const CONFIG: &str = "approvals:
  allow_edits: true
  approvers:
    devices: [phone]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_app_approves_edits_and_denies_and_gets_typed_refusals() {
    // The phone is paired before the broker starts, as an operator sets it up once.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.yaml"), CONFIG).unwrap();
    crate::support::pair_device(home.path(), "phone");
    let broker = Broker::start_in(home).await;
    let deploy = Tool::new("deploy", "Deploys", |call: Call| async move {
        let args: serde_json::Value = call.args()?;
        let env = args["env"].as_str().unwrap_or("?");
        Ok::<_, AppError>(Reply::text(format!("deployed {env}")))
    })
    .needs_approval();
    let _app = Running::start(builder(&broker).group("ops", [deploy]).build().unwrap()).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("ci-7")).await;

    // Asked before the approver connects: it is listed to it all the same.
    let first = agent.spawn_call("deploy", json!({"env": "prod"}));
    let approver = Approver::new(
        Endpoint::from_url(&format!("http://{}", broker.addr)).unwrap(),
        TokenSource::device(broker.home(), "phone"),
    )
    .unwrap();
    let mut requests = approver.requests();
    let mut next = async || {
        tokio::time::timeout(WAIT, requests.next())
            .await
            .unwrap()
            .unwrap()
    };

    let asked = next().await;
    assert_eq!(
        (
            asked.agent.as_str(),
            asked.tool.as_str(),
            asked.arguments.get()
        ),
        ("ci-7", "deploy", r#"{"env":"prod"}"#)
    );
    assert_eq!(
        (asked.required_by, asked.editable),
        (RequiredBy::Tool, true)
    );
    assert!(asked.digest.starts_with("sha256:"), "{}", asked.digest);
    assert!(!approver.approve(&asked, None).await.unwrap().edited);
    assert_eq!(text_of(&first.await.unwrap()), "deployed prod");
    let late = approver.deny(&asked, Some("too late")).await;
    assert!(matches!(late, Err(Error::AlreadyDecided(_))), "{late:?}");

    // Asked while the approver listens: approved with other arguments.
    let second = agent.spawn_call("deploy", json!({"env": "prod"}));
    let asked = next().await;
    let mut stale = asked.clone();
    stale.digest = format!("sha256:{}", "0".repeat(64));
    let refused = approver.approve(&stale, None).await;
    assert!(
        matches!(refused, Err(Error::DigestMismatch(_))),
        "{refused:?}"
    );
    let edited = approver
        .approve(&asked, Some(json!({"env": "staging"})))
        .await
        .unwrap();
    assert!(edited.edited);
    let result = content_json(&second.await.unwrap());
    let said = result[0]["text"].as_str().unwrap_or_default();
    assert!(said.contains("changed the arguments"), "{result}");
    assert_eq!(result[1]["text"], "deployed staging", "{result}");

    // Denied with a reason: the agent gets it as the tool's error.
    let third = agent.spawn_call("deploy", json!({"env": "prod"}));
    let asked = next().await;
    approver
        .deny(&asked, Some("not on a Friday"))
        .await
        .unwrap();
    assert_eq!(error_text(&third.await.unwrap()), "denied: not on a Friday");
    assert!(approver.pending().await.unwrap().is_empty());
}
