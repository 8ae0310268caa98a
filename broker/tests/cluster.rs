//! Several instances on one PostgreSQL database (`leo_testkit::postgres`, a database per
//! test), each with its own `LEO_HOME` and port: every instance serves, the first one started
//! leads and the others forward to it, so an agent, an app and its posts may each reach a
//! different instance and see one broker. When the leader is killed a follower takes the lease
//! and the calls over; when a follower is killed its clients reconnect elsewhere; and a
//! deposed leader cannot commit (the fence).

use std::time::Duration;

use leo_testkit::cluster::{leader, role_of};
use leo_testkit::postgres::{Database, database};
use leo_testkit::{Broker, Http, Ipc, Reply};
use serde_json::{Value, json};

use crate::support::{App, eventually, message, outcome_code, result_of, tool, tool_with_timeout};

fn text(t: &str) -> Value {
    json!([{"type": "text", "text": t}])
}

/// `n` instances on `db`: the first leads (the others start once it does), the others follow.
async fn cluster(db: &Database, n: usize) -> Vec<Broker> {
    leo_testkit::cluster::start(&db.config(), n).await
}

/// An agent session on `broker`'s `run/sidecar.sock`, re-attaching the calls `resume`; `None`
/// while the socket closes it (no leader reachable yet).
pub(crate) async fn hello(broker: &Broker, agent: &str, resume: &[u64]) -> Option<Ipc> {
    let path = leo_protocol::home::Home::new(broker.home()).sidecar_socket();
    let stream = tokio::net::UnixStream::connect(&path).await.ok()?;
    drop(stream);
    let mut ipc = Ipc::connect(&path).await;
    ipc.try_send(&json!({
        "type": "hello", "v": 1, "agent": agent, "session": format!("{agent}-s1"),
        "token": broker.agent_token(), "mode": "native", "resume": resume,
        "harness": {"name": "test-harness", "version": "1"}
    }))
    .await
    .ok()?;
    match ipc.within(Duration::from_secs(5)).await {
        Some(f) if f["type"] == "welcome" => Some(ipc),
        _ => None,
    }
}

