//! The broker's checks: its config, whether the broker that runs on this home (the holder of
//! `run/broker.lock`) answers on `run/leo.sock`, `run/sidecar.sock` and the TCP address it
//! listens on (which its lock file names: `--port` may differ from `web.port`), and whether it
//! runs this very build.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use std::time::Duration;

use leo_broker::config::Config;
use leo_broker::home::Home;

use super::{Check, Status, VERSION};
use crate::commands::Unreachable;
use crate::commands::api::{Api, GetError};

const AREA: &str = "broker";
/// How long a TCP connect may take.
const CONNECT: Duration = Duration::from_secs(2);
/// How to start the broker, said wherever it is not running.
const START: &str =
    "start it: `leo broker` (same LEO_HOME), or keep it running with `leo service install`";

/// Checks `config.yaml` and returns it when it loads (the defaults when there is none).
pub fn config(home: &Home, checks: &mut Vec<Check>) -> Option<Config> {
    let path = home.config();
    match Config::load(&path) {
        Ok(config) if path.exists() => {
            checks.push(
                Check::new(AREA, "config", Status::Ok)
                    .detail(format!("{} is valid", path.display())),
            );
            Some(config)
        }
        Ok(config) => {
            checks.push(
                Check::new(AREA, "config", Status::Info)
                    .detail(format!("no {}: the defaults apply", path.display())),
            );
            Some(config)
        }
        Err(e) => {
            checks.push(
                Check::new(AREA, "config", Status::Fail)
                    .detail(e.to_string())
                    .fix("correct the file as the message says (docs/configuration.md lists every key)"),
            );
            None
        }
    }
}

/// With a PostgreSQL store: a warning when the database is reached beyond this host without
/// TLS on every connection.
pub fn database(home: &Home, config: Option<&Config>, checks: &mut Vec<Check>) {
    let Some(url) = config.and_then(|c| c.store.postgres_url(&home.config()).ok().flatten()) else {
        return;
    };
    checks.push(
        match leo_broker::cluster::tokens::clear_text_database(&url) {
            Some(warning) => Check::new(AREA, "database tls", Status::Warn)
                .detail(warning)
                .fix(
                    "add sslmode=verify-full (and sslrootcert=PATH of the server's CA) to \
                     store.url; docs/cluster.md says what crosses the connection",
                ),
            None => {
                Check::new(AREA, "database tls", Status::Ok).detail("encrypted, or on this host")
            }
        },
    );
}

/// Whether the broker that runs on this home (the holder of `run/broker.lock`) answers on each
/// of its doors, and which build it runs.
pub fn broker(home: &Home, config: Option<&Config>, checks: &mut Vec<Check>) {
    let api = home.api_socket();
    let holder = leo_broker::home::holder(home);
    let pid = holder
        .as_ref()
        .and_then(|h| h.pid)
        .map(|p| format!(" (pid {p})"))
        .unwrap_or_default();
    match Api::new(home).get::<serde_json::Value>(crate::commands::snapshot::STATUS_ROUTE) {
        Ok(_) => checks.push(Check::new(AREA, "running", Status::Ok).detail(format!(
            "the broker{pid} answers on {} with the operator token",
            api.display()
        ))),
        Err(GetError::Unreachable(u)) if u.not_running() => {
            // A broker that holds the home without answering: starting another is refused.
            let fix = match &u {
                Unreachable::Unanswered { pid, .. } => {
                    format!("wait for it, or stop it (`kill {pid}`), then {START}")
                }
                _ => START.to_owned(),
            };
            checks.push(
                Check::new(AREA, "running", Status::Fail)
                    .detail(u.to_string())
                    .fix(fix),
            );
            return;
        }
        Err(e) => {
            checks.push(
                Check::new(AREA, "running", Status::Fail)
                    .detail(e.to_string())
                    .fix("see the message; `leo status` says the same"),
            );
            return;
        }
    }
    sidecar_socket(&home.sidecar_socket(), checks);
    match holder.as_ref().and_then(|h| h.tcp.map(|tcp| (h, tcp))) {
        Some((h, tcp)) => running_tcp(h, tcp, config, checks),
        None => checks.push(Check::new(AREA, "tcp", Status::Info).detail(format!(
            "{} does not say where the broker listens (a build before the lock file); not checked",
            home.broker_lock().display()
        ))),
    }
    build(&api, checks);
}

