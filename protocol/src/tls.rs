//! The one TLS rule of every Leo client (feature `tls`): which roots a client trusts, how it
//! connects, and what it says when the broker's certificate is refused; and the PEM reading the
//! broker's HTTPS listener uses.
//!
//! `leo-mcp --url`, the Rust SDK (`leo_app::http`, so the `leo` CLI and the bench too) reach a
//! broker on another host through [`Connector`]; written once here, a client cannot trust
//! something another refuses.
//!
//! Decisions, and why:
//! - **Crypto provider: `ring`.** rustls's default, aws-lc-rs, compiles a large C library; a
//!   clean debug build of a crate depending only on `tokio-rustls` took 12.9 s with `ring` and
//!   46.2 s with aws-lc-rs on the shared 2-core build machine (2026-12-04, one after the
//!   other, `nice`d, other builds running). `ring` has every suite TLS 1.2 and 1.3 need. The one
//!   provider is [`provider`]; the broker serves with it too.
//! - **Roots: the system store plus an optional CA file.** The system store
//!   (`rustls-native-certs`) is what codex, Python and curl trust, honours `SSL_CERT_FILE` /
//!   `SSL_CERT_DIR` like them, and follows the host's updates and a company's own CA; a compiled
//!   in list (`webpki-roots`) would go stale with the binary and ignore both. A broker with a
//!   local CA from `leo tls init` is reached with `LEO_CA_FILE` ([`CA_FILE_ENV`]) naming the
//!   CA's PEM file, added to those roots. A system store that cannot be read is not an error
//!   (a slim container has none): the CA file alone is then trusted.
//! - Certificates are checked by rustls's WebPKI verifier, names and expiry included; there is
//!   no switch to turn the check off.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::ClientConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};

pub use tokio_rustls::client::TlsStream;

/// The variable naming a CA file (PEM) a client trusts besides the system store.
pub const CA_FILE_ENV: &str = "LEO_CA_FILE";

/// The ALPN protocol the broker speaks, offered by clients and chosen by the broker.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// A certificate or key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read, or is not PEM.
    #[error("cannot read {}", path.display())]
    Pem {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The file holds no certificate.
    #[error("{} holds no PEM certificate", path.display())]
    NoCertificate { path: PathBuf },
    /// A certificate or key rustls refuses (a CA that does not parse, a key that does not
    /// match its certificate).
    #[error("{what} is refused")]
    Refused {
        what: String,
        #[source]
        source: rustls::Error,
    },
}

/// The crypto provider of every Leo TLS endpoint (see the module doc).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in a PEM file, in order (a server's chain: its own first).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Pem {
        path: path.to_owned(),
        source,
    })
}

/// A client's TLS: its roots and settings, built once and shared by its connections.
#[derive(Clone)]
pub struct Connector {
    inner: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connector")
    }
}

impl Connector {
    /// Trusts the system store and, if given, the certificates of `ca_file`.
    pub fn new(ca_file: Option<&Path>) -> Result<Connector, TlsError> {
        let config = client_config(ca_file)?;
        Ok(Connector {
            inner: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// [`Connector::new`] with the CA file `LEO_CA_FILE` names, if it is set and not empty.
    pub fn from_env() -> Result<Connector, TlsError> {
        let ca = std::env::var_os(CA_FILE_ENV).filter(|v| !v.is_empty());
        Connector::new(ca.as_deref().map(Path::new))
    }

    /// The TLS handshake over `io` with the broker at `host` (a DNS name or an IP address,
    /// brackets allowed, no port). A refused certificate is an `io::Error` whose message says
    /// why and what to do (see [`explain`]).
    pub async fn connect<IO>(&self, host: &str, io: IO) -> io::Result<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(bare.to_owned()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host:?} is not a host name TLS can check"),
            )
        })?;
        self.inner
            .connect(name, io)
            .await
            .map_err(|e| explain(e, host))
    }
}

/// The client settings [`Connector`] uses.
fn client_config(ca_file: Option<&Path>) -> Result<ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "a certificate of the system store was not read");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "system roots");
    if let Some(path) = ca_file {
        for cert in read_certs(path)? {
            roots.add(cert).map_err(|source| TlsError::Refused {
                what: format!("a CA certificate of {}", path.display()),
                source,
            })?;
        }
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Refused {
            what: "the TLS protocol versions".into(),
            source,
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(config)
}

/// A failed handshake with `host`, said so that its reader knows what to fix: an expired
/// certificate, one no trusted CA signed, one for another name, or a peer that does not speak
/// TLS at all. Other errors keep their own message.
pub fn explain(error: io::Error, host: &str) -> io::Error {
    let Some(tls) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return error;
    };
    let why = match tls {
        rustls::Error::InvalidCertificate(cert) => match cert {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "its certificate has expired; renew it (`leo tls init` on the broker's host \
                 makes a new one)"
                    .to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "its certificate is not valid yet; check this host's clock".to_owned()
            }
            CertificateError::UnknownIssuer => format!(
                "its certificate is not signed by a CA this client trusts; set {CA_FILE_ENV} \
                 to the broker's CA file (tls/ca.pem in the broker's LEO_HOME after `leo tls \
                 init`)"
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!(
                    "its certificate is not valid for {host:?}; add the name on the broker's host \
                     (`leo tls init --host {host}`)"
                )
            }
            other => format!("its certificate is refused ({other:?})"),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "it does not speak TLS (is it a plain http:// listener?)".to_owned()
        }
        other => other.to_string(),
    };
    io::Error::new(
        error.kind(),
        format!("TLS with the broker at {host} failed: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("leo-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let err = Connector::new(Some(&missing)).unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = Connector::new(Some(&empty)).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_errors_keep_their_message() {
        let e = explain(io::Error::other("reset"), "h");
        assert_eq!(e.to_string(), "reset");
        let e = explain(
            io::Error::new(
                io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            ),
            "example.org",
        );
        assert!(e.to_string().contains(CA_FILE_ENV), "{e}");
    }
}
