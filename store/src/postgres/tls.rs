//! TLS to PostgreSQL: `sslmode` and `sslrootcert` in `store.url`, with PostgreSQL's own
//! meanings, over the rustls the broker already uses (`tokio-postgres-rustls`).
//!
//! Why rustls rather than OpenSSL (`postgres-openssl`, `postgres-native-tls`): the broker's
//! listener, its client to a cluster's leader and `leo-mcp --url` are rustls already, with the
//! one crypto provider `leo_protocol::tls` names; a second TLS library would be a C library to
//! link and a second set of rules for which certificate is trusted.
//!
//! The modes, as libpq has them: `disable` (never TLS), `prefer` (TLS if the server offers it,
//! its certificate not checked, else clear text; the default), `require` (always TLS, the
//! certificate not checked, unless `sslrootcert` is given: then as `verify-ca`), `verify-ca`
//! (always TLS, the certificate signed by a trusted CA) and `verify-full` (that, and it names
//! the host connected to). `sslrootcert` is a PEM file of the CAs to trust, or `system` for
//! the system store, which `verify-ca` and `verify-full` use when it is not given.
//! tokio-postgres knows neither `verify-*` nor `sslrootcert`, so both are taken out of the URL
//! here, and the check is the connector's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use leo_protocol::tls::{CertCheck, Verifier};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::PgError;

/// `sslmode`, as PostgreSQL defines it (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    const ALL: [(&'static str, SslMode); 5] = [
        ("disable", SslMode::Disable),
        ("prefer", SslMode::Prefer),
        ("require", SslMode::Require),
        ("verify-ca", SslMode::VerifyCa),
        ("verify-full", SslMode::VerifyFull),
    ];

    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("", |(n, _)| n)
    }

    /// Whether every connection is encrypted (`prefer` may fall back to clear text).
    pub fn always_encrypts(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }

    fn of_tokio(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// What `store.url` says of TLS.
#[derive(Debug, Clone)]
pub struct Tls {
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file, or `system`.
    pub root: Option<String>,
}

/// `url` parsed: the connection's settings (its `sslmode` set) and what it says of TLS.
pub fn parse(url: &str) -> Result<(tokio_postgres::Config, Tls), PgError> {
    let (rest, mode, root) = take_tls_options(url);
    let mode = match mode {
        None => SslMode::Prefer,
        Some(m) => SslMode::ALL
            .iter()
            .find(|(n, _)| *n == m)
            .map(|(_, m)| *m)
            .ok_or_else(|| PgError::SslMode(m.clone()))?,
    };
    let mut config: tokio_postgres::Config = rest.parse().map_err(PgError::Url)?;
    config.ssl_mode(mode.of_tokio());
    Ok((config, Tls { mode, root }))
}

/// `url` without `sslmode` and `sslrootcert`, and their values: in a URL's query
/// (`postgresql://…?sslmode=verify-full`) or as `key=value` words.
fn take_tls_options(url: &str) -> (String, Option<String>, Option<String>) {
    let (mut mode, mut root) = (None, None);
    let mut take = |pair: &str| -> bool {
        match pair.split_once('=') {
            Some(("sslmode", v)) => mode = Some(decode(v)),
            Some(("sslrootcert", v)) => root = Some(decode(v)),
            _ => return false,
        }
        true
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_owned(), None, None);
        };
        let kept: Vec<&str> = query.split('&').filter(|p| !take(p)).collect();
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return (rest, mode, root);
    }
    let kept: Vec<&str> = url.split_whitespace().filter(|p| !take(p)).collect();
    (kept.join(" "), mode, root)
}

/// A URL query's value, its `%XX` escapes decoded.
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The connector of `tls`: `None` for `disable` (clear text only).
pub fn connector(tls: &Tls) -> Result<Option<MakeRustlsConnect>, PgError> {
    let verifier: Arc<dyn ServerCertVerifier> = match (tls.mode, &tls.root) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::Prefer | SslMode::Require, None) => {
            Arc::new(Verifier::new(Lenient { chain: None }))
        }
        (SslMode::VerifyFull, root) => webpki(roots(root.as_deref())?)?,
        (_, root) => Arc::new(Verifier::new(Lenient {
            chain: Some(webpki(roots(root.as_deref())?)?),
        })),
    };
    let config = ClientConfig::builder_with_provider(leo_protocol::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// The CAs `sslrootcert` names: its PEM file, or the system store (`system`, or none given).
fn roots(root: Option<&str>) -> Result<RootCertStore, PgError> {
    let mut roots = RootCertStore::empty();
    match root {
        None | Some("system") => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
        Some(path) => {
            let certs =
                leo_protocol::tls::read_certs(Path::new(path)).map_err(|e| PgError::RootCert {
                    path: PathBuf::from(path),
                    reason: leo_protocol::chain::error_chain(&e),
                })?;
            for cert in certs {
                roots.add(cert).map_err(|e| PgError::RootCert {
                    path: PathBuf::from(path),
                    reason: e.to_string(),
                })?;
            }
        }
    }
    Ok(roots)
}

fn webpki(roots: RootCertStore) -> Result<Arc<WebPkiServerVerifier>, PgError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), leo_protocol::tls::provider())
        .build()
        .map_err(|e| PgError::Tls(e.to_string()))
}

