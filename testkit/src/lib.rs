//! Test support shared by every crate's integration tests: the real `leo` binary on a temporary
//! `LEO_HOME` and an ephemeral port, plain clients for its three doors (HTTP, SSE, IPC), and an
//! agent played by an rmcp client driving the real `leo-mcp` (`agent`).
//!
//! Nothing here imitates a Leo component: the broker under test is always the built binary.
//! Helpers panic with a message on failure, which is what a test wants.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod agent;
pub mod app;
pub mod cli_home;
pub mod cluster;
pub mod http;
pub mod ipc;
pub mod mcp;
pub mod netns;
pub mod otlp;
pub mod postgres;
pub mod require;
pub mod rng;
pub mod script;
pub mod sse;
pub mod tls;
pub mod wire;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub use http::{Http, Reply};
pub use ipc::Ipc;
pub use script::Script;
pub use sse::{Sse, SseEvent};

/// A generous bound for anything a test waits on.
pub const WAIT: Duration = Duration::from_secs(20);

/// The path of a binary built by this workspace (`leo` of `leo-cli`, `leo-mcp`, `harness-probe`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // A test runs from target/<profile>/deps/, a binary (the bench) from target/<profile>/.
    let dir = exe.parent().expect("exe dir");
    let candidates = [
        dir.join(name),
        dir.parent().map(|d| d.join(name)).unwrap_or_default(),
    ];
    for path in &candidates {
        if path.is_file() {
            return path.clone();
        }
    }
    panic!(
        "{name} is not built next to {}; run the tests with `cargo test --workspace`, or build \
         the binaries first (`cargo build -p leo-cli -p leo-mcp`: `leo` is the leo-cli package's)",
        exe.display()
    );
}

/// A running `leo broker`.
pub struct Broker {
    pub home: tempfile::TempDir,
    pub addr: std::net::SocketAddr,
    child: Option<Child>,
    pub stderr_path: PathBuf,
}

impl Broker {
    /// Starts a broker with no config file.
    pub async fn start() -> Broker {
        Broker::start_with("").await
    }

    /// Starts a broker with `config` as `config.yaml` (empty: no file).
    pub async fn start_with(config: &str) -> Broker {
        let home = tempfile::tempdir().expect("tempdir");
        if !config.is_empty() {
            std::fs::write(home.path().join("config.yaml"), config).unwrap();
        }
        Broker::start_in(home).await
    }

    /// Starts a broker with `config` and `env` in its environment (for settings only tests
    /// change, such as `LEO_MCP_PROGRESS_MS` for `/mcp`).
    pub async fn start_with_env(config: &str, env: &[(&str, &str)]) -> Broker {
        let home = tempfile::tempdir().expect("tempdir");
        if !config.is_empty() {
            std::fs::write(home.path().join("config.yaml"), config).unwrap();
        }
        let spawned = spawn_bin(&bin("leo"), home.path(), &log_level(), None, env).await;
        Broker::around(home, spawned)
    }

    /// Starts a broker serving HTTPS only, with the CA and certificate of `leo tls init`
    /// (`tls/ca.pem` in its home is the CA a client trusts).
    pub async fn start_tls() -> Broker {
        let home = tempfile::tempdir().expect("tempdir");
        tls::tls_init(home.path(), &[]);
        std::fs::write(home.path().join("config.yaml"), tls::TLS_CONFIG).unwrap();
        Broker::start_in(home).await
    }

    /// Starts a broker with `config` whose limit on open files (soft and hard) is `nofile`, as
    /// if its service manager set it: for tests that exhaust descriptors.
    pub async fn start_with_nofile(config: &str, nofile: u64) -> Broker {
        let home = tempfile::tempdir().expect("tempdir");
        if !config.is_empty() {
            std::fs::write(home.path().join("config.yaml"), config).unwrap();
        }
        let spawned = spawn_bin(&bin("leo"), home.path(), &log_level(), Some(nofile), &[]).await;
        Broker::around(home, spawned)
    }

    /// Starts a broker that logs warnings only (for benchmarks).
    pub async fn start_quiet(config: &str) -> Broker {
        Broker::start_quiet_bin(&bin("leo"), config).await
    }

    /// [`Broker::start_quiet`] serving HTTPS with `leo tls init`'s CA and certificate (for the
    /// bench's HTTPS row).
    pub async fn start_quiet_tls() -> Broker {
        let home = tempfile::tempdir().expect("tempdir");
        tls::tls_init(home.path(), &[]);
        std::fs::write(home.path().join("config.yaml"), tls::TLS_CONFIG).unwrap();
        let spawned = spawn_bin(&bin("leo"), home.path(), "warn", None, &[]).await;
        Broker::around(home, spawned)
    }

