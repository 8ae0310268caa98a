//! HTTPS on the TCP listener (`web.tls`), end to end: the real `leo broker` with the CA of the
//! real `leo tls init`, reached by the real `leo status --url`; plain HTTP sent to the HTTPS
//! port; certificates a client must refuse (untrusted, expired); a reload after the files
//! change and after `SIGHUP`, with a connection held open across both; a pair refused at start
//! and at reload; the warning of a listener beyond loopback without TLS; and the Origin rule
//! of `/mcp` and the console, whose own origin is `https://<Host>` there.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use leo_protocol::home::Home;
use leo_testkit::Broker;
use leo_testkit::agent::wait_until;
use leo_testkit::tls::{
    TLS_CONFIG, TlsConn, ca_file, tls_init, write_expired_pair, write_self_signed,
};

/// `leo status --url URL` from a home of its own (so nothing local can answer), with the
/// operator token in `LEO_TOKEN` and `ca` as `LEO_CA_FILE`.
fn remote_status(broker: &Broker, url: &str, ca: Option<&Path>) -> Output {
    let elsewhere = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(leo_testkit::bin("leo"));
    cmd.args(["--url", url, "status"])
        .env("LEO_HOME", elsewhere.path())
        .env("LEO_TOKEN", broker.operator_token())
        .env_remove("LEO_CA_FILE")
        .env_remove("SSL_CERT_FILE");
    if let Some(ca) = ca {
        cmd.env("LEO_CA_FILE", ca);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `leo` could not reach the broker (exit 2) and said `want`.
fn unreachable_saying(out: &Output, want: &str) {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(out).contains(want), "{}", stderr(out));
}

#[tokio::test]
async fn leo_status_reaches_an_https_broker_that_trusts_the_ca_of_tls_init() {
    let broker = Broker::start_tls().await;
    let ca = ca_file(broker.home());
    let port = broker.addr.port();
    for host in ["localhost", "127.0.0.1"] {
        let out = remote_status(&broker, &format!("https://{host}:{port}"), Some(&ca));
        assert!(out.status.success(), "{host}: {}", stderr(&out));
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.starts_with("leo broker · revision"), "{shown}");
    }
    // Without the CA the certificate is untrusted: exit 2, and the message says what to set.
    let out = remote_status(&broker, &format!("https://localhost:{port}"), None);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = stderr(&out);
    assert!(
        said.contains("not signed by a CA this client trusts"),
        "{said}"
    );
    assert!(said.contains("LEO_CA_FILE"), "{said}");
    // A CA file that cannot be read is named, with its variable; the local socket is not.
    let out = remote_status(
        &broker,
        &format!("https://localhost:{port}"),
        Some(Path::new("/nope.pem")),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = stderr(&out);
    assert!(
        said.contains("cannot reach the broker at https://localhost:")
            && said.contains("LEO_CA_FILE: cannot read /nope.pem")
            && !said.contains("leo.sock"),
        "{said}"
    );
    // http:// to the HTTPS port is answered, and told why.
    let out = remote_status(&broker, &format!("http://localhost:{port}"), None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr(&out).contains("this port speaks HTTPS"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn plain_http_to_the_https_port_gets_a_clear_400_and_https_still_serves() {
    let broker = Broker::start_tls().await;
    let plain = broker.http().get("/api/v1/status").await;
    assert_eq!(plain.status, 400);
    assert_eq!(
        plain.body.as_str(),
        Some("this port speaks HTTPS: use https:// URLs\n")
    );
    let ca = ca_file(broker.home());
    let mut conn = TlsConn::open(broker.addr, "localhost", &ca).await.unwrap();
    let token = broker.operator_token();
    assert_eq!(conn.get("/api/v1/status", &token).await, Ok(200));
    // Auth runs over TLS as over plain TCP.
    let mut anonymous = TlsConn::open(broker.addr, "localhost", &ca).await.unwrap();
    assert_eq!(anonymous.get("/api/v1/status", "").await, Ok(401));
}

/// An MCP `initialize` over `conn` with `origin` (or none) and the shared agent token; its
/// status and body.
async fn mcp_initialize(conn: &mut TlsConn, token: &str, origin: Option<&str>) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("leo-agent", "browserish"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    headers.extend(origin.map(|o| ("origin", o)));
    let body = leo_testkit::mcp::initialize("claude-code").to_string();
    conn.send("POST", "/mcp", &headers, body.into())
        .await
        .unwrap()
}

/// Under `web.tls` a browser names its origin `https://<Host>`: `/mcp` and the console's login
/// take it, and refuse `http://<Host>` (another origin) and a foreign one, before any token.
#[tokio::test]
async fn over_https_the_own_origin_is_https_and_http_is_refused() {
    let broker = Broker::start_tls().await;
    let ca = ca_file(broker.home());
    let host = format!("localhost:{}", broker.addr.port());
    let mut conn = TlsConn::open(broker.addr, "localhost", &ca).await.unwrap();
    let token = broker.agent_token();
    let own = format!("https://{host}");
    let (status, body) = mcp_initialize(&mut conn, &token, Some(&own)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"protocolVersion\""), "{body}");
    for other in [format!("http://{host}"), "https://evil.example".to_owned()] {
        let (status, body) = mcp_initialize(&mut conn, &token, Some(&other)).await;
        assert_eq!(status, 403, "{other}: {body}");
        assert!(body.contains("cross-origin request refused"), "{body}");
        assert!(body.contains(&format!("is not https://{host}")), "{body}");
    }
    let (status, body) = mcp_initialize(&mut conn, &token, None).await;
    assert_eq!(status, 200, "no Origin (not a browser): {body}");

    // The console's login form, posted by a browser on the HTTPS page.
    let form = format!("token={}", broker.operator_token());
    for (origin, want) in [(own.as_str(), 303), (&format!("http://{host}"), 403)] {
        let headers = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", origin),
        ];
        let (status, body) = conn
            .send("POST", "/login", &headers, form.clone().into())
            .await
            .unwrap();
        assert_eq!(status, want, "{origin}: {body}");
    }
}

/// A broker serving a self-signed certificate made by `openssl req -x509` (marked a CA) is
/// reached by `leo --url` and `leo-mcp --url` whose `LEO_CA_FILE` names that very certificate;
/// a different self-signed certificate in `LEO_CA_FILE` is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_certificate_named_by_the_ca_file_is_trusted_as_itself() {
    use leo_testkit::agent::{Agent, AgentOpts, error_text, wait_for_tools};
    let home = tempfile::tempdir().unwrap();
    let h = Home::new(home.path());
    std::fs::create_dir_all(h.tls()).unwrap();
    write_self_signed(&h.tls_cert(), &h.tls_key());
    std::fs::write(home.path().join("config.yaml"), TLS_CONFIG).unwrap();
    let broker = Broker::start_in(home).await;
    let pinned = Home::new(broker.home()).tls_cert();
    let other = tempfile::tempdir().unwrap();
    let stranger = other.path().join("stranger.pem");
    write_self_signed(&stranger, &other.path().join("stranger.key"));
    let url = format!("https://localhost:{}", broker.addr.port());

    let out = remote_status(&broker, &url, Some(&pinned));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = remote_status(&broker, &url, Some(&stranger));
    unreachable_saying(&out, "a self-signed CA certificate");

    let app = crate::support::App::connect(&broker.http_unix()).await;
    app.register_ok("g", serde_json::json!([crate::support::tool("wait")]))
        .await;
    let elsewhere = tempfile::tempdir().unwrap();
    let opts = |ca: &Path| {
        AgentOpts::remote("far", &url, &broker.agent_token())
            .env("LEO_CA_FILE", ca.to_str().unwrap())
    };
    let agent = Agent::start(elsewhere.path(), opts(&pinned)).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    // The session never opens: calls end at once, saying why (once leo-mcp has tried).
    let agent = Agent::start(elsewhere.path(), opts(&stranger)).await;
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    let said = loop {
        let said = error_text(&agent.call("wait", serde_json::json!({})).await);
        if said.contains("self-signed CA") || tokio::time::Instant::now() > deadline {
            break said;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(said.contains("self-signed CA"), "{said}");
}

#[tokio::test]
async fn an_expired_certificate_is_refused_by_the_client_with_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    write_expired_pair(home.path());
    std::fs::write(home.path().join("config.yaml"), TLS_CONFIG).unwrap();
    let broker = Broker::start_in(home).await;
    let ca = ca_file(broker.home());
    let url = format!("https://localhost:{}", broker.addr.port());
    let out = remote_status(&broker, &url, Some(&ca));
    unreachable_saying(&out, "its certificate has expired");
    // Every client's TLS (`leo_protocol::tls`) says the same.
    let err = TlsConn::open(broker.addr, "localhost", &ca).await.err();
    assert!(err.is_some_and(|e| e.contains("expired")));
}

#[tokio::test]
async fn a_new_pair_is_served_after_a_change_and_after_sighup_and_connections_stay_open() {
    let broker = Broker::start_tls().await;
    let ca = ca_file(broker.home());
    let token = broker.operator_token();
    let mut held = TlsConn::open(broker.addr, "localhost", &ca).await.unwrap();
    assert_eq!(held.get("/api/v1/status", &token).await, Ok(200));
    let first = held.cert.clone();

    // A change of the files: `leo tls init` again (the CA is kept, the pair is new).
    let said = tls_init(broker.home(), &["box.example"]);
    assert!(said.contains("already names these files"), "{said}");
    let second = served_once_changed(&broker, &ca, &first).await;
    assert_eq!(
        held.get("/api/v1/status", &token).await,
        Ok(200),
        "held across the change"
    );

    // A new pair whose key others may read is refused; the old pair is kept.
    // (Issued in another home from the same CA, copied there.)
    let other = tempfile::tempdir().unwrap();
    let (here, there) = (Home::new(broker.home()), Home::new(other.path()));
    std::fs::create_dir_all(there.tls()).unwrap();
    std::fs::copy(here.tls_ca(), there.tls_ca()).unwrap();
    std::fs::copy(here.tls_ca_key(), there.tls_ca_key()).unwrap();
    tls_init(other.path(), &[]);
    let loose = here.tls().join("loose.key");
    std::fs::copy(there.tls_key(), &loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::rename(&loose, here.tls_key()).unwrap();
    std::fs::copy(there.tls_cert(), here.tls_cert()).unwrap();
    wait_until("the refusal of the loose key", || {
        broker.stderr().contains("keeping the old pair")
    })
    .await;
    let now = TlsConn::open(broker.addr, "localhost", &ca).await.unwrap();
    assert_eq!(now.cert, second, "the refused pair is not served");

    // chmod changes no size, time or inode the poll sees: only SIGHUP loads the pair now.
    std::fs::set_permissions(here.tls_key(), std::fs::Permissions::from_mode(0o600)).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &broker.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_until("the SIGHUP reload", || {
        broker.stderr().contains("why=\"SIGHUP\"")
    })
    .await;
    let third = served_once_changed(&broker, &ca, &second).await;
    assert_ne!(third, first);
    assert_eq!(
        held.get("/api/v1/status", &token).await,
        Ok(200),
        "held across SIGHUP"
    );
}

/// The certificate new connections get, once it is no longer `old`.
async fn served_once_changed(broker: &Broker, ca: &Path, old: &[u8]) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let conn = TlsConn::open(broker.addr, "localhost", ca).await.unwrap();
        if conn.cert != old {
            return conn.cert;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_pair_that_cannot_be_used_stops_the_start_naming_the_key() {
    let home = tempfile::tempdir().unwrap();
    let config = "web:\n  tls:\n    cert: tls/missing.pem\n    key: tls/server.key\n";
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    tls_init(home.path(), &[]);
    let err = leo_testkit::spawn(home.path())
        .await
        .err()
        .unwrap_or_default();
    assert!(err.contains("web.tls.cert: cannot read"), "{err}");
    assert!(err.contains("missing.pem"), "{err}");

    std::fs::write(home.path().join("config.yaml"), TLS_CONFIG).unwrap();
    let key = Home::new(home.path()).tls_key();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .err()
        .unwrap_or_default();
    assert!(err.contains("web.tls.key"), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
}

/// Runs `leo broker --bind 0.0.0.0 --port 0` on `home`; returns the banner's lines (up to the
/// app's setup lines) and the log once the TCP limits are logged (after the warning, if any).
async fn banner_and_log_beyond_loopback(home: &Path) -> (String, String) {
    use tokio::io::AsyncBufReadExt;
    let log = home.join("broker.stderr");
    let mut child = tokio::process::Command::new(leo_testkit::bin("leo"))
        .args(["broker", "--bind", "0.0.0.0", "--port", "0"])
        .env("LEO_HOME", home)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = String::new();
    let read = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("Connect an app") {
                break;
            }
            banner.push_str(&line);
            banner.push('\n');
        }
    };
    tokio::time::timeout(leo_testkit::WAIT, read).await.unwrap();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the TCP limits in the log", || {
        text().contains("TCP limits")
    })
    .await;
    let _ = child.kill().await;
    (banner, text())
}

#[tokio::test]
async fn a_listener_beyond_loopback_without_tls_says_tokens_cross_in_clear() {
    let plain = tempfile::tempdir().unwrap();
    let (banner, log) = banner_and_log_beyond_loopback(plain.path()).await;
    assert!(
        banner.starts_with("leo broker listening on http://0.0.0.0:"),
        "{banner}"
    );
    assert!(banner.contains("WARNING: 0.0.0.0:"), "{banner}");
    assert!(banner.contains("cross the network in clear"), "{banner}");
    assert!(log.contains("cross the network in clear"), "{log}");

    let secure = tempfile::tempdir().unwrap();
    tls_init(secure.path(), &[]);
    std::fs::write(secure.path().join("config.yaml"), TLS_CONFIG).unwrap();
    let (banner, log) = banner_and_log_beyond_loopback(secure.path()).await;
    assert!(
        banner.starts_with("leo broker listening on https://0.0.0.0:"),
        "{banner}"
    );
    assert!(!banner.contains("WARNING"), "{banner}");
    assert!(!log.contains("in clear"), "{log}");
}

#[tokio::test]
async fn a_handshake_that_stalls_is_cut_off_like_a_slow_head_and_the_port_serves_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let home = tempfile::tempdir().unwrap();
    tls_init(home.path(), &[]);
    let config = format!("{TLS_CONFIG}  header_timeout_s: 1\n");
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    let broker = Broker::start_in(home).await;
    let ca = ca_file(broker.home());
    let token = broker.operator_token();
    // One that never starts its handshake, and one that stops after its first byte.
    let mut silent = tokio::net::TcpStream::connect(broker.addr).await.unwrap();
    let mut stalled = tokio::net::TcpStream::connect(broker.addr).await.unwrap();
    stalled.write_all(&[0x16]).await.unwrap();
    for conn in [&mut silent, &mut stalled] {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(leo_testkit::WAIT, conn.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "the connection was not closed: {read:?}"
        );
    }
    // (A kept-alive connection would be closed by the same 1 s bound, so a new one is opened.)
    let mut after = TlsConn::open(broker.addr, "localhost", &ca).await.unwrap();
    assert_eq!(after.get("/api/v1/status", &token).await, Ok(200));
}

