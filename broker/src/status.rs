//! `leo status`: asks the running broker over `run/leo.sock` with the operator token.
//!
//! It speaks one HTTP/1.1 request by hand (`Connection: close`) rather than pulling an HTTP
//! client into the binary for a single GET.

#![allow(clippy::print_stdout)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::{Context, bail};
use leo_broker::home::Home;
use leo_broker::tokens::read_token_file;
use serde_json::Value;

pub fn run(home: &Home, json: bool) -> anyhow::Result<()> {
    let token = read_token_file(&home.operator_token())?;
    let sock = home.api_socket();
    let mut stream = UnixStream::connect(&sock)
        .with_context(|| format!("no broker is listening on {}", sock.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET /api/v1/status HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("the broker sent a malformed response");
    };
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "the broker answered {}",
            head.lines().next().unwrap_or_default()
        );
    }
    let envelope: Value = serde_json::from_str(body).context("the broker sent malformed JSON")?;
    let data = envelope.get("data").cloned().unwrap_or(Value::Null);
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&data)?)?;
        return Ok(());
    }
    let list = |key: &str| {
        data.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    writeln!(out, "apps:")?;
    for a in list("apps") {
        writeln!(
            out,
            "  {}  {}{}",
            a["client_id"].as_str().unwrap_or("?"),
            a["principal"].as_str().unwrap_or("?"),
            if a["provider"].as_bool() == Some(true) {
                "  (provider)"
            } else {
                ""
            }
        )?;
    }
    writeln!(out, "agents:")?;
    for s in list("agents") {
        writeln!(
            out,
            "  {}  session {}  harness {}  mode {}",
            s["agent"].as_str().unwrap_or("?"),
            s["session"].as_str().unwrap_or("?"),
            s["harness"]["name"].as_str().unwrap_or("-"),
            s["mode"].as_str().unwrap_or("?")
        )?;
    }
    let tools: Vec<String> = list("tools")
        .iter()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    writeln!(
        out,
        "tools (revision {}): {}",
        data["revision"],
        tools.join(", ")
    )?;
    writeln!(out, "pending requests: {}", data["pending"])?;
    Ok(())
}