    /// [`Broker::start_quiet`] with another build's `leo` (the bench's baseline builds).
    pub async fn start_quiet_bin(leo: &Path, config: &str) -> Broker {
        let home = tempfile::tempdir().expect("tempdir");
        if !config.is_empty() {
            std::fs::write(home.path().join("config.yaml"), config).unwrap();
        }
        let spawned = spawn_bin(leo, home.path(), "warn", None, &[]).await;
        Broker::around(home, spawned)
    }

    /// [`Broker::start_quiet_bin`] on an existing home (a bench's instances of a cluster).
    pub async fn start_quiet_in(home: tempfile::TempDir, leo: &Path) -> Broker {
        let spawned = spawn_bin(leo, home.path(), "warn", None, &[]).await;
        Broker::around(home, spawned)
    }

    /// Starts a broker on an existing home (for restarts).
    pub async fn start_in(home: tempfile::TempDir) -> Broker {
        let spawned = spawn(home.path()).await;
        Broker::around(home, spawned)
    }

    /// Starts a broker on an existing home and on TCP port `port` (a restart that agents
    /// reaching it over TCP must find at the same address).
    pub async fn start_in_on(home: tempfile::TempDir, port: u16) -> Broker {
        let spawned = spawn_port(
            Command::new(bin("leo")),
            home.path(),
            &log_level(),
            port,
            &[],
            &[],
        )
        .await;
        Broker::around(home, spawned)
    }

    /// Starts a broker with `config` on `host` (a network namespace, see `netns`), bound to
    /// the host's address.
    pub async fn start_on(host: &netns::Host, config: &str) -> Broker {
        let home = tempfile::tempdir().expect("tempdir");
        Broker::start_in_on_host(home, host, config, 0).await
    }

    /// Starts a broker on `home` (writing `config` unless it is empty) on `host`, bound to the
    /// host's address and `port`.
    pub async fn start_in_on_host(
        home: tempfile::TempDir,
        host: &netns::Host,
        config: &str,
        port: u16,
    ) -> Broker {
        if !config.is_empty() {
            std::fs::write(home.path().join("config.yaml"), config).unwrap();
        }
        let bind = ["--bind".to_owned(), host.addr.to_string()];
        let command = host.command(bin("leo"));
        let spawned = spawn_port(command, home.path(), &log_level(), port, &bind, &[]).await;
        Broker::around(home, spawned)
    }

    /// The broker `spawned` started on `home`, or the panic that says why it did not start.
    fn around(
        home: tempfile::TempDir,
        spawned: Result<(Child, std::net::SocketAddr, PathBuf), String>,
    ) -> Broker {
        let (child, addr, stderr_path) = spawned.unwrap_or_else(|e| panic!("{e}"));
        Broker {
            home,
            addr,
            child: Some(child),
            stderr_path,
        }
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The broker's TCP listener as a URL (`http://127.0.0.1:PORT`), for `leo-mcp --url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn operator_token(&self) -> String {
        read_token(&leo_protocol::home::Home::new(self.home()).operator_token())
    }

    pub fn agent_token(&self) -> String {
        read_token(&leo_protocol::home::Home::new(self.home()).agent_token())
    }

    /// `leo agent add NAME` on this home: NAME's own token, which alone opens its sessions.
    pub fn add_agent(&self, name: &str) -> String {
        self.add_agent_with(name, &[])
    }

    /// [`Broker::add_agent`] with more arguments to `leo agent add` (e.g. `--mode native`).
    pub fn add_agent_with(&self, name: &str, more: &[&str]) -> String {
        let out = std::process::Command::new(bin("leo"))
            .args(["agent", "add", name])
            .args(more)
            .env("LEO_HOME", self.home())
            .output()
            .expect("run leo agent add");
        assert!(out.status.success(), "leo agent add {name}: {out:?}");
        let path = self.home().join(format!("state/agents/{name}.token"));
        read_token(&path)
    }

    /// An HTTP client over TCP with the operator token.
    pub fn http(&self) -> Http {
        Http::tcp(self.addr, Some(self.operator_token()))
    }

    /// An HTTP client over `run/leo.sock` with the operator token.
    pub fn http_unix(&self) -> Http {
        Http::unix(
            leo_protocol::home::Home::new(self.home()).api_socket(),
            Some(self.operator_token()),
        )
    }