#[tokio::test]
async fn leo_tls_init_twice_keeps_the_ca_and_keeps_its_keys_private() {
    let home = tempfile::tempdir().unwrap();
    let h = Home::new(home.path());
    let first = tls_init(home.path(), &["box.example"]);
    for line in [
        "Created a local CA",
        "for: localhost, 127.0.0.1, ::1, box.example",
        "cert: tls/server.pem",
        "NODE_EXTRA_CA_CERTS=",
        "SSL_CERT_FILE=",
        "LEO_CA_FILE=",
    ] {
        assert!(first.contains(line), "{line:?} missing from:\n{first}");
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&h.tls()), 0o700);
    assert_eq!(mode(&h.tls_ca_key()), 0o600);
    assert_eq!(mode(&h.tls_key()), 0o600);
    assert_eq!(mode(&h.tls_ca()), 0o644);
    let (ca, cert) = (
        std::fs::read(h.tls_ca()).unwrap(),
        std::fs::read(h.tls_cert()).unwrap(),
    );
    let second = tls_init(home.path(), &[]);
    assert!(second.contains("Kept the local CA"), "{second}");
    assert!(
        second.contains("for: localhost, 127.0.0.1, ::1\n"),
        "{second}"
    );
    assert_eq!(std::fs::read(h.tls_ca()).unwrap(), ca, "the CA is kept");
    assert_ne!(
        std::fs::read(h.tls_cert()).unwrap(),
        cert,
        "the pair is new"
    );
    // A name a certificate cannot carry is a bad argument (exit 2), and nothing is written.
    let bad = Command::new(leo_testkit::bin("leo"))
        .args(["tls", "init", "--host", "http://box"])
        .env("LEO_HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        stderr(&bad).contains("not a DNS name or an IP address"),
        "{}",
        stderr(&bad)
    );
    // Half a CA is refused rather than replaced.
    std::fs::remove_file(h.tls_ca_key()).unwrap();
    let half = Command::new(leo_testkit::bin("leo"))
        .args(["tls", "init"])
        .env("LEO_HOME", home.path())
        .output()
        .unwrap();
    assert!(!half.status.success());
    assert!(stderr(&half).contains("only one of"), "{}", stderr(&half));
}
