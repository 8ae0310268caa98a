//! What apps and API clients send reaches the harness only as `leo-mcp` can read and show it: a
//! result too deep to read is refused at the broker and the session goes on, control characters
//! are replaced on every path into the model's context, and an agent with its own token is
//! bound to its name.

use leo_mcp::channel;
use leo_testkit::{Broker, bin};
use serde_json::{Value, json};

use crate::support::{
    Agent, AgentOpts, App, error_text, text_of, tool, wait_for_tools, wait_until,
};

/// `levels` objects nested as `{"a": {"a": … 0}}`.
fn nested(levels: usize) -> Value {
    let mut v = json!(0);
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_too_deep_is_refused_and_the_other_calls_of_the_session_go_on() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    wait_for_tools(&agent, |names| names == ["echo"]).await;

    let first = agent.spawn_call("echo", json!({"text": "one"}));
    let one = app.next_request().await;
    let second = agent.spawn_call("echo", json!({"text": "two"}));
    let two = app.next_request().await;
    let (one, two) = (
        one.data["id"].as_str().unwrap().to_owned(),
        two.data["id"].as_str().unwrap().to_owned(),
    );

    // 200 levels in annotations: refused, the call still open.
    app.claim_ok(&one).await;
    let deep = json!([{"type": "text", "text": "deep", "annotations": nested(200)}]);
    let r = app.answer(&one, deep).await;
    assert_eq!(r.code(422), "invalid_result");
    assert!(
        r.error().starts_with("at $.content[0].annotations.a.a"),
        "{}",
        r.error()
    );

    // The other call completes, and so does the first, answered properly.
    app.serve(&two, json!([{"type": "text", "text": "two back"}]))
        .await;
    assert_eq!(text_of(&second.await.unwrap()), "two back");
    app.answer(&one, json!([{"type": "text", "text": "one back"}]))
        .await
        .data();
    assert_eq!(text_of(&first.await.unwrap()), "one back");

    // Arguments too deep for an app to read fail that call alone, with their path.
    let result = agent.call("echo", nested(100)).await;
    let text = error_text(&result);
    assert!(
        text.starts_with(&format!(
            "invalid_arguments: at ${}: nested deeper than 64 levels",
            ".a".repeat(64)
        )),
        "{text}"
    );
    let third = agent.spawn_call("echo", json!({"text": "three"}));
    let id = app.next_request().await.data["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.serve(&id, json!([{"type": "text", "text": "still here"}]))
        .await;
    assert_eq!(text_of(&third.await.unwrap()), "still here");
}

/// ESC sequences (CSI, OSC), backspace, NUL, DEL, the one-byte CSI U+009B and a bell.
const NASTY: &str = "\u{1b}[2J\u{1b}]0;t\u{7}x\u{8}\u{8}\u{0}\u{7f}\u{9b}1m";

/// True when `text` has a control character other than a line feed or a tab.
fn has_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_are_replaced_on_every_path_to_the_agent() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let nasty_tool = json!({
        "name": "nasty",
        "label": format!("Label\n{NASTY}"),
        "description": format!("Line one\r\nline two\t{NASTY}"),
        "input_schema": {"type": "object", "properties": {
            "text": {"type": "string", "description": format!("the text{NASTY}")}
        }}
    });
    app.register_ok("g", json!([nasty_tool])).await;

    // Native: description, label and the schema's words, as the harness lists them.
    let pushed = Agent::start(
        broker.home(),
        AgentOpts::native("rocket").env(channel::ENV, "1"),
    )
    .await;
    wait_for_tools(&pushed, |names| names == ["nasty"]).await;
    let tools = pushed.tools().await;
    let t = tools.iter().find(|t| t.name == "nasty").unwrap();
    let description = t.description.as_deref().unwrap();
    assert!(!has_controls(description), "{description:?}");
    assert!(
        description.starts_with("Line one\nline two\t\u{fffd}[2J"),
        "{description:?}"
    );
    let title = t.title.as_deref().unwrap();
    assert!(
        !has_controls(title) && title.starts_with("Label \u{fffd}[2J"),
        "{title:?}"
    );
    let schema = Value::Object((*t.input_schema).clone()).to_string();
    let words = schema.split("the text").nth(1).unwrap();
    assert!(
        words.starts_with("\u{fffd}[2J") && !words.contains("\\u001b"),
        "{schema}"
    );

    // Fallback: leo_app_tools lists the same words.
    let fallback = Agent::start(broker.home(), AgentOpts::fallback("rocket")).await;
    let listing = text_of(&fallback.call("leo_app_tools", json!({})).await);
    let listing: Value = serde_json::from_str(&listing).unwrap();
    let listed = listing["tools"][0]["description"].as_str().unwrap();
    assert_eq!(listed, description);
    assert_eq!(listing["tools"][0]["title"].as_str(), Some(title));

    // An app's error message.
    let call = pushed.spawn_call("nasty", json!({"text": "hi"}));
    let id = app.next_request().await.data["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.serve_error(&id, "bad_input", &format!("failed:\n{NASTY}"))
        .await;
    let text = error_text(&call.await.unwrap());
    assert!(!has_controls(&text), "{text:?}");
    assert!(
        text.starts_with("bad_input: failed:\n\u{fffd}[2J\u{fffd}]0;t\u{fffd}x"),
        "{text:?}"
    );

    // A message, pushed on the Claude Code channel and returned by leo_messages.
    let first = pushed.call("leo_messages", json!({})).await;
    assert_eq!(text_of(&first), "no unread messages");
    broker
        .http()
        .post(
            "/web/agent/rocket/message",
            &json!({"text": format!("hello{NASTY}"), "from": "ops"}),
        )
        .await
        .data();
    wait_until("a channel push", || {
        !pushed.custom(channel::METHOD).is_empty()
    })
    .await;
    let push = &pushed.custom(channel::METHOD)[0];
    let content = push["content"].as_str().unwrap();
    assert!(!has_controls(content), "{content:?}");
    assert!(
        content.starts_with("[message from ops] hello\u{fffd}[2J"),
        "{content:?}"
    );
    let text = text_of(&pushed.call("leo_messages", json!({})).await);
    assert!(!has_controls(&text), "{text:?}");
    assert!(text.ends_with(content), "{text:?}");
}

/// A form whose words carry every kind of control character, and whose values are clean.
fn nasty_form() -> Value {
    json!({
        "type": "object",
        "title": format!("Deploy{NASTY}"),
        "description": format!("Pick one\n{NASTY}"),
        "properties": {
            "env": {
                "type": "string",
                "title": format!("Env{NASTY}"),
                "description": format!("where{NASTY}"),
                "enum": ["prod", "dev"],
                "enumNames": [format!("Production{NASTY}"), "Development"]
            },
            "note": {"type": "string", "title": format!("Note{NASTY}"), "default": "none"}
        },
        "required": ["env"]
    })
}

/// Every string of a JSON value, keys included.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                strings(v, out);
            }
        }
        _ => {}
    }
}