fn sidecar_socket(path: &Path, checks: &mut Vec<Check>) {
    let check = match UnixStream::connect(path) {
        Ok(_) => Check::new(AREA, "sidecar socket", Status::Ok)
            .detail(format!("{} accepts connections", path.display())),
        Err(e) => Check::new(AREA, "sidecar socket", Status::Fail)
            .detail(format!("{}: {e}", path.display()))
            .fix(format!("restart the broker; {START}")),
    };
    checks.push(check);
}

/// A TCP address to connect to: a wildcard bind is reached on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::IpAddr::from([127, 0, 0, 1]), addr.port())
    } else {
        addr
    }
}

/// The TCP listener of the broker that runs here, where its lock file says it is (its
/// `--port`, when it was started with one), and what holds `web.port` if that differs.
fn running_tcp(
    holder: &leo_broker::home::Holder,
    tcp: Option<SocketAddr>,
    config: Option<&Config>,
    checks: &mut Vec<Check>,
) {
    let Some(addr) = tcp else {
        checks.push(
            Check::new(AREA, "tcp", Status::Info).detail("web.enabled: false, no TCP listener"),
        );
        return;
    };
    let scheme = if holder.tls { "https" } else { "http" };
    let check = match TcpStream::connect_timeout(&reachable(addr), CONNECT) {
        Ok(_) => Check::new(AREA, "tcp", Status::Ok)
            .detail(format!("{scheme}://{addr} accepts connections")),
        Err(e) => Check::new(AREA, "tcp", Status::Fail)
            .detail(format!("{addr}: {e}"))
            .fix(format!("restart the broker; {START}")),
    };
    checks.push(check);
    let Some(web) = config.map(|c| &c.web).filter(|w| w.enabled && w.port != 0) else {
        return;
    };
    if web.port == addr.port() {
        return;
    }
    let configured = reachable(SocketAddr::new(web.bind, web.port));
    let check = match TcpStream::connect_timeout(&configured, CONNECT) {
        Ok(_) => Check::new(AREA, "web.port", Status::Warn)
            .detail(format!(
                "another process holds {configured} (web.port); this home's broker listens on {addr} (started with --port)"
            ))
            .fix(format!(
                "use {scheme}://{addr} for this home, or stop what holds port {} and restart the broker without --port",
                web.port
            )),
        Err(_) => Check::new(AREA, "web.port", Status::Info).detail(format!(
            "the broker runs with --port {}, not web.port {}",
            addr.port(),
            web.port
        )),
    };
    checks.push(check);
}

/// The running broker's binary, from the peer of `run/leo.sock`, against this one.
fn build(api: &Path, checks: &mut Vec<Check>) {
    let Some(exe) = peer_exe(api) else {
        checks.push(
            Check::new(AREA, "version", Status::Info)
                .detail("cannot tell which binary the broker runs (no /proc here)"),
        );
        return;
    };
    let text = exe.display().to_string();
    if text.ends_with(" (deleted)") {
        checks.push(
            Check::new(AREA, "version", Status::Warn)
                .detail(format!("the broker runs {text}: its binary was replaced since it started"))
                .fix("restart the broker to run the new build (`systemctl --user restart leo` when installed as a service)"),
        );
        return;
    }
    let ours = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::canonicalize(p).ok());
    let version = if ours.as_deref() == Some(exe.as_path()) {
        Some(VERSION.to_owned())
    } else {
        super::harness::version_of(&exe).map(|v| v.version)
    };
    let check = match version {
        Some(v) if v == VERSION => Check::new(AREA, "version", Status::Ok)
            .detail(format!("the broker runs {text}, version {v}, as this leo")),
        Some(v) => Check::new(AREA, "version", Status::Warn)
            .detail(format!(
                "the broker runs {text}, version {v}; this leo is {VERSION}"
            ))
            .fix("restart the broker with the leo you mean to run"),
        None => Check::new(AREA, "version", Status::Info).detail(format!(
            "the broker runs {text}; its version did not answer"
        )),
    };
    checks.push(check);
}

/// The executable of the process listening on `socket` (Linux: `SO_PEERCRED`, `/proc`).
fn peer_exe(socket: &Path) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
        let stream = UnixStream::connect(socket).ok()?;
        let pid = getsockopt(&stream, PeerCredentials).ok()?.pid();
        std::fs::read_link(format!("/proc/{pid}/exe")).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket;
        None
    }
}
