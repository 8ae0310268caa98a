//! HTTPS test support: a home with `leo tls init`'s CA and certificate, a pair made to be
//! refused (expired), and a kept-alive TLS connection that shows which certificate the broker
//! served it, so a test can tell a reload from no reload and hold a connection across one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use leo_protocol::home::Home;
use leo_protocol::tls::Connector;

use crate::{WAIT, bin};

/// The `web.tls` lines that point at `leo tls init`'s files.
pub const TLS_CONFIG: &str = "web:\n  tls:\n    cert: tls/server.pem\n    key: tls/server.key\n";

/// Runs `leo tls init --host …` on `home`; panics with its output if it fails.
pub fn tls_init(home: &Path, hosts: &[&str]) -> String {
    let mut cmd = std::process::Command::new(bin("leo"));
    cmd.args(["tls", "init"]).env("LEO_HOME", home);
    for h in hosts {
        cmd.args(["--host", h]);
    }
    let out = cmd.output().expect("run leo tls init");
    assert!(out.status.success(), "leo tls init: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The CA file of `home` (`tls/ca.pem`).
pub fn ca_file(home: &Path) -> PathBuf {
    Home::new(home).tls_ca()
}

/// Writes a CA and a server certificate for loopback that expired yesterday into `home`'s
/// `tls/` (the layout of `leo tls init`): a broker serves it, and a client must refuse it.
pub fn write_expired_pair(home: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use std::os::unix::fs::PermissionsExt;
    let h = Home::new(home);
    std::fs::create_dir_all(h.tls()).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    server.not_before = now - time::Duration::days(30);
    server.not_after = now - time::Duration::days(1);
    let cert = server.signed_by(&key, &Issuer::new(ca, ca_key)).unwrap();
    std::fs::write(h.tls_ca(), ca_cert.pem()).unwrap();
    std::fs::write(h.tls_cert(), cert.pem()).unwrap();
    std::fs::write(h.tls_key(), key.serialize_pem()).unwrap();
    std::fs::set_permissions(h.tls_key(), std::fs::Permissions::from_mode(0o600)).unwrap();
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// One kept-alive HTTPS connection to the broker.
pub struct TlsConn {
    sender: Sender,
    host: String,
    /// The end-entity certificate the broker presented (DER).
    pub cert: Vec<u8>,
}

impl TlsConn {
    /// Connects to `addr`, checking the certificate for `host` against `ca`.
    pub async fn open(addr: SocketAddr, host: &str, ca: &Path) -> Result<TlsConn, String> {
        let connector = Connector::new(Some(ca)).map_err(|e| e.to_string())?;
        let fut = async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())?;
            let tls = connector
                .connect(host, tcp)
                .await
                .map_err(|e| e.to_string())?;
            let cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec())
                .ok_or("no certificate")?;
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok::<_, String>(TlsConn {
                sender,
                host: format!("{host}:{}", addr.port()),
                cert,
            })
        };
        tokio::time::timeout(WAIT, fut)
            .await
            .map_err(|_| "TLS connect timed out".to_owned())?
    }

    /// `GET path` with `token` on this same connection; the status.
    pub async fn get(&mut self, path: &str, token: &str) -> Result<u16, String> {
        let auth = format!("Bearer {token}");
        let (status, _) = self
            .send("GET", path, &[("authorization", &auth)], Bytes::new())
            .await?;
        Ok(status)
    }

    /// `method path` with `headers` and `body` (besides Host) on this same connection; the
    /// status and the body as text.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(u16, String), String> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let fut = async {
            self.sender.ready().await.map_err(|e| e.to_string())?;
            let resp = self
                .sender
                .send_request(req)
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok((status, String::from_utf8_lossy(&body).into_owned()))
        };
        tokio::time::timeout(WAIT, fut)
            .await
            .map_err(|_| "request timed out".to_owned())?
    }
}

/// Writes a self-signed certificate for `localhost` and `127.0.0.1` and its key (0600) to
/// `cert` and `key`, made the usual way: `openssl req -x509`, which marks it a CA. Without the
/// `openssl` binary, rcgen makes one with the same CA flag.
pub fn write_self_signed(cert: &Path, key: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "30"])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .output()
        .is_ok_and(|out| out.status.success());
    if !made {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let pair = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let made = params.self_signed(&pair).unwrap();
        std::fs::write(cert, made.pem()).unwrap();
        std::fs::write(key, pair.serialize_pem()).unwrap();
    }
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).unwrap();
}
