//! The web console's HTTP rules, without a browser: login and cookie flags, CSRF and Origin
//! checks, the Host check before everything, tokens on console routes, session expiry and
//! logout, the live status stream, cancelling calls, and the `ask_human` switch and answers.

use leo_testkit::Broker;
use serde_json::{Value, json};

use crate::security::secured;
use crate::support::{App, Console, agent, outcome_code, result_of, tool};

fn html(r: &leo_testkit::Reply) -> &str {
    r.body.as_str().unwrap_or_default()
}

#[tokio::test]
async fn login_takes_the_operator_token_and_sets_a_strict_cookie() {
    let (broker, device, _) = secured().await;
    let anon = broker.http().with_token(None);

    let r = anon.get("/").await;
    assert_eq!((r.status, r.header("location")), (303, Some("/login")));
    let r = anon.get("/login").await;
    assert_eq!(r.status, 200);
    assert!(r.content_type.starts_with("text/html"), "{r:?}");
    assert!(html(&r).contains(r#"name="token""#));
    assert_eq!(
        r.header("content-security-policy"),
        Some("default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("referrer-policy"), Some("same-origin"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));

    // Devices are apps, not operators; the agent token and garbage fail alike.
    for token in [
        device.as_str(),
        &broker.agent_token(),
        &"f".repeat(64),
        "short",
    ] {
        let r = Console::try_login(&broker.http(), token).await;
        assert_eq!(r.status, 401, "{token}: {r:?}");
        assert!(html(&r).contains("not the operator token"), "{r:?}");
        assert!(r.header("set-cookie").is_none());
    }
    for (body, why) in [
        ("", "Enter the operator token"),
        ("token=", "Enter the operator token"),
        ("token=a&user=b", "unknown form field &quot;user&quot;"),
        ("token=a&token=b", "more than one token"),
    ] {
        let r = anon
            .send(
                "POST",
                "/login",
                body.to_owned().into(),
                &[("content-type", "application/x-www-form-urlencoded")],
            )
            .await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert!(html(&r).contains(why), "{body}: {}", html(&r));
    }

    let r = Console::try_login(&broker.http(), &broker.operator_token()).await;
    assert_eq!((r.status, r.header("location")), (303, Some("/")));
    let cookie = r.header("set-cookie").unwrap();
    let (pair, flags) = cookie.split_once("; ").unwrap();
    let id = pair.strip_prefix("leo_session=").unwrap();
    assert_eq!(id.len(), 64);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(flags, "HttpOnly; SameSite=Strict; Path=/; Max-Age=43200");

    let console = Console::login(&broker).await;
    assert_eq!(console.csrf.len(), 64);
    let page = console.http.get("/").await;
    assert!(html(&page).contains(r#"<script src="/console/console.js" defer></script>"#));
    // Every script is a file of the console's own (console.js, and grants.js for its OAuth
    // section).
    assert_eq!(
        html(&page).matches("<script").count(),
        html(&page).matches(r#"<script src="/console/"#).count(),
        "no inline script"
    );
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    let r = console.http.get("/login").await;
    assert_eq!((r.status, r.header("location")), (303, Some("/")));
    let js = anon.get("/console/console.js").await;
    assert_eq!(
        (js.status, js.content_type.as_str()),
        (200, "text/javascript; charset=utf-8")
    );
    assert!(html(&js).contains("x-leo-csrf"));
    let css = anon.get("/console/console.css").await;
    assert_eq!(
        (css.status, css.content_type.as_str()),
        (200, "text/css; charset=utf-8")
    );
    let icon = anon.get("/console/icon.svg").await;
    assert_eq!(
        (icon.status, icon.content_type.as_str()),
        (200, "image/svg+xml")
    );
}

#[tokio::test]
async fn state_changes_need_the_csrf_header_and_this_origin() {
    let broker = Broker::start().await;
    let console = Console::login(&broker).await;
    let send = |headers: Vec<(&'static str, String)>| {
        let http = console.http.clone();
        async move {
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let body = json!({"on": false}).to_string();
            http.send("POST", "/console/ask-human", body.into(), &h)
                .await
        }
    };
    let r = send(vec![]).await;
    assert_eq!(r.code(403), "forbidden");
    assert!(r.error().contains("missing X-Leo-Csrf"), "{r:?}");
    let r = send(vec![("x-leo-csrf", "0".repeat(64))]).await;
    assert_eq!(r.code(403), "forbidden");
    assert!(r.error().contains("does not match"), "{r:?}");
    let own = format!("http://{}", broker.addr);
    let csrf = || ("x-leo-csrf", console.csrf.clone());
    for origin in [
        "http://evil.example".to_owned(),
        "null".to_owned(),
        format!("https://{}", broker.addr),
    ] {
        let r = send(vec![csrf(), ("origin", origin.clone())]).await;
        assert_eq!(r.code(403), "forbidden", "{origin}");
        assert!(
            r.error().starts_with("cross-origin request refused"),
            "{r:?}"
        );
    }
    assert_eq!(
        send(vec![csrf(), ("origin", own.clone())]).await.data()["on"],
        false
    );
    assert_eq!(send(vec![csrf()]).await.data()["on"], false);

    // Login CSRF: a foreign page cannot log the browser in, even with the right token.
    let r = broker
        .http()
        .with_token(None)
        .send(
            "POST",
            "/login",
            format!("token={}", broker.operator_token()).into(),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", "http://evil.example"),
            ],
        )
        .await;
    assert_eq!(r.code(403), "forbidden");
    assert!(r.header("set-cookie").is_none());

    // Bad bodies name the field; GETs need a session but no CSRF header.
    for (body, code, at) in [
        ("{\"on\": \"yes\"}", "invalid_parameter", "at $.on"),
        ("{\"on\": true, \"x\": 1}", "unknown_parameter", "x"),
        ("{", "invalid_parameter", "invalid JSON"),
        ("", "invalid_parameter", "at $"),
    ] {
        let r = console
            .http
            .send(
                "POST",
                "/console/ask-human",
                body.to_owned().into(),
                &[("x-leo-csrf", &console.csrf)],
            )
            .await;
        assert_eq!(r.code(400), code, "{body}");
        assert!(r.error().contains(at), "{body}: {}", r.error());
    }
    assert_eq!(
        console.http.get("/console/session").await.data()["expires_in_s"]
            .as_u64()
            .unwrap()
            / 60,
        12 * 60 - 1
    );
}

#[tokio::test]
async fn the_host_check_runs_before_the_console_and_tokens_do_not_open_it() {
    let (broker, device, client) = secured().await;
    let console = Console::login(&broker).await;
    let foreign = console
        .http
        .with_host(&format!("evil.example:{}", broker.addr.port()));
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/login"),
        ("POST", "/login"),
        ("GET", "/console/console.js"),
        ("GET", "/console/events"),
        ("POST", "/console/ask-human"),
    ] {
        let r = foreign
            .send(
                method,
                path,
                format!("token={}", broker.operator_token()).into(),
                &[
                    ("x-leo-csrf", &console.csrf),
                    ("content-type", "application/x-www-form-urlencoded"),
                ],
            )
            .await;
        assert_eq!(
            (r.status, r.body.clone()),
            (403, Value::String("forbidden host".into())),
            "{method} {path}"
        );
    }

    // A cookie never opens an API route; a token never opens a session route.
    let r = console.http.get("/api/v1/status").await;
    assert_eq!(r.code(401), "unauthorized");
    for (token, want) in [
        (broker.operator_token(), 403),
        (device.clone(), 403),
        (broker.agent_token(), 403),
        (client.clone(), 403),
        ("f".repeat(64), 401),
    ] {
        let http = console.http.with_token(Some(&token));
        for path in ["/", "/console/events", "/console/session"] {
            assert_eq!(http.get(path).await.status, want, "GET {path}");
        }
        let r = http
            .send(
                "POST",
                "/console/ask-human",
                json!({"on": true}).to_string().into(),
                &[("x-leo-csrf", &console.csrf)],
            )
            .await;
        assert_eq!(r.status, want, "{r:?}");
    }
    // The API-client token is refused even on the public pages.
    let http = broker.http().with_token(Some(&client));
    for path in ["/login", "/console/console.js", "/favicon.ico"] {
        assert_eq!(http.get(path).await.code(403), "forbidden", "{path}");
    }
    // The unix socket does not serve the console.
    let unix = broker.http_unix();
    assert_eq!(unix.get("/login").await.code(404), "not_found");
    assert_eq!(
        unix.with_token(None).get("/login").await.code(401),
        "unauthorized"
    );
    assert_eq!(
        broker.http().get("/api/v1/status").await.data()["ask_human"],
        false,
        "nothing above switched anything"
    );
}

#[tokio::test]
async fn sessions_expire_and_logout_ends_them() {
    // The expiry to the millisecond is tested with paused time (`http::console::session`);
    // here, that the binary applies `session_ttl_s` and what an expired login sees.
    let broker = Broker::start_with("console:\n  session_ttl_s: 1\n").await;
    let login = Console::try_login(&broker.http(), &broker.operator_token()).await;
    let set_cookie = login.header("set-cookie").expect("a session cookie");
    assert!(set_cookie.ends_with("; Max-Age=1"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap();
    let http = broker.http().with_token(None).with_header("cookie", cookie);
    crate::support::eventually(|| async { http.get("/console/session").await.status == 401 }).await;
    let r = http.get("/console/session").await;
    assert_eq!(r.code(401), "unauthorized");
    assert!(r.error().contains("/login"), "{r:?}");
    assert_eq!(http.get("/").await.header("location"), Some("/login"));

    let broker = Broker::start().await;
    let console = Console::login(&broker).await;
    let mut events = console.events().await;
    events.next_of("status").await;
    let r = console
        .http
        .send("POST", "/logout", Default::default(), &[])
        .await;
    assert_eq!(r.code(403), "forbidden", "logout needs the CSRF header too");
    let r = console.post("/logout", &json!({})).await;
    assert_eq!(r.data()["logged_out"], true);
    assert_eq!(
        r.header("set-cookie"),
        Some("leo_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
    );
    assert_eq!(console.http.get("/console/session").await.status, 401);
    assert_eq!(
        console
            .post("/console/ask-human", &json!({"on": true}))
            .await
            .status,
        401
    );
    // The open stream ends with its login.
    assert!(
        tokio::time::timeout(leo_testkit::WAIT, async {
            while events.next_or_end().await.is_some() {}
        })
        .await
        .is_ok(),
        "the stream outlived its login"
    );
}

#[tokio::test]
async fn the_live_view_sends_a_snapshot_at_open_and_after_changes() {
    let broker = Broker::start().await;
    let console = Console::login(&broker).await;
    let mut events = console.events().await;
    let first = events.next().await;
    assert_eq!(first.event, "status");
    assert_eq!(first.data["tools"], json!([]));
    assert_eq!(first.data["ask_human"], false);

    let mut app = App::connect(&broker.http()).await;
    for i in 0..10 {
        app.register("ci", json!([tool(&format!("step_{i}"))]))
            .await
            .data();
    }
    // A burst ends in a snapshot of the last state.
    let last = Console::status_until(&mut events, |s| s["tools"] == json!(["step_9"])).await;
    let groups = &last["tools_by_group"]["ci"];
    assert_eq!(groups[0]["name"], "step_9");
    assert_eq!(groups[0]["clients"], json!([app.id]));
    let me = last["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["client_id"] == app.id.as_str())
        .unwrap();
    assert_eq!(me["groups"], json!(["ci"]));

    let mut ipc = agent(&broker, "rocket").await;
    Console::status_until(&mut events, |s| s["agents"][0]["agent"] == "rocket").await;
    ipc.call(1, "step_9", json!({"text": "x".repeat(500)}))
        .await;
    let req = app.next_request().await;
    let s = Console::status_until(&mut events, |s| s["pending"] == 1).await;
    let call = &s["requests"][0];
    assert_eq!(call["id"], req.data["id"]);
    assert_eq!(
        (call["agent"].as_str(), call["state"].as_str()),
        (Some("rocket"), Some("parked"))
    );
    assert!(call["age_s"].is_u64());
    assert!(
        call.get("arguments").is_none(),
        "only the console's own calls carry arguments"
    );
    let preview = call["arguments_preview"].as_str().unwrap();
    assert_eq!(preview.chars().count(), 201);
    assert!(preview.starts_with(r#"{"text":"xxx"#) && preview.ends_with('…'));
}

#[tokio::test]
async fn the_operator_cancels_a_call_others_may_not() {
    let (broker, device, _) = secured().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("ci", json!([tool("deploy")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "deploy", json!({})).await;
    let id = app.next_request_id().await;
    let path = format!("/api/v1/client-tools/requests/{id}/cancel");

    for token in [device.clone(), broker.agent_token()] {
        let r = broker
            .http()
            .with_token(Some(&token))
            .post(&path, &json!({}))
            .await;
        assert_eq!(r.code(403), "forbidden");
    }
    let r = broker.http().post(&path, &json!({"reason": "x"})).await;
    assert_eq!(r.code(400), "unknown_parameter");
    let r = broker.http().post_raw(&path, "").await;
    assert_eq!(r.data(), &json!({"id": id, "state": "cancelled"}));
    let outcome = result_of(&mut ipc, 1).await;
    assert_eq!(outcome_code(&outcome), "cancelled");
    assert_eq!(
        outcome["error"]["message"],
        "the operator cancelled the call"
    );
    let cancelled = app.sse.next_of("client_tool.cancelled").await;
    assert_eq!(cancelled.data["reason"], "cancelled_by_operator");

    let r = broker.http().post(&path, &json!({})).await;
    assert_eq!(r.code(409), "already_settled");
    assert!(r.error().ends_with("by cancellation"), "{r:?}");
    let r = broker
        .http()
        .post(
            "/api/v1/client-tools/requests/r_000000000000000000000000/cancel",
            &json!({}),
        )
        .await;
    assert_eq!(r.code(404), "unknown_request");

    // The console cancels through the same operation.
    let console = Console::login(&broker).await;
    ipc.call(2, "deploy", json!({})).await;
    let id = app.next_request_id().await;
    let r = console
        .post(&format!("/console/requests/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(r.data()["state"], "cancelled");
    assert_eq!(outcome_code(&result_of(&mut ipc, 2).await), "cancelled");
    let r = console
        .post(&format!("/console/requests/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(r.code(409), "already_settled");
}

#[tokio::test]
async fn ask_human_is_switched_on_asked_answered_and_withdrawn() {
    let broker = Broker::start().await;
    let console = Console::login(&broker).await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    app.register("ci", json!([tool("deploy")])).await.data();
    let mut events = console.events().await;

    let r = console
        .post("/console/ask-human", &json!({"on": true}))
        .await;
    assert_eq!(r.data(), &json!({"on": true}));
    assert_eq!(
        console
            .post("/console/ask-human", &json!({"on": true}))
            .await
            .data(),
        &json!({"on": true}),
        "idempotent"
    );
    let tools = http.get("/api/v1/client-tools").await;
    let ask = tools.data()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ask_human")
        .unwrap()
        .clone();
    assert_eq!(ask["group"], "console");
    assert_eq!(ask["timeout_s"], Value::Null, "a handoff");
    assert_eq!(ask["clients"], json!(["console"]));
    assert_eq!(ask["input_schema"]["required"], json!(["question"]));
    assert!(ask["description"].as_str().unwrap().contains("operator"));

    // Apps cannot take the console's name, group or client id.
    let r = app.register("other", json!([tool("Ask_Human")])).await;
    assert_eq!(r.code(409), "name_conflict");
    let r = app.register("console", json!([tool("x")])).await;
    assert_eq!(r.code(409), "name_conflict");
    assert!(r.error().contains("reserved"), "{r:?}");

    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(
        1,
        "ask_human",
        json!({"question": "Ship it?", "choices": ["yes", "no"]}),
    )
    .await;
    let req = app.next_request().await;
    let id = req.data["id"].as_str().unwrap().to_owned();
    let r = http
        .post(
            &format!("/api/v1/client-tools/requests/{id}/claim"),
            &json!({"client_id": "console"}),
        )
        .await;
    assert_eq!(r.code(404), "unknown_client");
    let s = Console::status_until(&mut events, |s| s["pending"] == 1).await;
    assert_eq!(
        s["requests"][0]["arguments"],
        json!({"question": "Ship it?", "choices": ["yes", "no"]})
    );
    assert_eq!(s["ask_human"], true);

    let answer = format!("/console/requests/{id}/answer");
    let r = console.post(&answer, &json!({"text": "  "})).await;
    assert_eq!(r.code(400), "invalid_parameter");
    let r = console.post(&answer, &json!({"answer": "yes"})).await;
    assert_eq!(r.code(400), "unknown_parameter");
    let r = console.post(&answer, &json!({"text": "yes"})).await;
    assert_eq!(r.data(), &json!({"id": id, "state": "settled"}));
    assert_eq!(
        result_of(&mut ipc, 1).await,
        json!({"content": [{"type": "text", "text": "yes"}]})
    );
    assert_eq!(
        console
            .post(&answer, &json!({"text": "no"}))
            .await
            .code(409),
        "already_settled"
    );

    // The console answers only its own calls.
    ipc.call(2, "deploy", json!({})).await;
    let other = app.next_request_id().await;
    let r = console
        .post(
            &format!("/console/requests/{other}/answer"),
            &json!({"text": "done"}),
        )
        .await;
    assert_eq!(r.code(409), "not_provider");
    assert!(r.error().contains("only its own ask_human"), "{r:?}");
    let r = console
        .post(
            "/console/requests/r_000000000000000000000000/answer",
            &json!({"text": "x"}),
        )
        .await;
    assert_eq!(r.code(404), "unknown_request");

    // Off withdraws the tool: a waiting question ends cancelled.
    ipc.call(3, "ask_human", json!({"question": "Still there?"}))
        .await;
    app.next_request().await;
    assert_eq!(
        console
            .post("/console/ask-human", &json!({"on": false}))
            .await
            .data(),
        &json!({"on": false})
    );
    let outcome = result_of(&mut ipc, 3).await;
    assert_eq!(outcome_code(&outcome), "cancelled");
    assert_eq!(
        outcome["error"]["message"],
        "tool \"ask_human\" was withdrawn"
    );
    assert_eq!(
        app.sse.next_of("client_tool.cancelled").await.data["reason"],
        "tool_withdrawn"
    );
    let status = http.get("/api/v1/status").await;
    assert_eq!(status.data()["ask_human"], false);
    assert!(
        !status.data()["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("ask_human"))
    );

    // An app that registered ask_human first keeps it: the switch says why it cannot.
    app.register("people", json!([tool("ask_human")]))
        .await
        .data();
    let r = console
        .post("/console/ask-human", &json!({"on": true}))
        .await;
    assert_eq!(r.code(409), "name_conflict");
    assert!(r.error().contains("\"ask_human\""), "{r:?}");
    assert_eq!(http.get("/api/v1/status").await.data()["ask_human"], false);
}

#[tokio::test]
async fn the_config_can_switch_ask_human_on_at_start() {
    let broker = Broker::start_with("console:\n  ask_human: true\n").await;
    let status = broker.http().get("/api/v1/status").await;
    assert_eq!(status.data()["ask_human"], true);
    assert_eq!(status.data()["tools"], json!(["ask_human"]));
    // The name is Leo's own, so deny_tools may name it before any app ever registered it.
    let broker = Broker::start_with("agents:\n  rocket:\n    deny_tools: [ask_human]\n").await;
    let status = broker.http().get("/api/v1/status").await;
    assert_eq!(
        status.data()["ask_human"],
        false,
        "off unless the config says on"
    );
}