    /// A raw IPC connection to `run/sidecar.sock`.
    pub async fn ipc(&self) -> Ipc {
        Ipc::connect(&leo_protocol::home::Home::new(self.home()).sidecar_socket()).await
    }

    /// Sends `signal` (`TERM`, `INT`, `KILL`) and waits for the exit status.
    pub async fn signal(&mut self, signal: &str) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("broker already stopped");
        let pid = child.id().expect("pid").to_string();
        let _ = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid])
            .status();
        tokio::time::timeout(WAIT, child.wait())
            .await
            .expect("broker did not exit")
            .expect("wait")
    }

    /// Sends `signal` (`STOP`, `CONT`…) without waiting for anything.
    pub fn send_signal(&self, signal: &str) {
        let sent = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal}: {sent:?}");
    }

    /// Whether the broker's process still runs (it has not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops the broker with SIGKILL and keeps the home for a restart.
    pub async fn kill_keep_home(mut self) -> tempfile::TempDir {
        self.signal("KILL").await;
        std::mem::replace(&mut self.home, tempfile::tempdir().unwrap())
    }

    /// Stops the broker with SIGTERM (its clean shutdown) and keeps the home for a restart.
    pub async fn stop_keep_home(mut self) -> (std::process::ExitStatus, tempfile::TempDir) {
        let status = self.signal("TERM").await;
        let home = std::mem::replace(&mut self.home, tempfile::tempdir().unwrap());
        (status, home)
    }

    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .and_then(|c| c.id())
            .expect("broker running")
    }

    /// The broker's resident memory, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// What the broker logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

fn read_token(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// Runs `leo broker --port 0` in `home`; returns the child once it prints its address.
/// It logs at `RUST_LOG`, else `debug`, to a file of its own in `home` (`broker-N.stderr`):
/// two brokers started on one home (a refused second start, a restart) never write over
/// each other's log.
pub async fn spawn(home: &Path) -> Result<(Child, std::net::SocketAddr, PathBuf), String> {
    spawn_logging(home, &log_level()).await
}

/// `RUST_LOG`, else `debug`.
fn log_level() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| "debug".into())
}

/// `spawn` with an explicit log filter.
pub async fn spawn_logging(
    home: &Path,
    log: &str,
) -> Result<(Child, std::net::SocketAddr, PathBuf), String> {
    spawn_bin(&bin("leo"), home, log, None, &[]).await
}

/// `spawn_logging` with the `leo` binary at `leo`, its open-file limit set to `nofile` when
/// given (through the shell's `ulimit`, which then `exec`s the broker: same process).
async fn spawn_bin(
    leo: &Path,
    home: &Path,
    log: &str,
    nofile: Option<u64>,
    env: &[(&str, &str)],
) -> Result<(Child, std::net::SocketAddr, PathBuf), String> {
    let command = match nofile {
        Some(n) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(leo);
            c
        }
        None => Command::new(leo),
    };
    spawn_port(command, home, log, 0, &[], env).await
}

/// `spawn_bin` on TCP port `port` (0: any).
/// `command` (the `leo` binary, or what execs it) with `broker --port PORT` and `args`, and
/// `env` added to its environment.
async fn spawn_port(
    mut command: Command,
    home: &Path,
    log: &str,
    port: u16,
    args: &[String],
    env: &[(&str, &str)],
) -> Result<(Child, std::net::SocketAddr, PathBuf), String> {
    static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stderr_path = home.join(format!("broker-{n}.stderr"));
    let stderr = std::fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
    let mut child = command
        .args(["broker", "--port", &port.to_string()])
        .args(args)
        .env("LEO_HOME", home)
        .env("RUST_LOG", log)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start leo: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let rest = line.strip_prefix("leo broker listening on ");
            let rest = rest.and_then(|r| r.strip_prefix("http://").or(r.strip_prefix("https://")));
            if let Some(rest) = rest {
                return rest.trim().parse().ok();
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    let Some(addr) = addr else {
        let _ = child.start_kill();
        let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        return Err(format!("leo broker did not start:\n{log}"));
    };
    // Keep draining stdout so the broker never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, addr, stderr_path))
}

/// The resident memory of process `pid`, in KiB, from `/proc/PID/status`.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Raises this process's soft limit on open files to its hard limit (as the broker does for
/// itself), for a bench that holds thousands of sessions in one process; returns `(soft,
/// hard)` now in force.
pub fn raise_nofile() -> (u64, u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return (hard, hard);
    }
    (soft, hard)
}