/// An app's question reaches the harness with the message and the form's words sanitized and
/// its values as they were, as `elicitation/create` (2025-11-25) and as `input_required`
/// (2026-07-28); a form whose values hold a control character is refused with its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_reaches_the_harness_without_control_characters_in_either_revision() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    for discover_first in [false, true] {
        let mut opts = AgentOpts::native("rocket").answering(json!({"env": "prod"}));
        opts.discover_first = discover_first;
        let agent = Agent::start(broker.home(), opts).await;
        wait_for_tools(&agent, |names| names == ["echo"]).await;
        let call = agent.call_answering_rounds("echo", json!({"text": "hi"}));
        let app_side = async {
            let id = app.claim_next().await;
            let body =
                json!({"message": format!("Deploy?\n{NASTY}"), "requested_schema": nasty_form()});
            let asked = app.post_for(&id, "input", body).await;
            assert_eq!(
                asked.data(),
                &json!({"action": "accept", "content": {"env": "prod"}})
            );
            let dirty = json!({"type": "object", "properties": {
                "env": {"type": "string", "enum": ["prod", format!("dev{NASTY}")]}
            }});
            let dirty = app
                .post_for(
                    &id,
                    "input",
                    json!({"message": "?", "requested_schema": dirty}),
                )
                .await;
            app.answer(&id, json!([{"type": "text", "text": "deployed"}]))
                .await
                .data();
            dirty
        };
        let (result, dirty) = tokio::join!(call, app_side);
        assert_eq!(text_of(&result), "deployed");
        let revision = if discover_first {
            "input_required"
        } else {
            "elicitation/create"
        };
        assert_eq!(
            agent.stderr().contains("question sent as input_required"),
            discover_first,
            "{revision}: {}",
            agent.stderr()
        );
        let questions = agent.seen.questions.lock().unwrap().clone();
        assert_eq!(
            questions[0],
            "Deploy?\n\u{fffd}[2J\u{fffd}]0;t\u{fffd}x\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}1m",
            "{revision}"
        );
        let form = agent.seen.forms.lock().unwrap()[0].clone();
        let mut all = Vec::new();
        strings(&form, &mut all);
        for text in &all {
            assert!(!has_controls(text), "{revision}: {text:?} in {form}");
        }
        let env = &form["properties"]["env"];
        assert_eq!(env["enum"], json!(["prod", "dev"]), "{revision}: {form}");
        assert_eq!(
            form["properties"]["note"]["default"], "none",
            "{revision}: {form}"
        );
        assert!(
            env["enumNames"][0]
                .as_str()
                .unwrap()
                .starts_with("Production\u{fffd}[2J"),
            "{revision}: {form}"
        );
        for (text, start) in [
            (&form["title"], "Deploy\u{fffd}"),
            (&form["description"], "Pick one\n\u{fffd}"),
            (&env["title"], "Env\u{fffd}"),
            (&env["description"], "where\u{fffd}"),
        ] {
            assert!(
                text.as_str().unwrap().starts_with(start),
                "{revision}: {form}"
            );
        }
        // A value the answer must match is refused, not rewritten, and never asked.
        assert_eq!(dirty.code(400), "invalid_parameter", "{revision}");
        assert!(
            dirty
                .error()
                .starts_with("at $.requested_schema.properties.env.enum[1]: "),
            "{dirty:?}"
        );
        assert_eq!(agent.seen.questions.lock().unwrap().len(), 1, "{revision}");
    }
}

