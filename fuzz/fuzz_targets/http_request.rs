//! The broker's HTTP request path on arbitrary bytes, without a runtime: the head parsed by
//! the parser hyper uses, the target by `http::Uri` as hyper does, the route matched by
//! `matchit` as axum does, then the broker's own rules (`broker/src/http/rules.rs`, compiled
//! here alone): the Host and authority check, the route × caller policy, the message target's
//! decoding, the body limit, and the body's parse. Never a panic, and the rules agree with
//! each other: an admitted request names only our authorities, the gate finds the target of
//! every request routed to the message route, and a decoded target is an agent name.
//!
//! `/mcp` (`Route::Mcp`) checks its callers itself: the target holds its rules to the table
//! (agents only, TCP only, never the metrics listener), parses `Leo-Agent` by the one name rule
//! and reads its body as JSON as the route does before the MCP server sees it. The corpus's
//! `/mcp` inputs carry `AGENT_TOKEN`, which `broker/tests/attacks.rs` replaces with the real
//! token when it replays them, so they reach the MCP server there.
//!
//! Every input also takes the path of the `metrics.bind` listener: the same Host check, then
//! the same table filtered by `Route::on_metrics_listener`, which must leave `GET /metrics`
//! and the probes (`GET /healthz`, `GET /readyz`) alone, routes no token is asked for there and
//! no body is read for.
#![no_main]

#[allow(dead_code)]
#[path = "../../broker/src/http/rules.rs"]
mod rules;

use std::collections::HashMap;
use std::sync::OnceLock;

use leo_protocol::envelope::parse_json;
use libfuzzer_sys::fuzz_target;
use rules::{HostCheck, HostRefusal, Kind, ROUTES, Route, decode_target, message_segment};

const PORT: u16 = 8370;
const MAX_BODY: usize = 2 * 1024 * 1024;

/// One matcher per method, from the same table the broker names its routes by.
fn routers() -> &'static HashMap<&'static str, matchit::Router<&'static str>> {
    static ROUTERS: OnceLock<HashMap<&'static str, matchit::Router<&'static str>>> =
        OnceLock::new();
    ROUTERS.get_or_init(|| {
        let mut by_method: HashMap<&str, matchit::Router<&str>> = HashMap::new();
        for (method, pattern, _) in ROUTES {
            let router = by_method.entry(method).or_default();
            router
                .insert(*pattern, *pattern)
                .expect("the patterns do not clash");
        }
        by_method
    })
}

fn check_authority(target: &http::Uri, hosts: &[&[u8]]) {
    // The main listener and the metrics listener build the same check, each with its port;
    // the corpus names one port for whichever listener it is sent to.
    let check = HostCheck::new(PORT, [127, 0, 0, 1].into(), &["leo".into()]);
    let authority = target.authority().map(|a| a.as_str());
    match check.check(authority, hosts.iter().copied()) {
        Ok(()) => {
            assert!(hosts.len() <= 1);
            assert!(authority.is_some() || hosts.len() == 1);
            for a in authority.into_iter().chain(
                hosts
                    .iter()
                    .map(|h| std::str::from_utf8(h).expect("an admitted Host is text")),
            ) {
                assert!(check.allows(a), "{a:?} admitted");
                assert!(!a.contains('@'), "{a:?} has userinfo");
            }
        }
        Err(HostRefusal::Malformed) => assert!(hosts.len() > 1),
        Err(HostRefusal::Forbidden) => assert!(hosts.len() <= 1),
    }
}

fn check_route(route: Route, path: &str, body: &[u8]) {
    for kind in Kind::ALL {
        if route.allows(kind) && kind == Kind::ApiClient {
            assert_eq!(route, Route::Message);
        }
    }
    if route == Route::Message {
        let segment = message_segment(path).expect("the gate finds every routed target");
        if let Ok(name) = decode_target(segment) {
            assert!(leo_protocol::names::is_name(&name));
            assert!(!name.contains(['/', '%', '\0']));
        }
    }
    if body.len() > route.body_limit(MAX_BODY) {
        return;
    }
    use leo_protocol::{console, content, requests, tool};
    let _ = match route {
        Route::RegisterTools => parse_json::<tool::RegisterBody>(body).map(|_| ()),
        Route::Result => parse_json::<content::ResultBody>(body).map(|_| ()),
        Route::Claim => parse_json::<requests::ClaimBody>(body).map(|_| ()),
        Route::Cancel | Route::ConsoleCancel => parse_json::<console::CancelBody>(body).map(|_| ()),
        Route::AskHuman => parse_json::<console::AskHumanBody>(body).map(|_| ()),
        Route::ConsoleAnswer => parse_json::<console::AnswerBody>(body).map(|_| ()),
        Route::Message => parse_json::<serde_json::Value>(body).map(|_| ()),
        Route::CreateWebhook => {
            parse_json::<leo_protocol::webhooks::WebhookBody>(body).map(|_| ())
        }
        _ => Ok(()),
    };
}

fuzz_target!(|data: &[u8]| {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(head_len)) = req.parse(data) else {
        return;
    };
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return;
    };
    let Ok(target) = target.parse::<http::Uri>() else {
        return;
    };
    let hosts: Vec<&[u8]> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| h.value)
        .collect();
    check_authority(&target, &hosts);
    let path = target.path();
    let Some(matched) = routers().get(method).and_then(|r| r.at(path).ok()) else {
        return;
    };
    let route = Route::of(method, matched.value).expect("every pattern names a route");
    check_metrics_listener(route, method);
    if route == Route::Mcp {
        check_mcp(req.headers, &data[head_len..]);
    }
    check_route(route, path, &data[head_len..]);
});

/// `/mcp`: the table's rules for it, the `Leo-Agent` name, the body read as JSON.
fn check_mcp(headers: &[httparse::Header<'_>], body: &[u8]) {
    assert_eq!(Route::Mcp.callers(), &[Kind::Agent]);
    assert!(Route::Mcp.checks_itself() && Route::Mcp.tcp_only());
    assert!(!Route::Mcp.console() && !Route::Mcp.on_metrics_listener());
    for h in headers.iter().filter(|h| h.name.eq_ignore_ascii_case("leo-agent")) {
        if let Ok(text) = std::str::from_utf8(h.value)
            && let Ok(name) = leo_protocol::names::AgentName::parse(text)
        {
            assert!(leo_protocol::names::is_name(&name));
        }
    }
    if body.len() <= Route::Mcp.body_limit(MAX_BODY) {
        let _ = serde_json::from_slice::<serde_json::Value>(body);
    }
}

/// What the metrics listener serves of a routed request: `GET /metrics` and the probes only,
/// never a console route, a route with a body, or one that changes anything.
fn check_metrics_listener(route: Route, method: &str) {
    if !route.on_metrics_listener() {
        return;
    }
    assert_eq!(method, "GET");
    assert!(!route.console());
    assert_eq!(route.body_limit(MAX_BODY), 0);
    if route.probe() {
        assert!(route.allows(Kind::Anonymous) && !route.allows(Kind::ApiClient));
    } else {
        assert_eq!(route, Route::Metrics);
        assert_eq!(route.callers(), &[Kind::Operator]);
    }
}
