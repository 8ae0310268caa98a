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
//! - **A pinned certificate is trusted as itself.** A self-signed certificate made the usual way
//!   (`openssl req -x509 …`) is marked a CA, and WebPKI refuses a CA presented as the server's
//!   own certificate (`CaUsedAsEndEntity`) even when that very certificate is the trusted one.
//!   curl, Python, Node and Go accept it, so [`Pinned`] does too, and only that: when the
//!   certificate the broker presents is byte for byte one of `LEO_CA_FILE`'s and WebPKI's
//!   objection is `CaUsedAsEndEntity`, it is accepted with its name still checked, and the
//!   handshake's signatures still checked with the provider's algorithms. An expired or not yet valid pinned certificate
//!   is still refused (WebPKI checks the dates before the CA flag), and a different
//!   self-signed certificate is refused as before.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
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
    /// The file a variable names cannot be used: says the variable, then why.
    #[error("{var}")]
    Variable {
        var: &'static str,
        #[source]
        source: Box<TlsError>,
    },
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
        Connector::new(ca.as_deref().map(Path::new)).map_err(|e| match ca {
            Some(_) => TlsError::Variable {
                var: CA_FILE_ENV,
                source: Box::new(e),
            },
            None => e,
        })
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
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Refused {
            what: "the TLS protocol versions".into(),
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier::new(Pinned::new(ca_file)?)))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(config)
}

/// WebPKI, plus the certificates of the CA file trusted as themselves (see the module doc).
#[derive(Debug)]
struct Pinned {
    /// `None` when there is no root at all.
    webpki: Option<Arc<WebPkiServerVerifier>>,
    /// The certificates of the CA file, as they were read.
    pinned: Vec<CertificateDer<'static>>,
}

impl Pinned {
    /// The system store plus the certificates of `ca_file`, which are also pinned.
    fn new(ca_file: Option<&Path>) -> Result<Pinned, TlsError> {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for error in &native.errors {
            tracing::debug!(%error, "a certificate of the system store was not read");
        }
        let (added, ignored) = roots.add_parsable_certificates(native.certs);
        tracing::debug!(added, ignored, "system roots");
        let mut pinned = Vec::new();
        if let Some(path) = ca_file {
            for cert in read_certs(path)? {
                roots
                    .add(cert.clone())
                    .map_err(|source| TlsError::Refused {
                        what: format!("a CA certificate of {}", path.display()),
                        source,
                    })?;
                pinned.push(cert);
            }
        }
        // No roots at all (a slim container, no CA file) is not an error here: every
        // certificate is then refused as of an unknown issuer, which `explain` says how to fix.
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .ok();
        Ok(Pinned { webpki, pinned })
    }
}

impl CertCheck for Pinned {
    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Err(CertificateError::UnknownIssuer.into());
        };
        let checked =
            webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match checked {
            // Only the CA flag of a certificate that is itself trusted gives way.
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(why)))
                if ca_as_end_entity(&why)
                    && self
                        .pinned
                        .iter()
                        .any(|p| p.as_ref() == end_entity.as_ref()) =>
            {
                let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&cert, server_name)?;
                tracing::debug!("the broker's certificate is pinned by the CA file");
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }
}

/// How a verifier of the workspace checks the server's certificate ([`Verifier`] checks the
/// handshake's signatures, the same for every one).
pub trait CertCheck: std::fmt::Debug + Send + Sync {
    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error>;
}

/// rustls's verifier of a [`CertCheck`]: its check of the certificate, and the handshake's
/// signatures checked with the provider's algorithms.
#[derive(Debug)]
pub struct Verifier<C> {
    check: C,
    algorithms: WebPkiSupportedAlgorithms,
}

impl<C: CertCheck> Verifier<C> {
    pub fn new(check: C) -> Verifier<C> {
        Verifier {
            check,
            algorithms: provider().signature_verification_algorithms,
        }
    }
}

impl<C: CertCheck> ServerCertVerifier for Verifier<C> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        (self.check).check(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// True when WebPKI refused a CA certificate presented as the server's own: how a self-signed
/// certificate of `openssl req -x509` is refused unless pinned.
fn ca_as_end_entity(why: &rustls::OtherError) -> bool {
    matches!(
        why.0.downcast_ref::<webpki::Error>(),
        Some(webpki::Error::CaUsedAsEndEntity)
    )
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
            CertificateError::Other(why) if ca_as_end_entity(why) => format!(
                "its certificate is a self-signed CA certificate (as `openssl req -x509` makes \
                 them) that this client does not trust; set {CA_FILE_ENV} to that very \
                 certificate to trust it"
            ),
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

    /// A self-signed certificate for `names` marked a CA, as `openssl req -x509` makes one, valid
    /// from `from` days to `to` days from now; its PEM and DER.
    fn openssl_like(names: &[&str], from: i64, to: i64) -> (String, CertificateDer<'static>) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let now = time::OffsetDateTime::now_utc();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = now + time::Duration::days(from);
        params.not_after = now + time::Duration::days(to);
        let cert = params.self_signed(&KeyPair::generate().unwrap()).unwrap();
        (cert.pem(), cert.der().clone())
    }

    fn check(v: &Pinned, cert: &CertificateDer<'_>, name: &str) -> Result<(), rustls::Error> {
        let name = ServerName::try_from(name.to_owned()).unwrap();
        CertCheck::check(v, cert, &[], &name, &[], UnixTime::now()).map(drop)
    }

    #[test]
    fn a_pinned_self_signed_ca_is_trusted_as_itself_and_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let (pem, der) = openssl_like(&["localhost", "127.0.0.1"], -1, 30);
        let file = dir.path().join("pinned.pem");
        std::fs::write(&file, &pem).unwrap();
        let v = Pinned::new(Some(&file)).unwrap();
        // WebPKI alone refuses it: a CA presented as the server's own certificate.
        let webpki = v.webpki.as_ref().unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let alone = webpki.verify_server_cert(&der, &[], &name, &[], UnixTime::now());
        assert!(
            format!("{alone:?}").contains("CaUsedAsEndEntity"),
            "{alone:?}"
        );
        // Pinned by the CA file, it is trusted, for its own names only.
        check(&v, &der, "localhost").unwrap();
        check(&v, &der, "127.0.0.1").unwrap();
        let other_name = check(&v, &der, "elsewhere.example").unwrap_err();
        assert!(
            matches!(
                other_name,
                rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{other_name:?}"
        );
        // Another self-signed certificate for the same names is not trusted, nor is the
        // pinned one without the CA file; what is said names the fix.
        let (_, stranger) = openssl_like(&["localhost"], -1, 30);
        let e = check(&v, &stranger, "localhost").unwrap_err();
        let said = explain(io::Error::new(io::ErrorKind::InvalidData, e), "localhost");
        assert!(
            said.to_string().contains("self-signed CA certificate")
                && said.to_string().contains(CA_FILE_ENV),
            "{said}"
        );
        check(&Pinned::new(None).unwrap(), &der, "localhost").unwrap_err();
    }

    #[test]
    fn a_pinned_certificate_out_of_its_dates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (from, to, what) in [(-30, -1, "Expired"), (1, 30, "NotValidYet")] {
            let (pem, der) = openssl_like(&["localhost"], from, to);
            let file = dir.path().join(format!("{what}.pem"));
            std::fs::write(&file, &pem).unwrap();
            let e = check(&Pinned::new(Some(&file)).unwrap(), &der, "localhost").unwrap_err();
            assert!(format!("{e:?}").contains(what), "{e:?}");
        }
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