/// [`hello`], retried until the instance's leader welcomes the session.
pub(crate) async fn agent_on(broker: &Broker, agent: &str, resume: &[u64]) -> Ipc {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(ipc) = hello(broker, agent, resume).await {
            return ipc;
        }
        assert!(tokio::time::Instant::now() < deadline, "no session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The id an instance goes by in the cluster (from its `state/instance-id`).
fn id_of(broker: &Broker) -> String {
    leo_testkit::cluster::instance_id(broker.home())
}

/// `http` with `token`, which every instance of the cluster shares.
fn http_of(broker: &Broker) -> Http {
    broker.http()
}

/// Whether `http`'s instance answers its status (a connection closed while a follower takes
/// the lead is a no, not a failure).
async fn status_ok(http: &Http) -> bool {
    http.try_status("/api/v1/status").await == Some(200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_crosses_three_instances_and_is_answered_once() {
    let Some(db) = database().await else { return };
    let nodes = cluster(&db, 3).await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    // The app's stream is on B (a follower: the SSE stream is forwarded as it flows).
    let mut app = App::connect(&http_of(b)).await;
    app.register_ok("g", json!([tool("echo")])).await;
    // The agent is on C's socket (piped to the leader, which checks its hello).
    let mut ipc = agent_on(c, "rocket", &[]).await;
    ipc.call(1, "echo", json!({"n": 1})).await;
    let id = app.next_request_id().await;
    // Claimed through B, answered through A (the leader) and C.
    app.claim_ok(&id).await;
    app.http = http_of(c);
    assert_eq!(app.answer(&id, text("from C")).await.status, 200);
    let outcome = result_of(&mut ipc, 1).await;
    assert_eq!(outcome["content"][0]["text"], "from C", "{outcome}");
    app.http = http_of(a);
    let again = app.answer(&id, text("again")).await;
    assert_eq!(again.code(409), "already_settled", "{again:?}");
    assert!(ipc.within(Duration::from_millis(500)).await.is_none());
    // Every instance shows the one broker: the instances, and where each client is.
    let status = c.http().get("/api/v1/status").await.data().clone();
    assert_eq!(status["apps"][0]["via"], id_of(b), "{status}");
    assert_eq!(status["agents"][0]["via"], id_of(c), "{status}");
    // The database says who serves what, through which instance.
    let pg = db.client().await;
    let registered = json!([app.id, "g", "[\"echo\"]", id_of(b)]);
    eventually(|| async {
        let rows = pg
            .query(
                "SELECT client_id, grp, tools, via FROM registrations WHERE grp = 'g'",
                &[],
            )
            .await
            .unwrap();
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                json!([
                    r.get::<_, String>(0),
                    r.get::<_, String>(1),
                    r.get::<_, String>(2),
                    r.get::<_, Option<String>>(3)
                ])
            })
            .collect();
        rows == [registered.clone()]
    })
    .await;
    eventually(|| async {
        let status = b.http().get("/api/v1/status").await.data().clone();
        let roles: Vec<(String, String)> = status["instances"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|i| {
                        (
                            i["id"].as_str().unwrap().into(),
                            i["role"].as_str().unwrap().into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        roles
            == [
                (id_of(a), "leader".into()),
                (id_of(b), "follower".into()),
                (id_of(c), "follower".into()),
            ]
    })
    .await;
    // `leo status` on a follower's home shows the same, through its socket.
    let shown = leo_status(b.home());
    assert!(shown.contains("Instances"), "{shown}");
    assert!(
        shown.contains(&id_of(a)) && shown.contains("leader"),
        "{shown}"
    );
    // Each instance answers its own /metrics, labelled with its id and role.
    let page = b.http().get("/metrics").await;
    assert_eq!(page.status, 200);
    let text = page.body.as_str().unwrap_or_default();
    assert!(text.contains("role=\"follower\""), "{text}");
    assert!(!text.contains("leo_cluster_lease_age_seconds"), "{text}");
    let page = a.http().get("/metrics").await;
    let text = page.body.as_str().unwrap_or_default();
    assert!(text.contains("role=\"leader\""), "{text}");
    // The leader's page says when it took the lease and how fresh the lease is.
    let gauge = |name: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(name));
        let value = line.and_then(|l| l.rsplit(' ').next()?.parse().ok());
        value.unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let now = now.map_or(0.0, |d| d.as_secs_f64());
    let taken = gauge("leo_cluster_last_takeover_timestamp_seconds");
    assert!(
        taken > now - 600.0 && taken <= now + 1.0,
        "{taken} vs {now}"
    );
    let age = gauge("leo_cluster_lease_age_seconds");
    assert!((0.0..15.0).contains(&age), "{age}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_clusters_key_speaks_for_a_follower() {
    let Some(db) = database().await else { return };
    let nodes = cluster(&db, 2).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    // On the leader: Leo-Via without the key, or a wrong key, is refused before anything.
    let via = a.http().with_header("leo-via", "i_forged");
    assert_eq!(via.get("/api/v1/status").await.status, 401);
    let wrong = a.http().with_header("leo-cluster-key", "guess");
    assert_eq!(wrong.get("/api/v1/status").await.status, 401);
    // Nor does the key skip the Host check for a client without it.
    let foreign = a.http().with_host("evil.example");
    assert_eq!(foreign.get("/api/v1/status").await.status, 403);
    // Through a follower: the client's own cluster headers are dropped, its Host checked
    // locally, and the request forwarded as any other.
    let forged = b
        .http()
        .with_header("leo-via", "i_forged")
        .with_header("leo-cluster-key", "guess");
    assert_eq!(forged.get("/api/v1/status").await.status, 200);
    let foreign = b.http().with_host("evil.example");
    assert_eq!(foreign.get("/api/v1/status").await.status, 403);
    // `leo-mcp --url` pointed at a follower: the upgrade is forwarded, the leader checks it.
    let token = b.agent_token();
    let auth = format!("Bearer {token}");
    let mut remote = Ipc::upgrade(b.addr, &[("authorization", &auth), ("leo-agent", "remote")])
        .await
        .unwrap_or_else(|r| panic!("{}", r.body));
    assert_eq!(remote.say_hello(&token, "remote").await["type"], "welcome");
    // A wrong token on a follower's socket is refused by the leader's own hello check.
    let path = leo_protocol::home::Home::new(b.home()).sidecar_socket();
    let mut bad = Ipc::connect(&path).await;
    let refused = bad.say_hello("not-a-token", "rocket").await;
    assert_eq!(refused["type"], "error", "{refused}");
    // /mcp's Origin rule is the follower's to apply.
    let origin = b.http().with_header("origin", "http://evil.example");
    let r = origin.post("/mcp", &json!({})).await;
    assert_eq!(r.status, 403, "{r:?}");
    probes_on_a_leader_and_a_follower(a, b).await;
    bodies_over_the_limit_are_413_through_a_follower(b).await;
    upgrades_are_checked_by_the_follower(a, b).await;
    the_key_rotates_without_a_stop(&db, a, b).await;
}

/// The probes, without a token: each instance says its role and the leader (the follower
/// answers them itself, behind its own Host check, rather than forward them).
async fn probes_on_a_leader_and_a_follower(a: &Broker, b: &Broker) {
    let id = leo_testkit::cluster::instance_id(a.home());
    let url = format!("http://{}", a.addr);
    let leader = crate::support::readiness(&a.http(), 200).await;
    let names = json!({"instance": id, "url": url});
    assert_eq!(
        leader,
        json!({"status": "ready", "role": "leader", "instance": id, "leader": names})
    );
    let follower = crate::support::readiness(&b.http(), 200).await;
    let me = leo_testkit::cluster::instance_id(b.home());
    assert_eq!(
        follower,
        json!({"status": "ready", "role": "follower", "instance": me, "leader": names})
    );
    crate::support::readiness(&b.http_unix(), 200).await;
    let foreign = b.http().with_token(None).with_host("evil.example");
    assert_eq!(foreign.get("/readyz").await.status, 403);
}

/// `leo cluster rotate-key`: the leader takes the new key up and the follower forwards with
/// it, without a stop; the old key is accepted during the grace and refused after it.
async fn the_key_rotates_without_a_stop(db: &Database, a: &Broker, b: &Broker) {
    let key = || async {
        let row = db.client().await;
        let row = row.query_one("SELECT key FROM cluster", &[]).await.unwrap();
        row.get::<_, String>(0)
    };
    let old = key().await;
    let out = std::process::Command::new(leo_testkit::bin("leo"))
        .args(["cluster", "rotate-key", "--grace-s", "6"])
        .env("LEO_HOME", b.home())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("the old key is refused after 6 s"), "{said}");
    let new = key().await;
    assert_ne!(old, new);
    let with = |k: &str| a.http().with_header("leo-cluster-key", k);
    eventually(|| async { with(&new).get("/api/v1/status").await.status == 200 }).await;
    assert_eq!(with(&old).get("/api/v1/status").await.status, 200);
    eventually(|| async { with(&old).get("/api/v1/status").await.status == 401 }).await;
    // The follower forwards with the new key: requests and sidecars pass after the grace.
    assert_eq!(b.http().get("/api/v1/status").await.status, 200);
    assert!(hello(b, "after-rotation", &[]).await.is_some());
}

/// A body larger than its route takes, sent whole through a follower, with its length or in
/// chunks: the follower answers `413` (or the client's write fails, as it is not read to its
/// end), never `503` as if the leader were gone.
async fn bodies_over_the_limit_are_413_through_a_follower(b: &Broker) {
    let mut seen = vec![];
    for chunked in [false, true, false, true, false, true, false, true] {
        seen.push(oversized(b.addr, &b.operator_token(), chunked).await);
    }
    assert!(seen.iter().flatten().all(|s| *s == 413), "{seen:?}");
    assert!(seen.contains(&Some(413)), "{seen:?}");
    // The follower still forwards.
    assert_eq!(b.http().get("/api/v1/status").await.status, 200);
}

/// POSTs 256 KiB to a claim (which takes 16 KiB) at `addr`; the status answered, if one was.
async fn oversized(addr: std::net::SocketAddr, token: &str, chunked: bool) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {}", 256 * 1024)
    };
    let head = format!(
        "POST /api/v1/client-tools/requests/r_big/claim HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    );
    let writing = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 16 * 1024];
        for _ in 0..16 {
            if chunked {
                write.write_all(b"4000\r\n").await?;
                write.write_all(&chunk).await?;
                write.write_all(b"\r\n").await?;
            } else {
                write.write_all(&chunk).await?;
            }
        }
        if chunked {
            write.write_all(b"0\r\n\r\n").await?;
        }
        Ok::<_, std::io::Error>(write)
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let read_head = async {
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read_head)
        .await
        .expect("an answer or a close");
    let _ = writing.await;
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|c| c.parse().ok())
}

/// Plain http between instances needs the operator's leave, and then on loopback only: a
/// follower without it sends nothing to a leader whose URL is `http://` (no token, no cluster
/// key) and answers `503`, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sends_no_secret_to_a_plain_http_leader() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&leo_testkit::postgres::store_config(&db.url)).await;
    // Told at start: no other instance will forward to it.
    eventually(|| async { a.stderr().contains("plain_http_on_loopback") }).await;
    let home = tempfile::tempdir().unwrap();
    leo_testkit::cluster::copy_home(a.home(), home.path());
    let b = Broker::start_in(home).await;
    eventually(|| async { b.stderr().contains("cannot forward to the leader") }).await;
    assert!(b.stderr().contains("is plain http"), "{}", b.stderr());
    let refused = b.http().get("/api/v1/status").await;
    assert_eq!(refused.code(503), "store_unavailable", "{refused:?}");
    assert!(!b.stderr().contains("forwarding to it"), "{}", b.stderr());
    // Its `/readyz` says so, naming the leader it will not forward to.
    let not = crate::support::readiness(&b.http(), 503).await;
    let leader = leo_testkit::cluster::instance_id(a.home());
    assert_eq!(not["leader"]["instance"], leader.as_str(), "{not}");
    assert!(
        not["reason"]
            .as_str()
            .unwrap()
            .contains("cannot be forwarded"),
        "{not}"
    );
}

