//! What apps, sidecars and the files on disk hand the broker is held to what the other side can
//! read and to who may write it: results and arguments no deeper than `leo-mcp` and `leo-app`
//! read, strict base64, a config only its owner may write, and per-agent tokens that bind a
//! session to one name and its mailbox.

use std::os::unix::fs::PermissionsExt;

use leo_testkit::ipc::texts;
use leo_testkit::{Broker, Ipc, bin};
use serde_json::{Value, json};

use crate::support::{App, agent, outcome_code, result_of, tool};

/// `levels` objects nested as `{"a": {"a": … 0}}`.
fn nested(levels: usize) -> Value {
    let mut v = json!(0);
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

/// `.a` repeated: the path into `nested`.
fn path_a(levels: usize) -> String {
    ".a".repeat(levels)
}

#[tokio::test]
async fn results_too_deep_or_with_loose_base64_are_refused_with_their_path() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.claim(&id).await.data();

    // 200 levels inside annotations: leo-mcp could not read it.
    let deep = json!([{"type": "text", "text": "x", "annotations": nested(200)}]);
    let r = app.answer(&id, deep).await;
    assert_eq!(r.code(422), "invalid_result");
    // The block is level 1 and annotations level 2, so the first value too deep is the
    // 63rd object inside annotations.
    let want = format!(
        "at $.content[0].annotations{}: nested deeper than 64 levels",
        path_a(63)
    );
    assert!(r.error().starts_with(&want), "{}", r.error());
    // At the limit it is fine: the block, then 63 objects from annotations down.
    let at_limit = json!([{"type": "text", "text": "x", "annotations": nested(63)}]);

    for (content, at) in [
        (
            json!([{"type": "image", "data": "A", "mimeType": "image/png"}]),
            "at $.content[0].data: expected base64",
        ),
        (
            json!([{"type": "text", "text": "ok"}, {"type": "audio", "data": "AB=", "mimeType": "audio/wav"}]),
            "at $.content[1].data: expected base64",
        ),
        (
            json!([{"type": "image", "data": "QR==", "mimeType": "image/png"}]),
            "at $.content[0].data: expected base64",
        ),
        (
            json!([{"type": "resource", "resource": {"uri": "file:///x", "blob": "AB="}}]),
            "at $.content[0].resource.blob: expected base64",
        ),
    ] {
        let r = app.answer(&id, content.clone()).await;
        assert_eq!(r.code(422), "invalid_result", "{content}");
        assert!(r.error().starts_with(at), "{content}: {}", r.error());
    }

    // None of those ended the call: a good result still does.
    app.answer(&id, at_limit.clone()).await.data();
    let outcome = result_of(&mut ipc, 1).await;
    assert_eq!(outcome["content"], at_limit);
}

#[tokio::test]
async fn arguments_too_deep_are_refused_with_their_path() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;

    ipc.call(1, "echo", nested(100)).await;
    let outcome = result_of(&mut ipc, 1).await;
    assert_eq!(outcome_code(&outcome), "invalid_arguments", "{outcome}");
    let message = outcome["error"]["message"].as_str().unwrap();
    let want = format!("at ${}: nested deeper than 64 levels", path_a(64));
    assert!(message.starts_with(&want), "{message}");

    // At the limit the call is parked as usual.
    ipc.call(2, "echo", nested(64)).await;
    let id = app.next_request_id().await;
    app.claim(&id).await.data();
    app.answer(&id, json!([{"type": "text", "text": "ok"}]))
        .await
        .data();
    assert_eq!(outcome_code(&result_of(&mut ipc, 2).await), "");
}

