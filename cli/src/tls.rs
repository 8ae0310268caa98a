//! `leo tls init`: working HTTPS in one command for a team without a PKI.
//!
//! It makes a small local CA (once: `tls/ca.pem` and its key `tls/ca.key`) and issues a server
//! certificate from it (`tls/server.pem`, the chain, and `tls/server.key`) for the names a
//! client may use: loopback, `web.allowed_hosts`, a specific `web.bind` and the `--host`s.
//! Clients trust the CA file, so the server certificate can be issued again (a new name, a
//! renewal) without touching any client: running it again keeps the CA and replaces the
//! server pair, which a running broker reloads on its own (`broker::http::tls`).
//!
//! It does not edit `config.yaml` (the operator's file, with their comments): it prints the
//! `web.tls` lines to add, or says that the file already points at these files.
//!
//! Keys are ECDSA P-256 (ring, the one provider of `leo_protocol::tls`); key files are 0600.
//! The CA's issuer is rebuilt from its key and its fixed name ([`ca_params`]), which is all a
//! signature needs, so reading the CA certificate back (an X.509 parser) is not needed.

use std::net::IpAddr;
use std::path::Path;

use clap::Subcommand;
use leo_broker::config::Config;
use leo_broker::error::BrokerError;
use leo_broker::home::{Home, ensure_private_dir, write_atomic};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// How long the CA is valid.
const CA_DAYS: i64 = 3650;
/// How long a server certificate is valid; run `leo tls init` again to renew it.
const SERVER_DAYS: i64 = 365;
/// The CA's subject, fixed so that its issuer can be rebuilt from its key alone.
const CA_NAME: &str = "Leo local CA";

#[derive(Subcommand)]
pub enum TlsCommand {
    /// Create a local CA (kept if it exists) and a server certificate for loopback,
    /// web.allowed_hosts and each --host; print the web.tls lines and how clients trust the CA.
    Init {
        /// Another name the certificate is valid for: a DNS name or an IP address (repeat it).
        #[arg(long = "host", value_name = "NAME", value_parser = certificate_name)]
        hosts: Vec<String>,
    },
}

/// Runs one `leo tls` command; what it says goes to stdout.
pub fn run(home: &Home, command: &TlsCommand) -> Result<String, BrokerError> {
    match command {
        TlsCommand::Init { hosts } => init(home, hosts),
    }
}

fn init(home: &Home, hosts: &[String]) -> Result<String, BrokerError> {
    let config = Config::load(&home.config())?;
    leo_broker::home::prepare(home)?;
    ensure_private_dir(&home.tls())?;
    let names = names(&config, hosts)?;
    let now = OffsetDateTime::now_utc();
    let (ca, created) = ca(home, now)?;
    let key = KeyPair::generate().map_err(|e| failed("make a key", &e))?;
    let mut params = CertificateParams::new(names.clone())
        .map_err(|e| BrokerError::Usage(format!("a certificate name is refused: {e}")))?;
    params
        .distinguished_name
        .push(DnType::CommonName, names[0].clone());
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - Duration::days(1);
    params.not_after = now + Duration::days(SERVER_DAYS);
    let cert = params
        .signed_by(&key, &ca)
        .map_err(|e| failed("sign the server certificate", &e))?;
    let ca_pem = std::fs::read_to_string(home.tls_ca())
        .map_err(|e| BrokerError::io("read", home.tls_ca(), e))?;
    write_atomic(&home.tls_key(), key.serialize_pem().as_bytes())?;
    write_public(&home.tls_cert(), &format!("{}{ca_pem}", cert.pem()))?;
    Ok(report(home, &config, &names, created, params.not_after))
}

