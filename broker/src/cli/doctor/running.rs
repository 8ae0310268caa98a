//! The broker's checks: its config, whether it runs and answers on `run/leo.sock`,
//! `run/sidecar.sock` and its TCP port, and whether it runs this very build.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leo_broker::config::Config;
use leo_broker::home::Home;

use super::{Check, Status, VERSION};
use crate::cli::api::{Api, GetError};

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

/// Whether the broker runs and answers on each of its doors, and which build it runs.
pub fn broker(home: &Home, config: Option<&Config>, checks: &mut Vec<Check>) {
    let api = home.run().join("leo.sock");
    match Api::new(home).get::<serde_json::Value>(crate::cli::snapshot::STATUS_ROUTE) {
        Ok(_) => checks.push(Check::new(AREA, "running", Status::Ok).detail(format!(
            "answers on {} with the operator token",
            api.display()
        ))),
        Err(GetError::Unreachable(u)) if u.not_running() => {
            checks.push(
                Check::new(AREA, "running", Status::Fail)
                    .detail(u.to_string())
                    .fix(START),
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
    sidecar_socket(&home.run().join("sidecar.sock"), checks);
    if let Some(config) = config {
        tcp(config, checks);
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

fn tcp(config: &Config, checks: &mut Vec<Check>) {
    let web = &config.web;
    if !web.enabled {
        checks.push(
            Check::new(AREA, "tcp", Status::Info).detail("web.enabled: false, no TCP listener"),
        );
        return;
    }
    if web.port == 0 {
        checks.push(
            Check::new(AREA, "tcp", Status::Info).detail(
                "web.port: 0, a free port at each start (its banner names it); not checked",
            ),
        );
        return;
    }
    let ip = if web.bind.is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        web.bind
    };
    let addr = SocketAddr::new(ip, web.port);
    let check = match TcpStream::connect_timeout(&addr, CONNECT) {
        Ok(_) => Check::new(AREA, "tcp", Status::Ok).detail(format!("{addr} accepts connections")),
        Err(e) => Check::new(AREA, "tcp", Status::Fail)
            .detail(format!("{addr}: {e}"))
            .fix("the broker runs with another --port than web.port, or something else holds the port: restart it without --port"),
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
