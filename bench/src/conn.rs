//! A bare HTTP client for the breakdown rows: one keep-alive HTTP/1.1 connection that posts a
//! body serialized once, to time one round trip to the broker with nothing else around it.

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use leo_testkit::http::{Http, Target};

pub struct RawConn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
    auth: Option<String>,
}

async fn handshake<IO>(
    io: IO,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl RawConn {
    /// Opens a connection to `http`'s broker (TCP or its unix socket), with its token.
    pub async fn open(http: &Http) -> anyhow::Result<RawConn> {
        let (sender, host) = match &http.target {
            Target::Tcp(addr) => {
                let stream = tokio::net::TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                (handshake(TokioIo::new(stream)).await?, addr.to_string())
            }
            Target::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await?;
                (handshake(TokioIo::new(stream)).await?, "localhost".into())
            }
        };
        Ok(RawConn {
            sender,
            host,
            auth: http.token.as_ref().map(|t| format!("Bearer {t}")),
        })
    }

    /// POSTs a JSON body; returns the status (the body is read and dropped).
    pub async fn post(&mut self, path: &str, body: Bytes) -> anyhow::Result<u16> {
        let mut req = Request::builder()
            .method("POST")
            .uri(path)
            .header("host", &self.host)
            .header("content-type", "application/json");
        if let Some(auth) = &self.auth {
            req = req.header("authorization", auth);
        }
        let req = req.body(Full::new(body))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok(status)
    }
}