/// The names the certificate is for: loopback, a specific `web.bind`, `web.allowed_hosts`,
/// then `--host`s; each once (DNS names without case), each checked.
fn names(config: &Config, hosts: &[String]) -> Result<Vec<String>, BrokerError> {
    let bind = config.web.bind;
    let specific = (!bind.is_loopback() && !bind.is_unspecified()).then(|| bind.to_string());
    let all = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(str::to_owned)
        .chain(specific)
        .chain(config.web.allowed_hosts.iter().cloned())
        .chain(hosts.iter().cloned());
    let mut names: Vec<String> = Vec::new();
    for name in all {
        let name = certificate_name(&name)
            .map_err(|e| BrokerError::Usage(format!("web.allowed_hosts or --host: {e}")))?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// A name a certificate can be for: an IP address (brackets allowed), or a DNS name (labels of
/// letters, digits and `-`, a leading `*.` for a wildcard), lowercased. `--host`'s parser.
pub fn certificate_name(text: &str) -> Result<String, String> {
    let name = text.trim().trim_start_matches('[').trim_end_matches(']');
    if name.parse::<IpAddr>().is_ok() {
        return Ok(name.to_owned());
    }
    let label = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    let rest = name.strip_prefix("*.").unwrap_or(name);
    if name.len() > 253 || !rest.split('.').all(label) {
        return Err(format!("{text:?} is not a DNS name or an IP address"));
    }
    Ok(name.to_ascii_lowercase())
}

/// The local CA: the existing one (its key read back), or a new one written now. `true` when
/// it was created.
fn ca(home: &Home, now: OffsetDateTime) -> Result<(Issuer<'static, KeyPair>, bool), BrokerError> {
    let (cert, key) = (home.tls_ca(), home.tls_ca_key());
    match (cert.exists(), key.exists()) {
        (true, true) => {
            let pem = leo_broker::read_token_file(&key)?;
            let key = KeyPair::from_pem(&pem).map_err(|e| failed("read the CA key", &e))?;
            Ok((Issuer::new(ca_params(), key), false))
        }
        (false, false) => {
            let key = KeyPair::generate().map_err(|e| failed("make the CA key", &e))?;
            let mut params = ca_params();
            params.not_before = now - Duration::days(1);
            params.not_after = now + Duration::days(CA_DAYS);
            let ca = params
                .self_signed(&key)
                .map_err(|e| failed("make the CA", &e))?;
            write_atomic(&home.tls_ca_key(), key.serialize_pem().as_bytes())?;
            write_public(&home.tls_ca(), &ca.pem())?;
            Ok((Issuer::new(params, key), true))
        }
        _ => Err(BrokerError::Usage(format!(
            "only one of {} and {} exists; restore the other, or move both away to make a new CA (every client must then trust the new one)",
            cert.display(),
            key.display()
        ))),
    }
}

/// The CA's name, constraints and uses: what its issuer is rebuilt from.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_NAME);
    name.push(DnType::OrganizationName, "Leo client tools");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// A certificate file: written atomically, readable by all (it holds no secret).
fn write_public(path: &Path, text: &str) -> Result<(), BrokerError> {
    use std::os::unix::fs::PermissionsExt;
    write_atomic(path, text.as_bytes())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| BrokerError::io("set permissions of", path, e))
}

fn failed(what: &str, e: &rcgen::Error) -> BrokerError {
    BrokerError::Usage(format!("cannot {what}: {e}"))
}

/// What `leo tls init` says: the files, the `web.tls` lines, and how each client trusts the CA.
fn report(
    home: &Home,
    config: &Config,
    names: &[String],
    created: bool,
    until: OffsetDateTime,
) -> String {
    let ca = home.tls_ca();
    let ca = ca.display();
    let mut out = if created {
        format!(
            "Created a local CA: {ca} (its key: {}, 0600)\n",
            home.tls_ca_key().display()
        )
    } else {
        format!("Kept the local CA {ca}: clients that trust it keep trusting the new certificate\n")
    };
    out.push_str(&format!(
        "Issued {} (key {}, 0600), valid until {} for: {}\n\n",
        home.tls_cert().display(),
        home.tls_key().display(),
        until.date(),
        names.join(", ")
    ));
    let pointed = config
        .web
        .tls
        .as_ref()
        .map(|t| t.resolved(&home.root))
        .is_some_and(|(c, k)| c == home.tls_cert() && k == home.tls_key());
    if pointed {
        out.push_str(
            "config.yaml's web.tls already names these files: a running broker serves the new \
             certificate within seconds (or at once on SIGHUP).\n",
        );
    } else {
        out.push_str(&format!(
            "Add to {} (under the one web: key), then restart the broker:\n  web:\n    tls:\n      \
             cert: tls/server.pem\n      key: tls/server.key\n",
            home.config().display()
        ));
    }
    out.push_str(&format!(
        "\nTrust the CA on each client (copy {ca} to its host):\n  \
         Claude Code, opencode:      NODE_EXTRA_CA_CERTS={ca}\n  \
         codex:                      SSL_CERT_FILE={ca} (then it trusts this CA alone), or add it to the system store\n  \
         leo-mcp, leo, the SDKs:     LEO_CA_FILE={ca}\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_loopback_then_the_config_then_the_flags_each_once() {
        let config =
            Config::parse("web:\n  bind: 10.0.0.5\n  allowed_hosts: [Box.lan, \"::1\"]\n").unwrap();
        let got = names(&config, &["box.lan".into(), "[fd00::1]".into()]).unwrap();
        assert_eq!(
            got,
            [
                "localhost",
                "127.0.0.1",
                "::1",
                "10.0.0.5",
                "box.lan",
                "fd00::1"
            ]
        );
        let err = names(&config, &["http://x".into()]).unwrap_err();
        assert!(err.to_string().contains("not a DNS name"), "{err}");
        assert_eq!(
            certificate_name("*.Lan.example").as_deref(),
            Ok("*.lan.example")
        );
        for bad in ["", "a..b", "a b", "a_b.c", "http://x", "*"] {
            assert!(certificate_name(bad).is_err(), "{bad:?}");
        }
    }
}