#[tokio::test]
async fn a_config_its_group_or_others_can_write_stops_the_start() {
    for mode in [0o666, 0o620, 0o602] {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join("config.yaml");
        std::fs::write(&path, "web:\n  port: 8371\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = leo_testkit::spawn(home.path())
            .await
            .expect_err("start must fail");
        assert!(
            err.contains(&format!("permissions are {mode:o}"))
                && err.contains(&format!("chmod go-w {}", path.display())),
            "{mode:o}: {err}"
        );
    }
    // Readable by others is fine: it holds no secret.
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("config.yaml");
    std::fs::write(&path, "web:\n  port: 0\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _broker = Broker::start_in(home).await;
}

fn leo(home: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(bin("leo"))
        .args(args)
        .env("LEO_HOME", home)
        .output()
        .expect("run leo");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The first frame the broker answers `hello` with, as `agent` with `token`.
async fn hello(broker: &Broker, token: &str, agent: &str) -> (Ipc, Value) {
    let mut ipc = Ipc::connect(&broker.home().join("run/sidecar.sock")).await;
    ipc.send(&json!({
        "type": "hello", "v": 1, "agent": agent, "session": "s1", "token": token,
        "mode": "native"
    }))
    .await;
    let first = ipc.recv().await;
    (ipc, first)
}

#[tokio::test]
async fn an_agent_with_its_own_token_is_bound_to_that_name_and_mailbox() {
    let broker = Broker::start().await;
    let shared = broker.agent_token();
    // Both agents are known (have connected once), with the shared token.
    agent(&broker, "scout").await.close().await;
    agent(&broker, "rocket").await.close().await;

    // Given while the broker runs: it applies to the next session, no restart.
    let (ok, out) = leo(broker.home(), &["agent", "add", "scout"]);
    assert!(ok, "{out}");
    let path = broker.home().join("state/agents/scout.token");
    let own = std::fs::read_to_string(&path).unwrap().trim().to_owned();
    assert!(
        own.len() == 64 && own.bytes().all(|b| b.is_ascii_hexdigit()),
        "{own}"
    );
    assert!(out.contains(&own), "the token is shown once: {out}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(
        leo(broker.home(), &["agent", "list"]),
        (true, "scout\n".into())
    );
    let (ok, out) = leo(broker.home(), &["agent", "add", "scout"]);
    assert!(!ok && out.contains("already has its own token"), "{out}");

    // The shared token no longer opens scout; scout's token opens nothing but scout.
    let (_, refused) = hello(&broker, &shared, "scout").await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "unauthorized");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("agent \"scout\" has its own token") && message.contains("--token-file"),
        "{message}"
    );
    let (_, refused) = hello(&broker, &own, "rocket").await;
    assert_eq!(
        (refused["code"].as_str(), refused["message"].as_str()),
        (
            Some("unauthorized"),
            Some("at $.token: not the agent token")
        )
    );
    // Nor is it any use on HTTP.
    let r = broker
        .http()
        .with_token(Some(&own))
        .get("/api/v1/status")
        .await;
    assert_eq!(r.code(401), "unauthorized");

    // Each session reads its own mailbox only.
    for (to, text) in [("rocket", "for rocket"), ("scout", "for scout")] {
        crate::support::message(&broker, to, text).await.data();
    }
    let (mut scout, welcome) = hello(&broker, &own, "scout").await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    let got = scout.fetch_messages(1).await;
    assert_eq!(texts(&got), ["[message from ops] for scout"]);
    let (mut rocket, welcome) = hello(&broker, &shared, "rocket").await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    let got = rocket.fetch_messages(1).await;
    assert_eq!(texts(&got), ["[message from ops] for rocket"]);

    // `leo call` as scout opens its session with scout's own token.
    let (ok, out) = leo(broker.home(), &["call", "--agent", "scout", "nothing"]);
    assert!(!ok && out.contains("no_client"), "{out}");

    // Removed: the shared token opens scout again.
    let (ok, out) = leo(broker.home(), &["agent", "rm", "scout"]);
    assert!(ok, "{out}");
    assert!(!path.exists());
    let (_, welcome) = hello(&broker, &shared, "scout").await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    assert!(
        leo(broker.home(), &["agent", "list"])
            .1
            .starts_with("no agent has its own token")
    );
}

#[tokio::test]
async fn sidecar_connections_past_the_limit_are_refused_clearly_and_a_closed_one_frees_its_slot() {
    // `web.max_sessions` set low: the rule is the same at the default (1,024), only slower.
    const MAX: usize = 16;
    let broker = Broker::start_with(&format!("web:\n  max_sessions: {MAX}\n")).await;
    let sock = broker.home().join("run/sidecar.sock");
    let mut open = Vec::new();
    for i in 0..MAX {
        open.push(agent(&broker, &format!("a{i}")).await);
    }
    let mut extra = Ipc::connect(&sock).await;
    let refused = extra.recv().await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "internal");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("sidecar connections open"), "{message}");
    assert!(extra.recv_or_end().await.is_none(), "and closed");
    // Closing one session lets the next one in.
    open.pop().unwrap().close().await;
    let mut next = None;
    for _ in 0..50 {
        let mut ipc = Ipc::connect(&sock).await;
        ipc.send(&json!({
            "type": "hello", "v": 1, "agent": "late", "session": "late-s1",
            "token": broker.agent_token(), "mode": "native"
        }))
        .await;
        let frame = ipc.recv().await;
        if frame["type"] == "welcome" {
            next = Some(frame);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(next.is_some(), "a freed slot is usable");
}
