//! A foreign web server on loopback, as the broker meets one: a client's metadata document
//! host, an identity provider's metadata and keys. Each path answers what the test set, over
//! HTTPS with a CA of its own (the broker trusts it through `LEO_CA_FILE`) or plain HTTP; each
//! request is counted by path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What one path answers.
#[derive(Clone)]
struct Page {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Default)]
struct Site {
    pages: HashMap<String, Page>,
    hits: HashMap<String, usize>,
}

pub struct Served {
    pub addr: SocketAddr,
    https: bool,
    site: Arc<Mutex<Site>>,
    /// The CA file that makes its certificate trusted (HTTPS only).
    pub ca: Option<PathBuf>,
    _dir: Option<tempfile::TempDir>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Served {
    /// Plain HTTP on loopback.
    pub async fn http() -> Served {
        Served::start(None).await
    }

    /// HTTPS on loopback, with a certificate for `127.0.0.1` of a CA made for it.
    pub async fn https() -> Served {
        let dir = tempfile::tempdir().unwrap();
        leo_testkit::tls::tls_init(dir.path(), &["127.0.0.1"]);
        let home = leo_protocol::home::Home::new(dir.path());
        let certs = leo_protocol::tls::read_certs(&home.tls_cert()).unwrap();
        let key = leo_protocol::tls::read_key(&home.tls_key()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(leo_protocol::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let mut served = Served::start(Some(Arc::new(config))).await;
        served.ca = Some(home.tls_ca());
        served._dir = Some(dir);
        served
    }

    async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let site = Arc::new(Mutex::new(Site::default()));
        let https = tls.is_some();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn({
            let site = site.clone();
            async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (site, acceptor) = (site.clone(), acceptor.clone());
                    tokio::spawn(async move {
                        match acceptor {
                            Some(a) => {
                                if let Ok(tls) = a.accept(tcp).await {
                                    answer(tls, &site).await;
                                }
                            }
                            None => answer(tcp, &site).await,
                        }
                    });
                }
            }
        });
        Served {
            addr,
            https,
            site,
            ca: None,
            _dir: None,
            task,
        }
    }

    /// The URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// `path` answers `status`, `headers` and `body` from now on.
    pub fn set(&self, path: &str, status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) {
        let page = Page {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.into(),
        };
        self.site
            .lock()
            .unwrap()
            .pages
            .insert(path.to_owned(), page);
    }

    /// `path` answers `json` with `200`.
    pub fn json(&self, path: &str, json: &serde_json::Value) {
        self.set(
            path,
            200,
            &[("content-type", "application/json")],
            json.to_string(),
        );
    }

    /// How many requests `path` got.
    pub fn hits(&self, path: &str) -> usize {
        self.site
            .lock()
            .unwrap()
            .hits
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

/// Reads one request's head and writes the answer its path has, then closes.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, site: &Mutex<Site>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
    let page = {
        let mut site = site.lock().unwrap();
        *site.hits.entry(path.clone()).or_default() += 1;
        site.pages.get(&path).cloned()
    }
    .unwrap_or(Page {
        status: 404,
        headers: vec![],
        body: b"not found".to_vec(),
    });
    let mut out = format!(
        "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        page.status,
        page.body.len()
    );
    for (k, v) in &page.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&page.body);
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}