/// An IPC upgrade through a follower is checked there, as the leader checks it, before it is
/// forwarded: a flood without a token is refused `401` and takes none of the leader's
/// sessions, so local agents on either instance's socket are still admitted.
async fn upgrades_are_checked_by_the_follower(a: &Broker, b: &Broker) {
    use futures_util::StreamExt;
    let statuses: Vec<Option<u16>> = futures_util::stream::iter(0..1040)
        .map(|_| async { Ipc::upgrade(b.addr, &[]).await.err().map(|r| r.status) })
        .buffer_unordered(64)
        .collect()
        .await;
    let upgraded = statuses.iter().filter(|s| s.is_none()).count();
    assert_eq!(
        upgraded, 0,
        "tokenless upgrades switched through the follower"
    );
    assert!(statuses.iter().all(|s| *s == Some(401)), "{statuses:?}");
    let refused = |token: String, agent: &'static str| async move {
        let auth = format!("Bearer {token}");
        match Ipc::upgrade(b.addr, &[("authorization", &auth), ("leo-agent", agent)]).await {
            Ok(_) => panic!("upgraded with {token}"),
            Err(r) => r.status,
        }
    };
    assert_eq!(refused("0".repeat(64), "remote").await, 401);
    assert_eq!(refused(b.operator_token(), "remote").await, 403);
    // Nor may a client pass itself off as the follower's own pipe.
    let forged = Ipc::upgrade(b.addr, &[("leo-sidecar-pipe", "1")]).await;
    assert_eq!(forged.err().map(|r| r.status), Some(401));
    let forged = Ipc::upgrade(
        a.addr,
        &[("leo-sidecar-pipe", "1"), ("leo-cluster-key", "guess")],
    )
    .await;
    assert_eq!(forged.err().map(|r| r.status), Some(401));
    for (broker, agent) in [(a, "local-a"), (b, "local-b")] {
        assert!(hello(broker, agent, &[]).await.is_some(), "{agent} refused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_race_through_two_instances_has_one_winner() {
    let Some(db) = database().await else { return };
    let nodes = cluster(&db, 3).await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut one = App::connect(&http_of(b)).await;
    let two = App::connect(&http_of(c)).await;
    one.register_ok("g", json!([tool("echo")])).await;
    two.register_ok("g", json!([tool("echo")])).await;
    for n in 1..=5u64 {
        // An agent per round, each race a fresh one (the loser reads `owned_by_other` or
        // `already_claimed`, both lost races by the one table).
        let mut ipc = agent_on(a, &format!("rocket{n}"), &[]).await;
        ipc.call(n, "echo", json!({"n": n})).await;
        let id = one.next_request_id().await;
        let (r1, r2) = tokio::join!(one.claim(&id), two.claim(&id));
        let won: Vec<&Reply> = [&r1, &r2].into_iter().filter(|r| r.status == 200).collect();
        assert_eq!(won.len(), 1, "{r1:?} {r2:?}");
        let lost = if r1.status == 200 { &r2 } else { &r1 };
        let code = lost.code(409);
        assert!(
            leo_protocol::ErrorCode::LOST_RACE
                .iter()
                .any(|c| c.as_str() == code),
            "{lost:?}"
        );
        let winner = if r1.status == 200 { &one } else { &two };
        assert_eq!(winner.answer(&id, text("won")).await.status, 200);
        assert_eq!(result_of(&mut ipc, n).await["content"][0]["text"], "won");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_messages_and_timeouts_cross_instances() {
    let Some(db) = database().await else { return };
    let nodes = cluster(&db, 3).await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut ipc = agent_on(c, "rocket", &[]).await;
    // An app registering on B changes the tools of the agent on C.
    let app = App::connect(&http_of(b)).await;
    app.register_ok("g", json!([tool_with_timeout("slow", 1)]))
        .await;
    let tools = ipc.recv_of("tools").await;
    assert!(tools.to_string().contains("slow"), "{tools}");
    // A message posted on A reaches the agent on C.
    let posted = message(a, "rocket", "hi from A").await;
    assert_eq!(posted.status, 200, "{posted:?}");
    let got = ipc.fetch_messages(7).await;
    assert!(got.to_string().contains("hi from A"), "{got}");
    // A call no app claims times out once, decided by the leader.
    ipc.call(2, "slow", json!({})).await;
    let outcome = result_of(&mut ipc, 2).await;
    assert_eq!(outcome_code(&outcome), "timeout", "{outcome}");
    assert!(ipc.within(Duration::from_millis(1500)).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_from_a_killed_leader_and_every_call_ends_once() {
    let Some(db) = database().await else { return };
    let mut nodes = leo_testkit::cluster::start(&db.config_with_short_lease(), 3).await;
    let a = nodes.remove(0);
    let (b, c) = (&nodes[0], &nodes[1]);
    let mut app = App::connect(&http_of(b)).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent_on(c, "rocket", &[]).await;
    ipc.call(1, "wait", json!({"n": 1})).await;
    let parked = app.next_request_id().await;
    ipc.call(2, "wait", json!({"n": 2})).await;
    let claimed = app.next_request_id().await;
    app.claim_ok(&claimed).await;

    let pg = db.client().await;
    let epoch = || async {
        let row = pg
            .query_one("SELECT epoch FROM cluster", &[])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let before = epoch().await;
    let _home_a = a.kill_keep_home().await;
    // The session piped through C ends with its leader; it comes back once a follower leads.
    assert!(ipc.recv_or_end().await.is_none());
    eventually(|| async { status_ok(&b.http()).await && status_ok(&c.http()).await }).await;
    let mut ipc = agent_on(c, "rocket", &[1, 2]).await;
    // The takeover is one take of the lease, by one of the two followers.
    assert_eq!(epoch().await, before + 1, "one take of the lease");
    let took = [b, c]
        .iter()
        .filter(|n| n.stderr().contains("took the database's lease"))
        .count();
    assert_eq!(took, 1, "one follower took the lead");
    // The app resumes on C with its key and keeps its claim; the parked call is claimed
    // through B.
    let mut app = App::resume(&http_of(c), &app.resume).await;
    app.register_ok("g", json!([tool("wait")])).await;
    assert_eq!(app.answer(&claimed, text("claimed")).await.status, 200);
    app.http = http_of(b);
    app.serve(&parked, text("parked")).await;
    let mut ended = std::collections::HashMap::new();
    while ended.len() < 2 {
        let f = ipc.recv_of("result").await;
        let n = f["id"].as_u64().unwrap();
        assert!(ended.insert(n, f["outcome"].clone()).is_none(), "{n} twice");
    }
    assert_eq!(ended[&1]["content"][0]["text"], "parked");
    assert_eq!(ended[&2]["content"][0]["text"], "claimed");
    for id in [&claimed, &parked] {
        assert_eq!(
            app.answer(id, text("again")).await.code(409),
            "already_settled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_of_a_killed_follower_resumes_elsewhere_with_its_claim() {
    let Some(db) = database().await else { return };
    let mut nodes = cluster(&db, 3).await;
    let b = nodes.remove(1);
    let (a, c) = (&nodes[0], &nodes[1]);
    let mut app = App::connect(&http_of(&b)).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent_on(a, "rocket", &[]).await;
    ipc.call(1, "wait", json!({})).await;
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;
    let _home_b = b.kill_keep_home().await;
    let app = App::resume(&http_of(c), &app.resume).await;
    assert_eq!(app.answer(&id, text("after B")).await.status, 200);
    assert_eq!(
        result_of(&mut ipc, 1).await["content"][0]["text"],
        "after B"
    );
}

/// Another instance takes the database's lease, as one would once the leader's lapsed: the
/// leader's next batch fails its fence.
async fn lease_taken(pg: &tokio_postgres::Client) {
    pg.execute(
        "UPDATE cluster SET leader = 'i_other', epoch = epoch + 1",
        &[],
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_cannot_commit() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&db.config()).await;
    let _ipc = agent_on(&a, "rocket", &[]).await;
    let pg = db.client().await;
    let posted = message(&a, "rocket", "kept").await;
    assert_eq!(posted.status, 200, "{posted:?}");
    // What A decides from now on is neither written nor acknowledged.
    lease_taken(&pg).await;
    // Refused (`500`), or the connection closed by the stop that follows: never a 200.
    let body = json!({"text": "fenced", "from": "ops"}).to_string();
    let refused = a
        .http()
        .try_post_raw("/web/agent/rocket/message", body)
        .await;
    assert!(matches!(refused, Ok(500) | Err(_)), "{refused:?}");
    let texts: Vec<String> = pg
        .query("SELECT text FROM mail", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(texts.iter().any(|t| t.ends_with("kept")), "{texts:?}");
    assert!(!texts.iter().any(|t| t.ends_with("fenced")), "{texts:?}");
    // It then gives its core up as if killed, so that its clients go to the instances that
    // serve, and joins again in the same process (here, as no other instance is alive, by
    // taking the lease back).
    eventually(|| async { a.stderr().contains("gives its core up") }).await;
    eventually(|| async { leader(&a.http()).await == Some(id_of(&a)) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_result_frames_never_reach_its_sidecar() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&db.config()).await;
    let mut app = App::connect(&a.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent_on(&a, "rocket", &[]).await;
    ipc.call(1, "wait", json!({"n": 1})).await;
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;
    // The result that follows fails A's fence: it is the new leader's to give (the app
    // posts it again there), and the sidecar, which resumes there, must not hear it from A.
    let pg = db.client().await;
    lease_taken(&pg).await;
    let body = json!({"client_id": app.id, "ok": true, "content": text("deposed")}).to_string();
    let posted = a
        .http()
        .try_post_raw(&format!("/api/v1/client-tools/requests/{id}/result"), body)
        .await;
    assert!(matches!(posted, Ok(500 | 503) | Err(_)), "{posted:?}");
    // The session closes (so that the sidecar resumes where the new leader serves) without a
    // result frame for the call.
    let mut frames = Vec::new();
    let closed = tokio::time::timeout(leo_testkit::WAIT, async {
        while let Some(frame) = ipc.recv_or_end().await {
            frames.push(frame);
        }
    })
    .await;
    assert!(closed.is_ok(), "the deposed leader's session stayed open");
    assert!(
        !frames.iter().any(|f| f["type"] == "result"),
        "a deposed leader sent a result frame: {frames:?}"
    );
    logged(&a, "gives its core up").await;
}

/// Waits (up to 40 s: a lease lasts 15) until `broker` has logged `line`.
async fn logged(broker: &Broker, line: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while !broker.stderr().contains(line) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {line:?} in:\n{}",
            broker.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What `leo status` shows on `home` (through its instance's socket).
fn leo_status(home: &std::path::Path) -> String {
    let out = std::process::Command::new(leo_testkit::bin("leo"))
        .arg("status")
        .env("LEO_HOME", home)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_follows_the_new_one_without_a_restart() {
    let Some(db) = database().await else { return };
    let mut nodes = leo_testkit::cluster::start(&db.config_with_short_lease(), 2).await;
    let mut a = nodes.remove(0);
    let b = &nodes[0];
    let mut app = App::connect(&http_of(b)).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent_on(&a, "rocket", &[]).await;
    ipc.call(1, "wait", json!({"n": 1})).await;
    let claimed = app.next_request_id().await;
    app.claim_ok(&claimed).await;

    // A is frozen past its lease (as a leader cut off from the database would be): B takes
    // the lead. Then A runs again, still believing it leads.
    a.send_signal("STOP");
    logged(b, "this instance leads").await;
    a.send_signal("CONT");
    // The database tells A it was deposed: it gives its core up, which closes the session it
    // served, and follows B in the same process, on the same sockets.
    let closed = tokio::time::timeout(leo_testkit::WAIT, async {
        while ipc.recv_or_end().await.is_some() {}
    })
    .await;
    assert!(closed.is_ok(), "the deposed leader's session stayed open");
    logged(&a, "gives its core up").await;
    logged(&a, "forwarding to it").await;
    assert!(a.is_running(), "{}", a.stderr());
    eventually(|| async {
        let http = a.http();
        role_of(&http, &id_of(&a)).await.as_deref() == Some("follower")
            && role_of(&http, &id_of(b)).await.as_deref() == Some("leader")
    })
    .await;
    let shown = leo_status(a.home());
    let line = shown.lines().find(|l| l.contains(&id_of(&a)));
    assert!(line.is_some_and(|l| l.contains("follower")), "{shown}");

    // The agent resumes on A's socket, the app on B (whose front closed its stream when it
    // took the lead) with its claim: the call made before is answered through B, and so is a
    // new one made on A.
    let mut ipc = agent_on(&a, "rocket", &[1]).await;
    let mut app = App::resume(&http_of(b), &app.resume).await;
    app.register_ok("g", json!([tool("wait")])).await;
    assert_eq!(app.answer(&claimed, text("claimed")).await.status, 200);
    assert_eq!(
        result_of(&mut ipc, 1).await["content"][0]["text"],
        "claimed"
    );
    ipc.call(2, "wait", json!({"n": 2})).await;
    let id = app.next_request_id().await;
    app.serve(&id, text("from B")).await;
    assert_eq!(result_of(&mut ipc, 2).await["content"][0]["text"], "from B");
    assert!(a.is_running());
    // The deposed leader's history did not record an ending its store could not commit: the
    // call claimed before is in the cluster's history once, answered, by B.
    let pg = db.client().await;
    let rows = || async {
        pg.query(
            "SELECT outcome, instance FROM history WHERE id = $1",
            &[&claimed],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect::<Vec<_>>()
    };
    eventually(|| async { !rows().await.is_empty() }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rows().await, [("result".to_owned(), id_of(b))]);
}

/// A leader frozen past its lease (`SIGSTOP`: a host that went silent, a long pause) is taken
/// over by a follower once the lease lapses, and when it wakes it commits nothing: a result and
/// a message posted to it while it was frozen (they wait in its sockets) are never
/// acknowledged, its agent never hears that result, and the shared tables hold nothing of
/// them; the call is answered by the new leader, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_commits_nothing_when_it_wakes() {
    let Some(db) = database().await else { return };
    let mut nodes = leo_testkit::cluster::start(&db.config_with_short_lease(), 2).await;
    let a = nodes.remove(0);
    let b = &nodes[0];
    let mut app = App::connect(&a.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent_on(&a, "rocket", &[]).await;
    ipc.call(1, "wait", json!({"n": 1})).await;
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;
    let pg = db.client().await;
    let epoch = || async {
        let row = pg.query_one("SELECT epoch, leader FROM cluster", &[]).await;
        let row = row.unwrap();
        (row.get::<_, i64>(0), row.get::<_, String>(1))
    };
    let (before, _) = epoch().await;

    a.send_signal("STOP");
    let post = |path: String, body: Value| {
        let http = a.http();
        tokio::spawn(async move { http.try_post_raw(&path, body.to_string()).await })
    };
    let result = post(
        format!("/api/v1/client-tools/requests/{id}/result"),
        json!({"client_id": app.id, "ok": true, "content": text("frozen")}),
    );
    let message = post(
        "/web/agent/rocket/message".into(),
        json!({"text": "frozen", "from": "ops"}),
    );
    logged(b, "this instance leads").await;
    assert_eq!(epoch().await, (before + 1, id_of(b)), "one take, by B");
    a.send_signal("CONT");

    // Woken, A decides what waited for it, but its fence refuses every commit.
    for (what, posted) in [("result", result), ("message", message)] {
        let posted = posted.await.unwrap();
        assert!(!matches!(posted, Ok(200)), "{what}: {posted:?}");
    }
    let mut frames = Vec::new();
    let closed = tokio::time::timeout(leo_testkit::WAIT, async {
        while let Some(frame) = ipc.recv_or_end().await {
            frames.push(frame);
        }
    })
    .await;
    assert!(closed.is_ok(), "the frozen leader's session stayed open");
    assert!(
        !frames.iter().any(|f| f["type"] == "result"),
        "the frozen leader sent a result: {frames:?}"
    );
    logged(&a, "gives its core up").await;
    let claimed: Vec<Option<String>> = pg
        .query("SELECT claimed_by FROM live WHERE id = $1", &[&id])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        claimed,
        [Some(app.id.clone())],
        "the call is live, as claimed"
    );
    for sql in [
        "SELECT count(*) FROM ended WHERE id = $1",
        "SELECT count(*) FROM history WHERE id = $1",
    ] {
        let n: i64 = pg.query_one(sql, &[&id]).await.unwrap().get(0);
        assert_eq!(n, 0, "{sql}");
    }
    let frozen: i64 = pg
        .query_one("SELECT count(*) FROM mail WHERE text LIKE '%frozen'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        frozen, 0,
        "a message the frozen leader took is in the database"
    );

    // The call is B's to answer: the agent resumes on A (a follower now), the app on B.
    let mut ipc = agent_on(&a, "rocket", &[1]).await;
    let app = App::resume(&http_of(b), &app.resume).await;
    app.register_ok("g", json!([tool("wait")])).await;
    assert_eq!(app.answer(&id, text("from B")).await.status, 200);
    assert_eq!(result_of(&mut ipc, 1).await["content"][0]["text"], "from B");
    no_more_results(&mut ipc).await;
}

/// Asserts that `ipc` gets no further result frame (a tool set or message frame may come).
pub(crate) async fn no_more_results(ipc: &mut Ipc) {
    while let Some(frame) = ipc.within(Duration::from_millis(300)).await {
        assert_ne!(frame["type"], "result", "a result came twice: {frame}");
    }
}

#[tokio::test]
async fn a_broker_on_postgres_needs_its_tcp_listener() {
    let Some(db) = database().await else { return };
    let home = tempfile::tempdir().unwrap();
    let config = format!("{}web:\n  enabled: false\n", db.config());
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("start must fail");
    assert!(err.contains("set web.enabled: true"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_checks_the_certificate_of_an_https_leader() {
    use leo_testkit::tls::{TLS_CONFIG, tls_init};
    let Some(db) = database().await else { return };
    let home_a = tempfile::tempdir().unwrap();
    tls_init(home_a.path(), &[]);
    // Over https a follower needs no leave for plain http.
    let store = leo_testkit::postgres::store_config(&db.url);
    let config = format!("{TLS_CONFIG}{store}");
    std::fs::write(home_a.path().join("config.yaml"), &config).unwrap();
    let a = Broker::start_in(home_a).await;
    // Followers with the leader's tokens and certificate; only B trusts its CA.
    let follower = |trust: bool| {
        let home = tempfile::tempdir().unwrap();
        leo_testkit::cluster::copy_home(a.home(), home.path());
        std::fs::create_dir_all(home.path().join("tls")).unwrap();
        for entry in std::fs::read_dir(a.home().join("tls")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(
                entry.path(),
                home.path().join("tls").join(entry.file_name()),
            )
            .unwrap();
        }
        let ca = if trust {
            "cluster:\n  ca_file: tls/ca.pem\n"
        } else {
            ""
        };
        std::fs::write(home.path().join("config.yaml"), format!("{config}{ca}")).unwrap();
        Broker::start_in(home)
    };
    let b = follower(true).await;
    let c = follower(false).await;
    for f in [&b, &c] {
        eventually(|| async { f.stderr().contains("forwarding to it") }).await;
    }
    assert_eq!(b.http_unix().get("/api/v1/status").await.status, 200);
    let refused = c.http_unix().get("/api/v1/status").await;
    assert_eq!(refused.code(503), "store_unavailable", "{refused:?}");
    assert!(c.stderr().contains("not signed by a CA"), "{}", c.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_leo_mcp_on_a_follower_sees_the_tools_of_an_app_on_another() {
    use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools, wait_until};
    let Some(db) = database().await else { return };
    let nodes = cluster(&db, 3).await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let agent = Agent::start(c.home(), AgentOpts::native("claude")).await;
    assert!(agent.tool_names_without_messages().await.is_empty());
    let before = agent.list_changed();
    let mut app = App::connect(&http_of(b)).await;
    app.register_ok("g", json!([tool("echo")])).await;
    wait_until("tools/list_changed", || agent.list_changed() > before).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "echo")).await;
    let call = agent.spawn_call("echo", json!({"n": 1}));
    let id = app.next_request_id().await;
    app.http = http_of(a);
    app.serve(&id, text("through three instances")).await;
    let result = call.await.unwrap();
    assert_eq!(text_of(&result), "through three instances");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_the_clusters_and_outlive_their_leader() {
    let Some(db) = database().await else { return };
    let mut nodes = cluster(&db, 2).await;
    let a = nodes.remove(0);
    let b = &nodes[0];
    // Created through the follower, kept by the leader in the database.
    let created = b
        .http()
        .post(
            "/api/v1/client-tools/webhooks",
            &json!({"name": "ci", "url": "http://127.0.0.1:9/hook", "group": "ci",
                    "tools": [tool("deploy")]}),
        )
        .await;
    assert_eq!(created.status, 200, "{created:?}");
    let client_id = created.data()["client_id"].clone();
    assert!(!a.home().join("state/webhooks.json").exists());

    // The leader is killed: the follower takes the lead and serves the same webhook.
    let _home_a = a.kill_keep_home().await;
    eventually(|| async { status_ok(&b.http()).await }).await;
    let listed = b.http().get("/api/v1/client-tools/webhooks").await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let hooks = listed.data()["webhooks"].as_array().unwrap().clone();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["name"], "ci");
    assert_eq!(hooks[0]["client_id"], client_id);
    eventually(|| async {
        let status = b.http().get("/api/v1/status").await;
        status.status == 200 && status.data().to_string().contains("deploy")
    })
    .await;

    // Removed on the new leader, it is gone from the database too.
    let gone = b
        .http()
        .send(
            "DELETE",
            "/api/v1/client-tools/webhooks/ci",
            Default::default(),
            &[],
        )
        .await;
    assert_eq!(gone.status, 200, "{gone:?}");
    let rows: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM webhooks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
}

/// The history of `http`'s cluster for `ids`: each id's outcomes, as often as listed.
async fn ended_as(http: &Http, ids: &[&str]) -> Vec<Vec<String>> {
    let rows = http
        .get("/api/v1/client-tools/requests?state=ended&limit=500")
        .await
        .data()["calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ids.iter()
        .map(|id| {
            rows.iter()
                .filter(|r| r["id"] == *id)
                .map(|r| r["outcome"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_of_an_agent_on_a_killed_follower_are_answered_once_it_is_back() {
    use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
    let Some(db) = database().await else { return };
    let mut nodes = cluster(&db, 2).await;
    let follower = nodes.remove(1);
    let leader = &nodes[0];
    let mut app = App::connect(&http_of(leader)).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let agent = Agent::start(follower.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    let parked = agent.spawn_call("wait", json!({"n": 1}));
    let parked_id = app.next_request_id().await;
    let claimed = agent.spawn_call("wait", json!({"n": 2}));
    let claimed_id = app.claim_next().await;
    let early = agent.spawn_call("wait", json!({"n": 3}));
    let early_id = app.claim_next().await;

    let home = follower.kill_keep_home().await;
    // The leader lost the session, not the agent: it ends none of its calls, and takes the
    // answer of one while the follower is down, for the agent's return.
    eventually(|| async {
        let status = leader.http().get("/api/v1/status").await;
        status.data()["agents"] == json!([])
    })
    .await;
    assert_eq!(app.answer(&early_id, text("while down")).await.status, 200);
    let _follower = Broker::start_in(home).await;
    // `leo-mcp` reconnects to the restarted follower on its own and resumes its calls.
    eventually(|| async {
        let status = leader.http().get("/api/v1/status").await;
        status.data()["agents"]
            .as_array()
            .is_some_and(|a| a.len() == 1)
    })
    .await;
    assert_eq!(app.answer(&claimed_id, text("claimed")).await.status, 200);
    app.serve(&parked_id, text("parked")).await;
    for (call, want) in [
        (parked, "parked"),
        (claimed, "claimed"),
        (early, "while down"),
    ] {
        let result = call.await.unwrap();
        assert_eq!(text_of(&result), want, "{}", agent.stderr());
    }
    let ids = [parked_id.as_str(), claimed_id.as_str(), early_id.as_str()];
    eventually(|| async {
        ended_as(&leader.http(), &ids).await == vec![vec!["result".to_owned()]; 3]
    })
    .await;
    while let Some(e) = app.sse.within(Duration::from_millis(300)).await {
        assert_ne!(e.event, "client_tool.cancelled", "{:?}", e.data);
    }
}

/// A result frame that died in a follower, killed with the leader right after: a piped
/// session's outcomes stay in the store until their frames are old (`ipc::session::Recent`),
/// so the restarted leader sends it again to the `leo-mcp` that comes back for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_lost_in_a_killed_follower_reaches_its_agent_after_the_leader_is_killed_too() {
    use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
    let Some(db) = database().await else { return };
    let mut nodes = cluster(&db, 2).await;
    let follower = nodes.remove(1);
    let leader = nodes.remove(0);
    let mut app = App::connect(&http_of(&leader)).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let agent = Agent::start(follower.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    let call = agent.spawn_call("wait", json!({"n": 1}));
    let id = app.claim_next().await;
    // The follower stops: the result frame goes into its socket and no further.
    follower.send_signal("STOP");
    assert_eq!(app.answer(&id, text("kept")).await.status, 200);
    // Long enough for the leader to write the frame and commit what it notes of it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let leader_home = leader.kill_keep_home().await;
    let follower_home = follower.kill_keep_home().await;
    let _leader = Broker::start_in(leader_home).await;
    let _follower = Broker::start_in(follower_home).await;
    let result = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the agent never got its answer")
        .unwrap();
    assert_eq!(text_of(&result), "kept", "{}", agent.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_stops_on_a_follower_has_its_calls_cancelled_at_once() {
    use leo_testkit::agent::{Agent, AgentOpts, wait_for_tools};
    let Some(db) = database().await else { return };
    // A grace period far longer than the test: an ending within it is not the grace's.
    let config = format!("{}client_tools:\n  resume_grace_s: 600\n", db.config());
    let nodes = leo_testkit::cluster::start(&config, 2).await;
    let (leader, follower) = (&nodes[0], &nodes[1]);
    let mut app = App::connect(&http_of(leader)).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let prompt = Duration::from_secs(5);
    // A real `leo-mcp` killed with a call in flight.
    let agent = Agent::start(follower.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    let call = agent.spawn_call("wait", json!({"n": 1}));
    let id = app.next_request_id().await;
    agent.kill();
    let cancelled = tokio::time::timeout(prompt, app.next_cancelled())
        .await
        .expect("the call of a stopped agent was not cancelled at once");
    assert_eq!(cancelled.data["id"], id.as_str());
    assert_eq!(cancelled.data["reason"], "agent_gone");
    assert!(
        call.await.is_err(),
        "the harness's call died with its leo-mcp"
    );
    // A sidecar that dies in the middle of a line: the leader reads the line as what it is
    // and still hears that the sidecar left.
    let mut ipc = agent_on(follower, "rocket", &[]).await;
    ipc.call(1, "wait", json!({})).await;
    let id = app.next_request_id().await;
    ipc.send_torn(r#"{"type":"call","id":2,"tool":"wa"#).await;
    drop(ipc);
    let cancelled = tokio::time::timeout(prompt, app.next_cancelled())
        .await
        .expect("the call of a sidecar that died mid-line was not cancelled at once");
    assert_eq!(cancelled.data["id"], id.as_str());
    assert_eq!(cancelled.data["reason"], "agent_gone");
}

/// Leader kills in the takeover test; the killed instance comes back as a follower after
/// each, so three instances run throughout.
const TAKEOVERS: usize = 20;

/// The survivor that answers a forwarded request first after the leader was killed, polled
/// every 20 ms: how long the cluster had no leader serving.
async fn first_answer(nodes: &[Option<Broker>], killed: tokio::time::Instant) -> Duration {
    loop {
        for node in nodes.iter().flatten() {
            if status_ok(&node.http()).await {
                return killed.elapsed();
            }
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "no takeover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The index of the instance that leads, once one is known.
async fn leading(nodes: &[Option<Broker>]) -> usize {
    let any = nodes.iter().flatten().next().unwrap();
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let id = leader(&any.http()).await;
        if let Some(i) = nodes
            .iter()
            .position(|n| n.as_ref().is_some_and(|n| Some(id_of(n)) == id))
        {
            return i;
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A leader whose process dies is replaced at a follower's next look (its alive lock went
/// with its connection), not after its lease: with the default settings (lease 15 s), each
/// of 20 SIGKILLs is followed by a forwarded request answered within 5 s, half within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_seconds_every_time() {
    let Some(db) = database().await else { return };
    let mut nodes: Vec<Option<Broker>> = cluster(&db, 3).await.into_iter().map(Some).collect();
    let mut took = Vec::new();
    for round in 1..=TAKEOVERS {
        let i = leading(&nodes).await;
        let home = nodes[i].take().unwrap().kill_keep_home().await;
        let after = first_answer(&nodes, tokio::time::Instant::now()).await;
        eprintln!("takeover {round}: {} ms", after.as_millis());
        took.push(after);
        let back = Broker::start_in(home).await;
        // It follows once its front forwards a request to the new leader.
        let http = back.http();
        eventually(|| status_ok(&http)).await;
        nodes[i] = Some(back);
    }
    took.sort();
    let (p50, worst) = (took[took.len() / 2], took[took.len() - 1]);
    eprintln!(
        "takeovers after a SIGKILL of the leader: p50 {} ms, worst {} ms",
        p50.as_millis(),
        worst.as_millis()
    );
    assert!(worst < Duration::from_secs(5), "worst {worst:?}: {took:?}");
    assert!(p50 < Duration::from_secs(2), "p50 {p50:?}: {took:?}");
}

/// A leader that stops cleanly gives its lease up and wakes the followers (`NOTIFY`): a status
/// naming another leader is answered within a second of the signal, though the followers
/// poll only every 5 s here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_cleanly_hands_over_within_a_second() {
    let Some(db) = database().await else { return };
    let config = format!("{}  poll_ms: 5000\n", db.config());
    let started = leo_testkit::cluster::start(&config, 3).await;
    let mut nodes: Vec<Option<Broker>> = started.into_iter().map(Some).collect();
    let i = leading(&nodes).await;
    let leader = nodes[i].take().unwrap();
    let old = Some(id_of(&leader));
    let signalled = tokio::time::Instant::now();
    let stopping = tokio::spawn(leader.stop_keep_home());
    let after = 'found: loop {
        for node in nodes.iter().flatten() {
            let now = leo_testkit::cluster::leader(&node.http()).await;
            if now.is_some() && now != old {
                break 'found signalled.elapsed();
            }
        }
        assert!(signalled.elapsed() < Duration::from_secs(30), "no handover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("handed over {} ms after SIGTERM", after.as_millis());
    let (status, _home) = stopping.await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        after < Duration::from_secs(1),
        "handed over after {after:?}"
    );
}

/// `web.max_sessions` on a small cluster (8 here): the leader admits exactly that many sidecar
/// sessions, those its follower pipes counted as its own unix sockets' (one of the leader's
/// sessions each), at most three quarters of them over the network (`403`), and refuses the
/// next with the documented `error` frame, on its own socket and through the follower alike; a
/// session that ends frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_clusters_session_limit_admits_exactly_so_many() {
    let Some(db) = database().await else { return };
    let config = format!("{}web:\n  max_sessions: 8\n", db.config());
    let nodes = leo_testkit::cluster::start(&config, 2).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let token = a.agent_token();
    let auth = format!("Bearer {token}");
    let upgrade = |agent: String| {
        let auth = auth.clone();
        async move {
            let headers = [
                ("authorization", auth.as_str()),
                ("leo-agent", agent.as_str()),
            ];
            Ipc::upgrade(a.addr, &headers).await
        }
    };
    // Six over the network (three quarters of 8), then the network's share is full.
    let mut open = Vec::new();
    for i in 0..6 {
        let mut ipc = upgrade(format!("net-{i}")).await.unwrap();
        let welcome = ipc.say_hello(&token, &format!("net-{i}")).await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        open.push(ipc);
    }
    let Err(refused) = upgrade("net-6".into()).await else {
        panic!("a seventh session over the network was upgraded")
    };
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(
        refused
            .body
            .contains("6 sessions open over the network, its limit"),
        "{refused:?}"
    );
    // Two on the follower's socket, piped: the leader's last two places.
    for i in 0..2 {
        open.push(agent_on(b, &format!("piped-{i}"), &[]).await);
    }
    // The ninth is refused, on the leader's socket and through the follower alike (which
    // carries a session to the leader once it said its hello).
    for node in [a, b] {
        let path = leo_protocol::home::Home::new(node.home()).sidecar_socket();
        let Err(refused) = Ipc::try_hello(&path, &token, "extra").await else {
            panic!("a ninth session was welcomed");
        };
        assert!(
            refused.contains(r#""code":"internal""#)
                && refused.contains("8 sidecar connections open, its limit (web.max_sessions)"),
            "{refused}"
        );
    }
    // A session that ends frees its place.
    open.remove(0).close().await;
    agent_on(b, "piped-2", &[]).await;
}

/// A follower carries its agents' sessions to the leader on a few links (`cluster::link`), not
/// one connection each: with the leader's `web.max_connections` at 12, forty sessions on the
/// follower's socket and sixteen upgraded over its TCP listener are all welcomed, calls cross
/// them, the leader's own limits still refuse what they refuse, and a session that ends is
/// told apart from one lost (its call ends at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_sessions_ride_a_few_links_to_the_leader() {
    let Some(db) = database().await else { return };
    let config = format!(
        "{}web:\n  max_sessions: 64\n  max_connections: 12\n  max_sessions_per_agent: 3\n",
        db.config()
    );
    let nodes = leo_testkit::cluster::start(&config, 2).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut app = App::connect(&http_of(a)).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut open = Vec::new();
    for i in 0..40 {
        open.push(agent_on(b, &format!("many-{i}"), &[]).await);
    }
    // IPC upgrades that reach the follower over the network ride the links too: sixteen of
    // them (three per agent, `max_sessions_per_agent`), and the leader's refusal of a fourth
    // for one agent reaches the client as the leader words it.
    let token = a.agent_token();
    let auth = format!("Bearer {token}");
    for i in 0..16 {
        let agent = format!("net-{}", i / 3);
        let headers = [("authorization", auth.as_str()), ("leo-agent", &agent)];
        let mut ipc = Ipc::upgrade(b.addr, &headers).await.unwrap();
        let welcome = ipc.say_hello(&token, &agent).await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        open.push(ipc);
    }
    let headers = [("authorization", auth.as_str()), ("leo-agent", "net-0")];
    let Err(refused) = Ipc::upgrade(b.addr, &headers).await else {
        panic!("a fourth session of one agent was upgraded through the follower")
    };
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(refused.body.contains("\"forbidden\""), "{refused:?}");
    // The follower's page counts its links and the sessions on them.
    let page = b.http().get("/metrics").await;
    let metrics = page.body.as_str().unwrap_or_default();
    for line in ["leo_cluster_links 4", "leo_cluster_link_sessions 56"] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in {metrics}"
        );
    }
    // Every session is live: a call from each of a few, the last one included.
    for n in [55, 39, 20, 1] {
        let ipc = &mut open[n];
        ipc.call(7, "echo", json!({"n": n})).await;
        let id = app.next_request_id().await;
        app.serve(&id, text(&format!("to {n}"))).await;
        let outcome = result_of(ipc, 7).await;
        assert_eq!(
            outcome["content"][0]["text"],
            format!("to {n}"),
            "{outcome}"
        );
    }
    // One that ends (its sidecar left) has its call cancelled at once, not kept for a resume.
    open[0].call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    drop(open.remove(0));
    let cancelled = tokio::time::timeout(Duration::from_secs(5), app.next_cancelled())
        .await
        .expect("the call of a sidecar that left was not cancelled at once");
    assert_eq!(cancelled.data["id"], id.as_str());
    assert_eq!(cancelled.data["reason"], "agent_gone");
}
