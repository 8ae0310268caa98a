//! The client of the `/mcp` rows: MCP over Streamable HTTP to the broker's TCP listener, as a
//! harness configured with its HTTP setup line speaks it, on one kept-alive HTTP/1.1
//! connection (plain or TLS) used one request at a time.
//!
//! It speaks the session era (2025-11-25: `initialize`, `Mcp-Session-Id`), names itself
//! `claude-code` so that the broker shows it the app's tools natively, as `leo-mcp --mode
//! native` does for the `leo` row, and sends the shared agent token with `Leo-Agent`. A call's
//! answer may come as JSON or as an SSE stream that ends with the response: the whole body is
//! read, as a client must before it can use the result, and the response with the call's id is
//! taken from it. Nothing else is done with the answer than what rmcp does for the other rows
//! (parse it into a `CallToolResult`).
//!
//! The broker closes a keep-alive connection that stays idle for `web.header_timeout_s`, as it
//! does while the other systems take their turns; like a harness's HTTP client, this one then
//! opens a new connection (the session is in `Mcp-Session-Id`, not in the connection), and
//! says at the end how many times it did.

use std::net::SocketAddr;
use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// The protocol revision of the session era.
const VERSION: &str = "2025-11-25";

/// Where a `/mcp` client connects, and as whom.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// HTTPS, trusting this CA (`leo tls init`'s), with the server name `localhost`.
    pub ca: Option<PathBuf>,
    /// The shared agent token.
    pub token: String,
    /// The agent, sent as `Leo-Agent`.
    pub agent: String,
}

/// One MCP session over one connection.
pub struct McpHttp {
    target: Target,
    sender: SendRequest<Full<Bytes>>,
    /// New connections after the first.
    reconnects: u64,
    host: String,
    auth: String,
    agent: String,
    session: Option<String>,
    next_id: u64,
}

/// A response: status, `Mcp-Session-Id`, content type and body.
struct Answer {
    status: u16,
    session: Option<String>,
    sse: bool,
    body: Bytes,
}

impl McpHttp {
    /// Connects and opens a session (`initialize`, then `notifications/initialized`).
    pub async fn open(target: &Target) -> Result<McpHttp, String> {
        let (sender, host) = connect(target).await?;
        let mut client = McpHttp {
            target: target.clone(),
            sender,
            reconnects: 0,
            host,
            auth: format!("Bearer {}", target.token),
            agent: target.agent.clone(),
            session: None,
            next_id: 0,
        };
        client.initialize().await?;
        Ok(client)
    }

    async fn initialize(&mut self) -> Result<(), String> {
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": VERSION, "capabilities": {},
                       "clientInfo": {"name": "claude-code", "version": "0-bench"}}),
            )
            .await?;
        if init["protocolVersion"] != VERSION {
            return Err(format!("initialize: {init}"));
        }
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let sent = self.send("POST", Some(note)).await?;
        if sent.status != 202 {
            return Err(format!("notifications/initialized: HTTP {}", sent.status));
        }
        Ok(())
    }

    /// The names of the tools the session is offered.
    pub async fn tool_names(&mut self) -> Result<Vec<String>, String> {
        let listed = self.request("tools/list", json!({})).await?;
        Ok(listed["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `tools/call` of `tool` with `arguments`; the result.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Result<Value, String> {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    /// Ends the session (`DELETE /mcp`); how many new connections it needed.
    pub async fn close(mut self) -> u64 {
        let _ = self.send("DELETE", None).await;
        self.reconnects
    }

    /// A request; its `result`, or the error it got.
    async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = self.send("POST", Some(body)).await?;
        if answer.status != 200 {
            return Err(format!(
                "{method}: HTTP {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ));
        }
        if self.session.is_none() {
            self.session = answer.session;
        }
        let response = if answer.sse {
            sse_response(&answer.body, id)
        } else {
            serde_json::from_slice(&answer.body).ok()
        };
        match response {
            Some(r) if r.get("result").is_some() => Ok(r["result"].clone()),
            Some(r) => Err(format!("{method}: {}", r["error"])),
            None => Err(format!("{method}: no response {id} in the answer")),
        }
    }

    /// Sends `method /mcp` with `body` and reads the whole answer, on a new connection when
    /// the broker closed the last one before the request could be sent.
    async fn send(&mut self, method: &str, body: Option<Value>) -> Result<Answer, String> {
        let body = body.map(|b| Bytes::from(b.to_string()));
        for _ in 0..2 {
            if self.sender.ready().await.is_err() {
                self.reconnect().await?;
            }
            match self
                .sender
                .try_send_request(self.http_request(method, body.clone())?)
                .await
            {
                Ok(resp) => return read(resp).await,
                // Closed as it was sent: the request never reached the broker.
                Err(e) if e.error().is_canceled() || e.error().is_closed() => {
                    self.reconnect().await?;
                }
                Err(e) => return Err(e.into_error().to_string()),
            }
        }
        Err(format!("{method} /mcp: the connection closed twice"))
    }

    async fn reconnect(&mut self) -> Result<(), String> {
        self.sender = connect(&self.target).await?.0;
        self.reconnects += 1;
        Ok(())
    }

    /// The request `method /mcp` with the session's headers.
    fn http_request(
        &self,
        method: &str,
        body: Option<Bytes>,
    ) -> Result<hyper::Request<Full<Bytes>>, String> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri("/mcp")
            .header("host", &self.host)
            .header("authorization", &self.auth)
            .header("leo-agent", &self.agent)
            .header("accept", "application/json, text/event-stream");
        if let Some(session) = &self.session {
            req = req
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", VERSION);
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        req.body(Full::new(body.unwrap_or_default()))
            .map_err(|e| e.to_string())
    }
}

/// A new connection to `target` (TLS when it has a CA), and the Host it is named by.
async fn connect(target: &Target) -> Result<(SendRequest<Full<Bytes>>, String), String> {
    let tcp = tokio::net::TcpStream::connect(target.addr)
        .await
        .map_err(|e| format!("connect {}: {e}", target.addr))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    match &target.ca {
        Some(ca) => {
            let tls = leo_protocol::tls::Connector::new(Some(ca)).map_err(|e| e.to_string())?;
            let stream = tls
                .connect("localhost", tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            let host = format!("localhost:{}", target.addr.port());
            Ok((handshake(stream).await?, host))
        }
        None => Ok((handshake(tcp).await?, target.addr.to_string())),
    }
}

/// Reads a whole answer.
async fn read(resp: hyper::Response<hyper::body::Incoming>) -> Result<Answer, String> {
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let session = header("mcp-session-id");
    let sse = header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Answer {
        status,
        session,
        sse,
        body,
    })
}

/// The HTTP/1.1 connection over `io`, driven by a task of its own.
async fn handshake<IO>(io: IO) -> Result<SendRequest<Full<Bytes>>, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// The JSON-RPC response with `id` among the `data:` lines of an SSE body.
fn sse_response(body: &[u8], id: u64) -> Option<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v["id"] == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_is_the_one_with_the_calls_id_among_the_events() {
        let body = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                     data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[]}}\n\n";
        assert_eq!(
            sse_response(body, 3).unwrap()["result"]["content"],
            json!([])
        );
        assert_eq!(sse_response(body, 4), None);
    }
}
