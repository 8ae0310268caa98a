//! HTTPS on the TCP listener (`web.tls`): the certificate and key, and their reload.
//!
//! Certificates are renewed while the broker runs (a monthly ACME renewal, `leo tls init --host`
//! adding a name), and a restart would cut every open stream and session. So the pair sits
//! behind a resolver that rustls asks at each handshake, and a reload swaps it: handshakes
//! from then on get the new pair, connections already open keep theirs. The files are checked
//! every [`POLL`] (size, modification time and inode of both) and on `SIGHUP`; a new pair that
//! does not load (unreadable, not PEM, a key that does not match the certificate, a key others
//! may read) is logged and the old one kept, so a half-written renewal never takes HTTPS down.
//!
//! The provider and the PEM reading are `leo_protocol::tls`, the one TLS rule of every part.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use leo_protocol::chain::error_chain;
use leo_protocol::tls::{ALPN_HTTP1, TlsError, provider, read_certs, read_key};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig};
use rustls::sign::CertifiedKey;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often the files are looked at for a change.
pub const POLL: Duration = Duration::from_secs(2);

/// The certificate chain and key files, absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The pair handshakes are served with now.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// The TLS side of the TCP listener: the acceptor its connections go through, and the pair
/// behind it.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    current: Arc<Current>,
    files: Arc<TlsFiles>,
    /// The `SIGHUP` listener, installed at load (before the banner says the broker listens, so
    /// a `SIGHUP` sent from then on reloads rather than stops it), taken by `watch`.
    hup: Arc<std::sync::Mutex<Option<Signal>>>,
}

/// Why the listener's certificate and key were refused; its text starts with the `web.tls`
/// key at fault.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("web.tls.{key}")]
    File {
        key: &'static str,
        #[source]
        source: TlsError,
    },
    #[error("web.tls.key")]
    Readable(#[source] crate::error::BrokerError),
    #[error("web.tls.key: {} does not go with the certificate in {}", .key.display(), .cert.display())]
    Mismatch {
        key: PathBuf,
        cert: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("web.tls")]
    Config(#[source] rustls::Error),
}

impl ServerTls {
    /// Loads the pair; an error names the `web.tls` key at fault.
    pub fn load(files: TlsFiles) -> Result<ServerTls, CertError> {
        let current = Arc::new(Current(RwLock::new(load_pair(&files)?)));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(CertError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        // Outside a runtime (never in `leo broker`) the listener is installed by `watch`.
        let hup = tokio::runtime::Handle::try_current()
            .ok()
            .and_then(|_| hangups());
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            current,
            files: Arc::new(files),
            hup: Arc::new(std::sync::Mutex::new(hup)),
        })
    }

    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// Loads the files again; on success the next handshakes use the new pair, on failure the
    /// old one stays and the error is returned.
    pub fn reload(&self) -> Result<(), CertError> {
        let pair = load_pair(&self.files)?;
        *self.current.0.write().unwrap_or_else(|p| p.into_inner()) = pair;
        Ok(())
    }

    /// Reloads when the files change or on `SIGHUP`, until `shutdown`.
    pub async fn watch(self, shutdown: CancellationToken) {
        let installed = self.hup.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut hup = installed.or_else(hangups);
        let mut seen = self.fingerprint();
        let mut tick = tokio::time::interval(POLL);
        loop {
            let why = tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => "changed",
                Some(()) = async { hup.as_mut()?.recv().await } => "SIGHUP",
            };
            let now = self.fingerprint();
            if why == "changed" && now == seen {
                continue;
            }
            seen = now;
            match self.reload() {
                Ok(()) => info!(cert = %self.files.cert.display(), why, "TLS certificate reloaded"),
                Err(e) => {
                    warn!(error = %error_chain(&e), why, "the new TLS certificate or key is refused; keeping the old pair")
                }
            }
        }
    }

    fn fingerprint(&self) -> [Option<(u64, u64, SystemTime)>; 2] {
        [stamp(&self.files.cert), stamp(&self.files.key)]
    }
}

/// A `SIGHUP` listener; `None`, logged, when it cannot be installed.
fn hangups() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "cannot install the SIGHUP handler; TLS files reload on change only");
            None
        }
    }
}

/// Inode, size and modification time of a file (following links, as a renewal swaps them).
fn stamp(path: &Path) -> Option<(u64, u64, SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.len(), meta.modified().ok()?))
}

/// Reads and checks one pair: the chain, the key (readable by its owner only), and that they
/// belong together.
fn load_pair(files: &TlsFiles) -> Result<Arc<CertifiedKey>, CertError> {
    let at = |key: &'static str| move |source| CertError::File { key, source };
    let certs = read_certs(&files.cert).map_err(at("cert"))?;
    crate::tokens::check_owner_only(&files.key).map_err(CertError::Readable)?;
    let key = read_key(&files.key).map_err(at("key"))?;
    let pair =
        CertifiedKey::from_der(certs, key, &provider()).map_err(|source| CertError::Mismatch {
            key: files.key.clone(),
            cert: files.cert.clone(),
            source,
        })?;
    Ok(Arc::new(pair))
}