/// Runs `leo agent add NAME` on `home`.
fn agent_add(home: &std::path::Path, name: &str) {
    let out = std::process::Command::new(bin("leo"))
        .args(["agent", "add", name])
        .env("LEO_HOME", home)
        .output()
        .expect("run leo agent add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first answer of `leo_messages` once the session has settled, connected or refused.
async fn messages_once_settled(agent: &Agent) -> String {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let result = agent.call("leo_messages", json!({})).await;
        let text = text_of(&result);
        if text != "no_client: broker not running" {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "never settled");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_its_own_token_opens_its_sessions_with_it_alone() {
    let broker = Broker::start().await;
    let home = broker.home();
    agent_add(home, "scout");
    let own = home.join("state/agents/scout.token");
    let shared = home.join("state/agent.token");

    // leo-mcp finds scout's token in the home by itself.
    let scout = Agent::start(home, AgentOpts::native("scout")).await;
    assert_eq!(messages_once_settled(&scout).await, "no unread messages");

    // Or is given it, for an agent that cannot read the home's state (a copy elsewhere).
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("scout.token");
    std::fs::copy(&own, &copy).unwrap();
    let given = Agent::start(
        home,
        AgentOpts::native("scout").env("LEO_AGENT_TOKEN_FILE", copy.to_str().unwrap()),
    )
    .await;
    assert_eq!(messages_once_settled(&given).await, "no unread messages");

    // The shared token is refused for scout, with the reason.
    let shared_as_scout = Agent::start(
        home,
        AgentOpts::native("scout").env("LEO_AGENT_TOKEN_FILE", shared.to_str().unwrap()),
    )
    .await;
    let text = messages_once_settled(&shared_as_scout).await;
    assert!(
        text.starts_with(
            "no_client: the broker refused the session: unauthorized: at $.token: agent \"scout\" has its own token"
        ),
        "{text}"
    );

    // Scout's token opens no other name.
    let scout_as_rocket = Agent::start(
        home,
        AgentOpts::native("rocket").env("LEO_AGENT_TOKEN_FILE", copy.to_str().unwrap()),
    )
    .await;
    let text = messages_once_settled(&scout_as_rocket).await;
    assert_eq!(
        text,
        "no_client: the broker refused the session: unauthorized: at $.token: not the agent token"
    );

    // A token file that is not there is a start-up error, said at once.
    let out = std::process::Command::new(bin("leo-mcp"))
        .args([
            "--agent",
            "scout",
            "--token-file",
            "/nonexistent/scout.token",
        ])
        .env("LEO_HOME", home)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/scout.token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