/// The lenient modes, as libpq has them: `prefer` and `require` without a root check no
/// certificate (`chain: None`); `verify-ca` (and `require` with a root) checks the chain
/// against the roots but not the name. The handshake's signatures are checked either way
/// (`leo_protocol::tls::Verifier`).
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl CertCheck for Lenient {
    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }
}

/// Whether `config` reaches a host other than this one (a TCP host that is not a loopback
/// name or address); a unix socket is this host.
pub fn beyond_loopback(config: &tokio_postgres::Config) -> bool {
    config.get_hosts().iter().any(|h| match h {
        tokio_postgres::config::Host::Tcp(name) => {
            let name = name.trim_matches(['[', ']']);
            name != "localhost"
                && !name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        tokio_postgres::config::Host::Unix(_) => false,
    })
}

#[cfg(test)]
mod tests {
    use super::super::Database;
    use super::*;

    #[test]
    fn tls_options_are_taken_out_of_either_form() {
        let (rest, mode, root) = take_tls_options(
            "postgresql://u@h:5/d?sslmode=verify-full&application_name=x&sslrootcert=%2Ftmp%2Fca.pem",
        );
        assert_eq!(rest, "postgresql://u@h:5/d?application_name=x");
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/tmp/ca.pem"));
        let (rest, mode, root) = take_tls_options("host=h dbname=d sslmode=disable");
        assert_eq!(rest, "host=h dbname=d");
        assert_eq!(mode.as_deref(), Some("disable"));
        assert!(root.is_none());
        let (config, tls) = parse("postgresql://u@10.0.0.5/d").unwrap();
        assert_eq!(tls.mode, SslMode::Prefer);
        assert!(beyond_loopback(&config));
        let (config, _) = parse("postgresql://u@127.0.0.1/d?sslmode=require").unwrap();
        assert!(!beyond_loopback(&config));
        let refused = parse("postgresql://u@h/d?sslmode=verify").unwrap_err();
        assert!(refused.to_string().contains("verify-full"), "{refused}");
    }

    /// A CA and a server certificate naming `localhost` only; another CA that signed nothing.
    fn certificates() -> (String, String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca = |name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let cert = params.self_signed(&key).unwrap();
            (params, key, cert)
        };
        let (params, ca_key, ca_cert) = ca("leo test CA");
        let (_, _, other) = ca("another CA");
        let key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["localhost".into()]).unwrap();
        let cert = server
            .signed_by(&key, &Issuer::new(params, ca_key))
            .unwrap();
        (ca_cert.pem(), other.pem(), cert.pem(), key.serialize_pem())
    }

    /// How a connection to `url` ends at start: `Ok` with whether it is encrypted, or the
    /// error as the start would say it.
    async fn reach(url: &str) -> Result<bool, String> {
        let db = Database::open(url).map_err(|e| e.to_string())?;
        db.run(|c| async move {
            let row = c
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .await
                .map_err(PgError::doing("read pg_stat_ssl"))?;
            Ok(row.get::<_, bool>(0))
        })
        .await
        .map_err(|e| leo_protocol::chain::error_chain(&e.at_start()))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_full_connects_and_a_wrong_ca_host_or_clear_text_is_refused_clearly() {
        let Some(server) = leo_testkit::postgres::Throwaway::start().await else {
            return;
        };
        let (ca, other, cert, key) = certificates();
        server.with_tls(&cert, &key).await;
        let dir = tempfile::tempdir().unwrap();
        let (ca_file, other_file) = (dir.path().join("ca.pem"), dir.path().join("other.pem"));
        std::fs::write(&ca_file, ca).unwrap();
        std::fs::write(&other_file, other).unwrap();
        let admin = leo_testkit::postgres::connect(&server.admin_url())
            .await
            .unwrap();
        admin
            .batch_execute("CREATE ROLE leo LOGIN SUPERUSER")
            .await
            .unwrap();
        let port = server.port;
        let url =
            |host: &str, query: String| format!("postgresql://leo@{host}:{port}/postgres?{query}");
        let with = |mode: &str, root: &std::path::Path| {
            format!("sslmode={mode}&sslrootcert={}", root.display())
        };
        assert_eq!(
            reach(&url("localhost", with("verify-full", &ca_file))).await,
            Ok(true)
        );
        // The chain checked, the name not: 127.0.0.1 is not a name of the certificate.
        assert_eq!(
            reach(&url("127.0.0.1", with("verify-ca", &ca_file))).await,
            Ok(true)
        );
        assert_eq!(
            reach(&url("127.0.0.1", "sslmode=require".into())).await,
            Ok(true)
        );
        let wrong_ca = reach(&url("localhost", with("verify-full", &other_file)))
            .await
            .unwrap_err();
        assert!(
            wrong_ca.contains("over TLS") && wrong_ca.contains("sslrootcert"),
            "{wrong_ca}"
        );
        let wrong_host = reach(&url("127.0.0.1", with("verify-full", &ca_file)))
            .await
            .unwrap_err();
        assert!(
            wrong_host.contains("over TLS") && wrong_host.contains("host name"),
            "{wrong_host}"
        );
        let clear = reach(&url("localhost", "sslmode=disable".into()))
            .await
            .unwrap_err();
        assert!(
            clear.contains("no encryption") && clear.contains("sslmode=verify-full"),
            "{clear}"
        );
    }
}
