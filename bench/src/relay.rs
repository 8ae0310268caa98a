//! Relay round trip against its baselines, in one run, with one client.
//!
//! Every system is a stdio MCP server that an rmcp client (`client` +
//! `transport-child-process`, as a harness would) launches and calls:
//! - (a) the floor: `leo-bench-floor`, an rmcp stdio server that answers the tools itself;
//! - leo: `leo-mcp --mode native` → the real broker → the Rust app of `crate::app`;
//! - (b) the Python SDK's server over Streamable HTTP, reached through `mcp-proxy <url>`;
//! - (c) the same Python server over stdio.
//!
//! Same tool names, same arguments, same payloads (`leo_bench::payload`), checked on the first
//! answer of each system. Latency: sequential calls on one session. Throughput: N sessions, each
//! its own server process and each sequential, sharing a fixed number of calls.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leo_bench::payload::{self, PAYLOADS, Payload};
use leo_testkit::{Broker, bin, rss_kib};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::report::{Report, pct};
use crate::usage;

/// How much to measure.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Which systems to run (the others are reported as skipped).
    pub systems: Vec<String>,
    /// Which tools the latency rows call (default: all three).
    pub payloads: Vec<String>,
    /// Sequential calls per payload for the latency rows.
    pub calls: usize,
    /// Calls per payload before measuring.
    pub warmup: usize,
    /// Calls shared by the agents of one throughput row.
    pub throughput_calls: usize,
    /// Concurrent agents of each throughput row.
    pub concurrency: Vec<usize>,
    /// Other builds or settings of leo, measured beside the current one (`--baseline`).
    pub variants: Vec<Variant>,
}

/// Another build (or setting) of the broker and `leo-mcp`, whose `leo` and `leo, claim then
/// result` rows are measured in the same run as the current ones, taking turns with them block
/// by block, so that a loaded machine weighs on both alike and their ratio means something.
/// The app is the same in both (this build's `leo-app`); only the relay differs.
#[derive(Debug, Clone)]
pub struct Variant {
    /// What the rows say after `leo@`.
    pub name: String,
    pub leo: PathBuf,
    pub leo_mcp: PathBuf,
    /// The broker's `config.yaml` ("" for none).
    pub config: String,
    /// What it is, for the systems table.
    pub what: String,
    /// How the client reaches the broker.
    pub via: Via,
    /// Instances of a cluster on the database `config` names: the app on the first (the
    /// leader), the agents' `leo-mcp`s on the others' sockets in turn (1: one broker).
    pub instances: usize,
    /// The PostgreSQL server (a URL of a database on it) on which each system of this variant
    /// gets a database of its own (`own_database`); `config` is then written per system.
    pub postgres: Option<String>,
}

/// How a variant's client reaches the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `leo-mcp` on `run/sidecar.sock`, as the `leo` row.
    Socket,
    /// `leo-mcp --url`: the IPC over the broker's TCP listener instead of its socket.
    Url,
    /// No `leo-mcp`: the client speaks MCP over Streamable HTTP to the broker's `/mcp`
    /// (`crate::mcp_http`), over HTTPS to a broker with `web.tls` when `https`.
    Mcp { https: bool },
}

impl Variant {
    /// `NAME=DIR`, DIR holding the `leo` and `leo-mcp` of another build.
    pub fn parse_baseline(arg: &str) -> anyhow::Result<Variant> {
        let Some((name, dir)) = arg.split_once('=') else {
            anyhow::bail!("--baseline {arg:?}: use NAME=DIR");
        };
        let dir = PathBuf::from(dir);
        let (leo, leo_mcp) = (dir.join("leo"), dir.join("leo-mcp"));
        for b in [&leo, &leo_mcp] {
            if !b.is_file() {
                anyhow::bail!("--baseline {name}: {} is not a file", b.display());
            }
        }
        Ok(Variant {
            name: name.to_owned(),
            what: format!("`leo` and `leo-mcp` of {}", dir.display()),
            leo,
            leo_mcp,
            config: String::new(),
            via: Via::Socket,
            instances: 1,
            postgres: None,
        })
    }

    /// This build with every commit waiting for `fsync` (`store.synchronous: full`).
    pub fn sync_full() -> Variant {
        Variant {
            name: "sync-full".into(),
            leo: bin("leo"),
            leo_mcp: bin("leo-mcp"),
            config: "store:\n  synchronous: full\n".into(),
            what: "this build with `store.synchronous: full` (every commit waits for `fsync`)"
                .into(),
            via: Via::Socket,
            instances: 1,
            postgres: None,
        }
    }

    /// This build with `leo-mcp --url`: the sidecar IPC over the TCP listener
    /// (`GET /api/v1/ipc`) instead of `run/sidecar.sock`.
    pub fn url() -> Variant {
        Variant {
            name: "url".into(),
            leo: bin("leo"),
            leo_mcp: bin("leo-mcp"),
            config: String::new(),
            what: "this build with `leo-mcp --url` (the IPC upgraded on the TCP listener, plain \
                   HTTP on loopback)"
                .into(),
            via: Via::Url,
            instances: 1,
            postgres: None,
        }
    }

    /// This build reached at `/mcp` over Streamable HTTP by the bench's own client
    /// (`crate::mcp_http`), without `leo-mcp`; over HTTPS (`web.tls`, `leo tls init`'s
    /// certificate) when `https`.
    pub fn mcp(https: bool) -> Variant {
        let (name, scheme) = if https {
            (
                "mcp-https",
                "HTTPS (`web.tls`, leo tls init's certificate; a handshake is timed only in \
                 the call that reopens a connection the broker closed while idle)",
            )
        } else {
            ("mcp", "plain HTTP")
        };
        Variant {
            name: name.into(),
            leo: bin("leo"),
            leo_mcp: bin("leo-mcp"),
            config: String::new(),
            what: format!(
                "this build's `/mcp`: no `leo-mcp`; the client speaks MCP over Streamable HTTP \
                 (2025-11-25 session, one kept-alive connection, reopened when the broker \
                 closes it while idle, as a harness's HTTP client does) to the broker's TCP \
                 listener, {scheme}, on loopback"
            ),
            via: Via::Mcp { https },
            instances: 1,
            postgres: None,
        }
    }

    /// This build with its live state in a database of the PostgreSQL server at `url`
    /// (`store.url`).
    pub fn postgres(url: &str) -> Variant {
        Variant {
            name: "postgres".into(),
            leo: bin("leo"),
            leo_mcp: bin("leo-mcp"),
            config: String::new(),
            what: "this build with `store.url` naming a PostgreSQL database (one pipelined \
                   round trip per commit)"
                .into(),
            via: Via::Socket,
            instances: 1,
            postgres: Some(url.to_owned()),
        }
    }
}

impl Variant {
    /// This build as three instances of a cluster on a database of the PostgreSQL server at
    /// `url`: the app on the leader, each agent's `leo-mcp` on a follower, so every call
    /// crosses from a follower to the leader and back.
    pub fn cluster(url: &str) -> Variant {
        Variant {
            name: "cluster".into(),
            leo: bin("leo"),
            leo_mcp: bin("leo-mcp"),
            config: String::new(),
            what: "this build as three instances on a PostgreSQL database: the app on the \
                   leader, the agents on the two followers (a call is forwarded both ways)"
                .into(),
            via: Via::Socket,
            instances: 3,
            postgres: Some(url.to_owned()),
        }
    }
}

/// One system of the run: a kind, on this build (`None`) or on one of `Opts::variants`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sys {
    kind: Kind,
    variant: Option<usize>,
}

impl Sys {
    fn label(self, opts: &Opts) -> String {
        match self.variant {
            None => self.kind.label().to_owned(),
            Some(v) => format!("{}@{}", self.kind.key(), opts.variants[v].name),
        }
    }
}

/// A bound for any single step (a call, a listing, a start).
const STEP: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Floor,
    /// The app answers at once: one request per call (`answers_at_once`, `claim: true`).
    Leo,
    /// The same app claiming first, then posting the result: two requests per call.
    LeoClaim,
    PyHttp,
    PyStdio,
    /// The app on the Python SDK (`sdks/python`), answering at once, in a process of its own.
    PySdk,
    /// The app in plain Python (`http.client`, no SDK), claiming then posting the result.
    PyPlain,
    /// The app on the TypeScript SDK (`sdks/typescript`), answering at once.
    TsSdk,
    /// The same tools as a TypeScript MCP server over stdio (`bench/typescript/server.mjs`).
    TsStdio,
}

const KINDS: [Kind; 9] = [
    Kind::Floor,
    Kind::Leo,
    Kind::LeoClaim,
    Kind::PyHttp,
    Kind::PyStdio,
    Kind::PySdk,
    Kind::PyPlain,
    Kind::TsSdk,
    Kind::TsStdio,
];

impl Kind {
    /// The name `--systems` takes.
    fn key(self) -> &'static str {
        match self {
            Kind::Floor => "floor",
            Kind::Leo => "leo",
            Kind::LeoClaim => "leo-claim",
            Kind::PyHttp => "py-http",
            Kind::PyStdio => "py-stdio",
            Kind::PySdk => "py-sdk",
            Kind::PyPlain => "py-plain",
            Kind::TsSdk => "ts-sdk",
            Kind::TsStdio => "ts-stdio",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Floor => "(a) floor",
            Kind::Leo => "leo",
            Kind::LeoClaim => "leo, claim then result",
            Kind::PyHttp => "(b) Python HTTP + mcp-proxy",
            Kind::PyStdio => "(c) Python stdio",
            Kind::PySdk => "leo, Python SDK app",
            Kind::PyPlain => "leo, plain Python app (http.client, claim then result)",
            Kind::TsSdk => "leo, TypeScript SDK app",
            Kind::TsStdio => "(d) TypeScript stdio",
        }
    }
}

/// Where the Python baselines come from.
#[derive(Debug, Clone)]
struct PythonEnv {
    /// The interpreter that runs `server.py`, and what `--check` said about its SDK.
    server: Result<(PathBuf, String), String>,
    /// `mcp-proxy`, and its `--version`.
    proxy: Result<(PathBuf, String), String>,
    script: PathBuf,
}

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// The first of `candidates` that runs `args` successfully, with its first line of output.
fn probe(candidates: &[PathBuf], args: &[&str], what: &str) -> Result<(PathBuf, String), String> {
    let mut failures = Vec::new();
    for path in candidates {
        match std::process::Command::new(path)
            .args(args)
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => {
                let text = String::from_utf8_lossy(&out.stdout);
                let line = text.lines().next().unwrap_or_default().trim().to_owned();
                return Ok((path.clone(), line));
            }
            Ok(out) => failures.push(format!(
                "{} failed: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or_default()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    let why = if failures.is_empty() {
        "not found".to_owned()
    } else {
        failures.join("; ")
    };
    Err(format!("{what}: {why} (run bench/python/setup.sh)"))
}

impl PythonEnv {
    /// `LEO_BENCH_PYTHON` / `LEO_BENCH_MCP_PROXY`, else the venvs of `bench/python/setup.sh`,
    /// else `python3` / `mcp-proxy` on `PATH`.
    fn find(wanted: bool) -> PythonEnv {
        let dir = python_dir();
        let script = dir.join("server.py");
        if !wanted {
            let no = || Err("not in --systems".to_owned());
            return PythonEnv {
                server: no(),
                proxy: no(),
                script,
            };
        }
        let mut pythons: Vec<PathBuf> = std::env::var_os("LEO_BENCH_PYTHON")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        pythons.push(dir.join(".venv/server/bin/python"));
        pythons.push(PathBuf::from("python3"));
        let script_arg = script.to_string_lossy().into_owned();
        let server = probe(
            &pythons,
            &[&script_arg, "--check"],
            "Python with the mcp SDK",
        );
        let mut proxies: Vec<PathBuf> = std::env::var_os("LEO_BENCH_MCP_PROXY")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        proxies.push(dir.join(".venv/proxy/bin/mcp-proxy"));
        proxies.push(PathBuf::from("mcp-proxy"));
        let proxy = probe(&proxies, &["--version"], "mcp-proxy");
        PythonEnv {
            server,
            proxy,
            script,
        }
    }
}

/// `LEO_BENCH_NODE`, else `node` on `PATH`.
fn node() -> PathBuf {
    std::env::var_os("LEO_BENCH_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "node".into())
}

/// The tools of every system as `[{name, description, input_schema, content}]`, for the apps
/// and servers that are not Rust, so they answer with the same bytes.
fn write_tools(dir: &Path) -> Result<PathBuf, String> {
    let tools: Vec<Value> = PAYLOADS
        .iter()
        .map(|p| {
            json!({"name": p.tool, "description": p.description(),
                   "input_schema": payload::input_schema(), "content": p.content()})
        })
        .collect();
    let path = dir.join("tools.json");
    std::fs::write(&path, Value::Array(tools).to_string()).map_err(|e| e.to_string())?;
    Ok(path)
}

/// A broker and the Python or TypeScript SDK app on it, once the app says it serves.
async fn start_sdk_app(kind: Kind, dir: &Path) -> Result<Backend, String> {
    use tokio::io::AsyncBufReadExt;
    let tools = write_tools(dir)?;
    let broker = Broker::start_quiet("").await;
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = if matches!(kind, Kind::PySdk | Kind::PyPlain) {
        let python = std::env::var_os("LEO_BENCH_SDK_PYTHON").unwrap_or_else(|| "python3".into());
        let mut cmd = Command::new(python);
        let script = if kind == Kind::PySdk {
            "python/sdk_app.py"
        } else {
            "python/plain_app.py"
        };
        cmd.arg(here.join(script)).env("LEO_URL", broker.url());
        cmd
    } else {
        let mut cmd = Command::new(node());
        cmd.arg(here.join("typescript/sdk-app.mjs"));
        cmd
    };
    let mut app = cmd
        .arg(&tools)
        .env("LEO_HOME", broker.home())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log_file(dir, &format!("{kind:?}-app"))?)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("skipped: cannot start the {} ({e})", kind.label()))?;
    let stdout = app.stdout.take().ok_or("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    match tokio::time::timeout(STEP, lines.next_line()).await {
        Ok(Ok(Some(line))) if line.trim() == "serving" => Ok(Backend::AppProcess { broker, app }),
        other => Err(format!("the {} did not start: {other:?}", kind.label())),
    }
}

/// A system ready to take sessions.
enum Backend {
    Floor,
    Leo {
        broker: Broker,
        /// Followers of `broker` in a cluster: the agents' instances, in turn.
        followers: Vec<Broker>,
        /// This build's, or a variant's.
        leo_mcp: PathBuf,
        /// How the client reaches the broker.
        via: Via,
        /// Stops when dropped.
        _app: crate::app::Running,
        /// The system's own database on a PostgreSQL variant's server, dropped after the
        /// brokers (fields drop in order).
        _database: Option<leo_testkit::postgres::Database>,
    },
    PyHttp {
        server: Child,
        proxy: PathBuf,
        url: String,
    },
    PyStdio {
        python: PathBuf,
        script: PathBuf,
    },
    /// The broker and an SDK app in a process of its own.
    AppProcess {
        broker: Broker,
        app: Child,
    },
    TsStdio {
        node: PathBuf,
        tools: PathBuf,
    },
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Backend::PyHttp { server, .. } | Backend::AppProcess { app: server, .. } = self {
            let _ = server.start_kill();
        }
    }
}

impl Backend {
    async fn start(
        kind: Kind,
        variant: Option<&Variant>,
        py: &PythonEnv,
        dir: &Path,
    ) -> Result<Backend, String> {
        match kind {
            Kind::Floor => Ok(Backend::Floor),
            Kind::Leo | Kind::LeoClaim => Backend::start_leo(kind, variant).await,
            Kind::PyHttp => Backend::start_py_http(py, dir).await,
            Kind::PyStdio => {
                let (python, _) = py.server.clone().map_err(|e| format!("skipped: {e}"))?;
                Ok(Backend::PyStdio {
                    python,
                    script: py.script.clone(),
                })
            }
            Kind::PySdk | Kind::PyPlain | Kind::TsSdk => start_sdk_app(kind, dir).await,
            Kind::TsStdio => {
                let module = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("typescript/node_modules/@modelcontextprotocol/sdk/package.json");
                if !module.is_file() {
                    return Err(
                        "skipped: the TypeScript MCP SDK is not installed (npm ci --prefix bench/typescript)"
                            .into(),
                    );
                }
                Ok(Backend::TsStdio {
                    node: node(),
                    tools: write_tools(dir)?,
                })
            }
        }
    }

    /// The broker (this build or a baseline's) and the bench app on it.
    async fn start_leo(kind: Kind, variant: Option<&Variant>) -> Result<Backend, String> {
        let mut database = None;
        let (broker, leo_mcp) = match variant {
            None => (Broker::start_quiet("").await, bin("leo-mcp")),
            Some(v) if v.via == (Via::Mcp { https: true }) => {
                (Broker::start_quiet_tls().await, v.leo_mcp.clone())
            }
            Some(v) => {
                let config = match v.postgres.as_deref() {
                    Some(url) => database.insert(own_database(url).await?).config(),
                    None => v.config.clone(),
                };
                (
                    Broker::start_quiet_bin(&v.leo, &config).await,
                    v.leo_mcp.clone(),
                )
            }
        };
        let tools = PAYLOADS
            .iter()
            .map(|p| crate::app::BenchTool {
                name: p.tool.to_owned(),
                description: p.description(),
                schema: payload::input_schema(),
                content: p.content(),
            })
            .collect();
        let at_once = kind == Kind::Leo;
        let app = crate::app::serve(broker.home(), "bench", tools, at_once)
            .await
            .map_err(|e| e.to_string())?;
        let followers = match variant {
            Some(v) if v.instances > 1 => followers(&broker, v).await?,
            _ => Vec::new(),
        };
        Ok(Backend::Leo {
            broker,
            followers,
            leo_mcp,
            via: variant.map_or(Via::Socket, |v| v.via),
            _app: app,
            _database: database,
        })
    }

    /// The official Python MCP server over HTTP, reached through mcp-proxy.
    async fn start_py_http(py: &PythonEnv, dir: &Path) -> Result<Backend, String> {
        let (python, _) = py.server.clone().map_err(|e| format!("skipped: {e}"))?;
        let (proxy, _) = py.proxy.clone().map_err(|e| format!("skipped: {e}"))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let server = Command::new(&python)
            .arg(&py.script)
            .args(["--transport", "http", "--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(dir, "python-http-server")?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the Python server: {e}"))?;
        let deadline = Instant::now() + STEP;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err("the Python HTTP server did not listen".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Backend::PyHttp {
            server,
            proxy,
            url: format!("http://127.0.0.1:{port}/mcp"),
        })
    }

    /// How session `i` is opened: the `/mcp` client, or the stdio server the client launches.
    fn opener(&self, i: usize) -> Opener {
        match self {
            Backend::Leo {
                broker,
                via: Via::Mcp { https },
                ..
            } => Opener::Http(crate::mcp_http::Target {
                addr: broker.addr,
                ca: https.then(|| leo_testkit::tls::ca_file(broker.home())),
                token: broker.agent_token(),
                agent: format!("bench-{i}"),
            }),
            _ => Opener::Stdio(self.command(i)),
        }
    }

    /// The stdio server the client launches for session `i`.
    fn command(&self, i: usize) -> Command {
        match self {
            Backend::Floor => Command::new(bin("leo-bench-floor")),
            Backend::Leo {
                broker,
                followers,
                leo_mcp,
                via,
                ..
            } => {
                let on = followers.get(i % followers.len().max(1)).unwrap_or(broker);
                leo_mcp_command(leo_mcp, on, i, *via == Via::Url)
            }
            Backend::AppProcess { broker, .. } => {
                leo_mcp_command(&bin("leo-mcp"), broker, i, false)
            }
            Backend::PyHttp { proxy, url, .. } => {
                let mut cmd = Command::new(proxy);
                cmd.args([
                    "--transport",
                    "streamablehttp",
                    "--log-level",
                    "WARNING",
                    url,
                ]);
                cmd
            }
            Backend::PyStdio { python, script } => {
                let mut cmd = Command::new(python);
                cmd.arg(script).args(["--transport", "stdio"]);
                cmd
            }
            Backend::TsStdio { node, tools } => {
                let mut cmd = Command::new(node);
                cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("typescript/server.mjs"))
                    .arg(tools);
                cmd
            }
        }
    }

    /// Processes besides the sessions' own whose memory counts (the Python HTTP server).
    fn server_pid(&self) -> Option<u32> {
        match self {
            Backend::Leo { broker, .. } | Backend::AppProcess { broker, .. } => Some(broker.pid()),
            Backend::PyHttp { server, .. } => server.id(),
            _ => None,
        }
    }
}

/// A database of its own on the PostgreSQL server at `url`, for one system of a variant: the
/// `leo` and `leo, claim then result` rows must not share one, or the second system's broker
/// would join the first's cluster as a follower and its rows measure a forwarded call.
async fn own_database(url: &str) -> Result<leo_testkit::postgres::Database, String> {
    let server = leo_testkit::postgres::Server::at(url)
        .await
        .ok_or_else(|| format!("no PostgreSQL answers at {url}"))?;
    Ok(server.database().await)
}

/// `v.instances - 1` followers of `leader`, each on a home with its config and tokens, once
/// each forwards to it.
async fn followers(leader: &Broker, v: &Variant) -> Result<Vec<Broker>, String> {
    let id = leo_testkit::cluster::instance_id(leader.home());
    let mut out = Vec::new();
    for _ in 1..v.instances {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        leo_testkit::cluster::copy_home(leader.home(), home.path());
        let follower = Broker::start_quiet_in(home, &v.leo).await;
        let deadline = Instant::now() + STEP;
        while leo_testkit::cluster::leader(&follower.http())
            .await
            .as_ref()
            != Some(&id)
        {
            if Instant::now() > deadline {
                return Err("a follower never forwarded to the leader".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        out.push(follower);
    }
    Ok(out)
}

/// `leo-mcp` (this build's or a variant's) as session `i` of `broker`'s agents, on the socket
/// or (`over_tcp`) with `--url` on the TCP listener.
fn leo_mcp_command(leo_mcp: &Path, broker: &Broker, i: usize, over_tcp: bool) -> Command {
    let mut cmd = Command::new(leo_mcp);
    cmd.args(["--agent", &format!("bench-{i}"), "--mode", "native"])
        .env("LEO_HOME", broker.home())
        .env("LEO_MCP_LOG", "warn");
    if over_tcp {
        cmd.env("LEO_URL", broker.url())
            .env("LEO_AGENT_TOKEN", broker.agent_token());
    }
    cmd
}

fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::File::create(dir.join(format!("{name}.stderr"))).map_err(|e| e.to_string())
}

/// How a session is opened.
enum Opener {
    /// A stdio server process, launched by the rmcp client as a harness launches one.
    Stdio(Command),
    /// The bench's Streamable HTTP client on the broker's `/mcp`.
    Http(crate::mcp_http::Target),
}

/// The client of one session.
enum Client {
    Stdio(RunningService<RoleClient, ()>),
    /// One request at a time, as a harness sends a turn's calls.
    Http(tokio::sync::Mutex<crate::mcp_http::McpHttp>),
}

/// One client session: on its own server process, or over HTTP to `/mcp` (no process).
struct Session {
    client: Client,
    pid: Option<u32>,
}

impl Session {
    async fn open(opener: Opener, stderr: std::fs::File) -> Result<Session, String> {
        let session = match opener {
            Opener::Stdio(cmd) => Session::spawn(cmd, stderr).await?,
            Opener::Http(target) => {
                let client = tokio::time::timeout(STEP, crate::mcp_http::McpHttp::open(&target))
                    .await
                    .map_err(|_| "initialize timed out".to_owned())??;
                Session {
                    client: Client::Http(tokio::sync::Mutex::new(client)),
                    pid: None,
                }
            }
        };
        session.wait_tools().await?;
        Ok(session)
    }

    async fn spawn(cmd: Command, stderr: std::fs::File) -> Result<Session, String> {
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| format!("cannot start the server: {e}"))?;
        let pid = transport.id();
        let client = tokio::time::timeout(STEP, ().serve(transport))
            .await
            .map_err(|_| "initialize timed out".to_owned())?
            .map_err(|e| format!("initialize failed: {e}"))?;
        Ok(Session {
            client: Client::Stdio(client),
            pid,
        })
    }

    /// The names of the tools listed now.
    async fn tool_names(&self) -> Result<Vec<String>, String> {
        let listed = async {
            match &self.client {
                Client::Stdio(c) => c
                    .list_all_tools()
                    .await
                    .map(|tools| tools.iter().map(|t| t.name.to_string()).collect())
                    .map_err(|e| format!("tools/list failed: {e}")),
                Client::Http(c) => c.lock().await.tool_names().await,
            }
        };
        tokio::time::timeout(STEP, listed)
            .await
            .map_err(|_| "tools/list timed out".to_owned())?
    }

    /// Lists tools until every bench tool is there (leo-mcp shows them once the broker has).
    async fn wait_tools(&self) -> Result<(), String> {
        let deadline = Instant::now() + STEP;
        loop {
            let tools = self.tool_names().await?;
            if PAYLOADS.iter().all(|p| tools.iter().any(|t| t == p.tool)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("tools never listed; last {tools:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn call(&self, tool: &str) -> Result<CallToolResult, String> {
        let called = async {
            match &self.client {
                Client::Stdio(c) => {
                    let params = CallToolRequestParams::new(tool.to_owned())
                        .with_arguments(payload::arguments());
                    c.call_tool(params)
                        .await
                        .map_err(|e| format!("{tool}: tools/call failed: {e}"))
                }
                Client::Http(c) => {
                    let args = Value::Object(payload::arguments());
                    let result = c.lock().await.call(tool, args).await?;
                    serde_json::from_value(result).map_err(|e| format!("{tool}: the result: {e}"))
                }
            }
        };
        let result = tokio::time::timeout(STEP, called)
            .await
            .map_err(|_| format!("{tool}: tools/call timed out"))??;
        if result.is_error == Some(true) || result.content.is_empty() {
            return Err(format!("{tool}: tool error: {:?}", result.content));
        }
        Ok(result)
    }

    /// Checks that every tool answers with exactly the bench's payload.
    async fn verify(&self) -> Result<(), String> {
        for p in PAYLOADS {
            let result = self.call(p.tool).await?;
            let got = serde_json::to_value(&result.content).map_err(|e| e.to_string())?;
            if got != p.content() {
                let got = got.to_string();
                return Err(format!(
                    "{}: the content differs from the bench payload ({} bytes, starts {:?})",
                    p.tool,
                    got.len(),
                    &got[..got.len().min(120)]
                ));
            }
        }
        Ok(())
    }

    fn rss_kib(&self) -> Option<u64> {
        self.pid.map(rss_kib)
    }

    async fn close(self) {
        let closing = async {
            match self.client {
                Client::Stdio(c) => {
                    let _ = c.cancel().await;
                }
                Client::Http(c) => {
                    let reconnects = c.into_inner().close().await;
                    if reconnects > 0 {
                        eprintln!(
                            "  /mcp session: {reconnects} new connection(s) after the broker closed an idle one"
                        );
                    }
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), closing).await;
    }
}

/// Latency of one payload, in microseconds.
#[derive(Debug, Clone, Copy)]
struct Latency {
    p50: u64,
    p99: u64,
}

/// CPU per call of the processes of one system, over one payload's latency run.
#[derive(Debug, Clone)]
struct Cost {
    /// (process, CPU µs per call, context switches per call)
    per_process: Vec<(&'static str, f64, f64)>,
}

/// The processes a system's calls run through, besides the client's own.
fn cost_processes(
    kind: Kind,
    session: Option<u32>,
    server: Option<u32>,
) -> Vec<(&'static str, u32)> {
    let me = std::process::id();
    let (session_name, server_name, me_name) = match kind {
        Kind::Floor => ("floor server", "", "bench (client)"),
        Kind::Leo | Kind::LeoClaim => ("leo-mcp", "broker", "bench (client + app)"),
        Kind::PyHttp => ("mcp-proxy", "Python HTTP server", "bench (client)"),
        Kind::PyStdio => ("Python stdio server", "", "bench (client)"),
        Kind::PySdk | Kind::PyPlain | Kind::TsSdk => ("leo-mcp", "broker", "bench (client)"),
        Kind::TsStdio => ("TypeScript stdio server", "", "bench (client)"),
    };
    let mut out = Vec::new();
    if let Some(pid) = session {
        out.push((session_name, pid));
    }
    if let Some(pid) = server {
        out.push((server_name, pid));
    }
    out.push((me_name, me));
    out
}

/// What the leo path costs without `leo-mcp`, measured beside it.
#[derive(Debug, Default)]
struct Breakdown {
    /// An IPC client speaking leo-mcp's frames → broker → app → result frame.
    ipc: Vec<(Payload, Latency)>,
    /// One keep-alive HTTP POST to the broker (a claim it refuses at once), over TCP and over
    /// `run/leo.sock`.
    http_post: Option<Latency>,
    unix_post: Option<Latency>,
    /// The same POST over HTTPS, to a broker of the same build with `web.tls`.
    https_post: Option<Latency>,
}

/// What one system measured; `Err` is the reason it could not (or `skipped: …`).
#[derive(Debug, Default)]
struct Measured {
    latency: Vec<(Payload, Latency)>,
    cost: Vec<(Payload, Cost)>,
    breakdown: Breakdown,
    throughput: Vec<(usize, Result<f64, String>)>,
    /// The session's server process: idle after listing, then after the latency runs.
    rss_idle: Option<u64>,
    rss_after: Option<u64>,
    /// The broker or the Python HTTP server, after the runs.
    rss_server: Option<u64>,
    /// The live store's commits (PostgreSQL round trips) per ended call, over the latency
    /// runs, from the (leading) broker's `/metrics`.
    commits_per_call: Option<f64>,
}

/// How many blocks each latency row is cut into. The systems take turns block by block, so a
/// machine that gets slower or faster during the run (a VM's neighbours) weighs on every system
/// alike instead of on whichever ran at that moment.
const ROUNDS: usize = 20;

/// A system up for the latency rows: its backend, one session, and what it measured so far.
struct Live {
    kind: Kind,
    /// What its rows say (`leo@NAME` for a variant).
    label: String,
    backend: Backend,
    session: Session,
    procs: Vec<(&'static str, u32)>,
    m: Measured,
    /// The current payload's samples (µs) and each process's usage over its blocks.
    samples: Vec<u64>,
    used: Vec<Option<usage::Usage>>,
}

impl Live {
    async fn start(
        sys: Sys,
        opts: &Opts,
        py: &PythonEnv,
        dir: &Path,
        next: &mut usize,
    ) -> Result<Live, String> {
        let kind = sys.kind;
        let variant = sys.variant.map(|v| &opts.variants[v]);
        let backend = Backend::start(kind, variant, py, dir).await?;
        let stderr = log_file(dir, &format!("{kind:?}-{}-latency", *next))?;
        let session = Session::open(backend.opener(*next), stderr).await?;
        *next += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let m = Measured {
            rss_idle: session.rss_kib(),
            ..Measured::default()
        };
        session.verify().await?;
        let procs = cost_processes(kind, session.pid, backend.server_pid());
        Ok(Live {
            kind,
            label: sys.label(opts),
            backend,
            session,
            procs,
            m,
            samples: Vec::new(),
            used: Vec::new(),
        })
    }

    /// `n` sequential calls of `p`, timed, with the usage of every process over them.
    async fn block(&mut self, p: Payload, n: usize) -> Result<(), String> {
        let before: Vec<_> = self.procs.iter().map(|(_, pid)| usage::of(*pid)).collect();
        for _ in 0..n {
            let t = Instant::now();
            self.session.call(p.tool).await?;
            self.samples.push(t.elapsed().as_micros() as u64);
        }
        let after = self.procs.iter().map(|(_, pid)| usage::of(*pid));
        let used: Vec<_> = after.zip(before).map(|(a, b)| Some(a? - b?)).collect();
        if self.used.is_empty() {
            self.used = used;
        } else {
            for (total, u) in self.used.iter_mut().zip(used) {
                *total = match (*total, u) {
                    (Some(t), Some(u)) => Some(usage::Usage {
                        cpu_us: t.cpu_us + u.cpu_us,
                        switches: t.switches + u.switches,
                    }),
                    _ => None,
                };
            }
        }
        Ok(())
    }

    /// Closes payload `p`'s row: its percentiles and CPU per call.
    fn end_payload(&mut self, p: Payload) {
        let n = self.samples.len().max(1) as f64;
        let per_process = self
            .procs
            .iter()
            .zip(std::mem::take(&mut self.used))
            .filter_map(|((name, _), used)| {
                let used = used?;
                Some((*name, used.cpu_us as f64 / n, used.switches as f64 / n))
            })
            .collect();
        self.m.cost.push((p, Cost { per_process }));
        let mut samples = std::mem::take(&mut self.samples);
        samples.sort_unstable();
        let lat = Latency {
            p50: pct(&samples, 0.50),
            p99: pct(&samples, 0.99),
        };
        eprintln!(
            "  {} {}: p50 {} µs, p99 {} µs",
            self.label, p.label, lat.p50, lat.p99
        );
        self.m.latency.push((p, lat));
    }

    /// After the latency rows: memory and the breakdown (this build's leo); the backend stays
    /// up for the throughput rows.
    async fn finish(self, opts: &Opts, variant: bool) -> Result<(Backend, Measured), String> {
        let Live {
            kind,
            backend,
            session,
            mut m,
            ..
        } = self;
        m.rss_after = session.rss_kib();
        session.close().await;
        if let Backend::Leo { broker, .. } = &backend {
            m.commits_per_call = commits_per_call(broker).await;
        }
        if let (Kind::Leo, false, Backend::Leo { broker, .. }) = (kind, variant, &backend) {
            m.breakdown = breakdown(broker, opts).await?;
        }
        Ok((backend, m))
    }
}

/// `leo_store_commits_total` ÷ the sum of `leo_calls_total` on `broker`'s `/metrics`.
async fn commits_per_call(broker: &Broker) -> Option<f64> {
    let page = broker.http().get("/metrics").await;
    let text = page.body.as_str()?;
    let sum = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let calls = sum("leo_calls_total");
    (calls > 0.0).then(|| sum("leo_store_commits_total") / calls)
}

/// The systems of the run in the order they take turns: each variant right after this build's
/// row of the same kind, so the two run back to back.
fn systems(opts: &Opts, wanted: &impl Fn(Kind) -> bool) -> Vec<(Sys, bool)> {
    let mut out = Vec::new();
    for kind in KINDS {
        out.push((
            Sys {
                kind,
                variant: None,
            },
            wanted(kind),
        ));
        if matches!(kind, Kind::Leo | Kind::LeoClaim) && wanted(kind) {
            for v in 0..opts.variants.len() {
                let variant = Some(v);
                out.push((Sys { kind, variant }, true));
            }
        }
    }
    out
}

/// Every wanted system up at once, then the latency rows with the systems taking turns block
/// by block, then the breakdown, then each throughput row with the systems one after another.
async fn measure_all(
    opts: &Opts,
    py: &PythonEnv,
    dir: &Path,
    wanted: impl Fn(Kind) -> bool,
) -> Vec<(Sys, Result<Measured, String>)> {
    let mut next = 0;
    let mut lives: Vec<(Sys, Result<Live, String>)> = Vec::new();
    for (sys, want) in systems(opts, &wanted) {
        if !want {
            lives.push((sys, Err("skipped: not in --systems".to_owned())));
            continue;
        }
        eprintln!("relay: starting {}", sys.label(opts));
        let live = Live::start(sys, opts, py, dir, &mut next).await;
        if let Err(e) = &live {
            eprintln!("  {}: {e}", sys.label(opts));
        }
        lives.push((sys, live));
    }
    latency_rows(opts, &mut lives).await;
    let mut ready = Vec::new();
    for (sys, live) in lives {
        let r = match live {
            Ok(l) => l.finish(opts, sys.variant.is_some()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &r {
            eprintln!("  {}: {e}", sys.label(opts));
        }
        ready.push((sys, r));
    }
    for &c in &opts.concurrency {
        for (sys, r) in &mut ready {
            if let Ok((backend, m)) = r {
                let t = throughput(backend, c, opts.throughput_calls, dir, &mut next).await;
                match &t {
                    Ok(rate) => eprintln!("  {} {c} agents: {rate:.0} calls/s", sys.label(opts)),
                    Err(e) => eprintln!("  {} {c} agents: {e}", sys.label(opts)),
                }
                m.throughput.push((c, t));
            }
        }
    }
    ready
        .into_iter()
        .map(|(sys, r)| {
            let r = r.map(|(backend, mut m)| {
                m.rss_server = backend.server_pid().map(rss_kib);
                m
            });
            (sys, r)
        })
        .collect()
}

/// The latency rows: per payload, a warm-up, then `ROUNDS` blocks with the systems taking turns,
/// in an order that rotates by one each round.
async fn latency_rows(opts: &Opts, lives: &mut [(Sys, Result<Live, String>)]) {
    let chosen = PAYLOADS
        .into_iter()
        .filter(|p| opts.payloads.is_empty() || opts.payloads.iter().any(|t| t == p.tool));
    for p in chosen {
        eprintln!("relay: latency of {}, systems taking turns", p.label);
        for (_, live) in lives.iter_mut() {
            if let Ok(l) = live {
                for _ in 0..opts.warmup {
                    if let Err(e) = l.session.call(p.tool).await {
                        *live = Err(e);
                        break;
                    }
                }
            }
        }
        let rounds = ROUNDS.min(opts.calls.max(1));
        for round in 0..rounds {
            let n = opts.calls / rounds + usize::from(round < opts.calls % rounds);
            // Each round starts one system later, so no system always follows the same one
            // (whose processes just had the caches and the cores).
            let count = lives.len();
            for k in 0..count {
                let (sys, live) = &mut lives[(k + round) % count];
                if let Ok(l) = live
                    && let Err(e) = l.block(p, n).await
                {
                    eprintln!("  {}: {e}", sys.label(opts));
                    *live = Err(e);
                }
            }
        }
        for (_, live) in lives.iter_mut() {
            if let Ok(l) = live {
                l.end_payload(p);
            }
        }
    }
}

/// Round trips of a POST the broker refuses at once, on one keep-alive connection.
async fn post_latency(http: &leo_testkit::Http, opts: &Opts) -> Result<Latency, String> {
    let conn = crate::conn::RawConn::open(http)
        .await
        .map_err(|e| e.to_string())?;
    post_latency_on(conn, opts).await
}

/// [`post_latency`] on `conn`.
async fn post_latency_on(mut conn: crate::conn::RawConn, opts: &Opts) -> Result<Latency, String> {
    let body = json!({"client_id": "nobody"}).to_string().into_bytes();
    let mut samples = Vec::with_capacity(opts.calls);
    for i in 0..opts.warmup + opts.calls {
        let t = Instant::now();
        conn.post(
            "/api/v1/client-tools/requests/no-such-request/claim",
            body.clone(),
        )
        .await
        .map_err(|e| e.to_string())?;
        if i >= opts.warmup {
            samples.push(t.elapsed().as_micros() as u64);
        }
    }
    samples.sort_unstable();
    Ok(Latency {
        p50: pct(&samples, 0.50),
        p99: pct(&samples, 0.99),
    })
}

/// One call over a raw IPC session, as leo-mcp would send it.
async fn ipc_call(ipc: &mut leo_testkit::Ipc, id: u64, tool: &str) -> Result<(), String> {
    ipc.call(id, tool, Value::Object(payload::arguments()))
        .await;
    let f = ipc.recv_of("result").await;
    if f["outcome"]["content"].is_array() {
        Ok(())
    } else {
        Err(format!("IPC call {tool}: {f}"))
    }
}

/// The leo path in parts: the broker and the app seen from an IPC client that speaks
/// leo-mcp's frames (so leo-mcp and its stdio are left out), and a bare HTTP leg.
async fn breakdown(broker: &Broker, opts: &Opts) -> Result<Breakdown, String> {
    let sock = broker.home().join("run/sidecar.sock");
    let (mut ipc, _) = leo_testkit::Ipc::hello(&sock, &broker.agent_token(), "bench-ipc").await;
    let mut id = 0u64;
    let mut out = Breakdown::default();
    let wanted = PAYLOADS
        .iter()
        .filter(|p| opts.payloads.is_empty() || opts.payloads.iter().any(|t| t == p.tool));
    for p in wanted {
        for _ in 0..opts.warmup {
            id += 1;
            ipc_call(&mut ipc, id, p.tool).await?;
        }
        let mut samples = Vec::with_capacity(opts.calls);
        for _ in 0..opts.calls {
            id += 1;
            let t = Instant::now();
            ipc_call(&mut ipc, id, p.tool).await?;
            samples.push(t.elapsed().as_micros() as u64);
        }
        samples.sort_unstable();
        out.ipc.push((
            *p,
            Latency {
                p50: pct(&samples, 0.50),
                p99: pct(&samples, 0.99),
            },
        ));
    }
    ipc.close().await;
    out.http_post = Some(post_latency(&broker.http(), opts).await?);
    out.unix_post = Some(post_latency(&broker.http_unix(), opts).await?);
    let tls = Broker::start_quiet_tls().await;
    let conn = crate::conn::RawConn::https(&tls).map_err(|e| e.to_string())?;
    out.https_post = Some(post_latency_on(conn, opts).await?);
    Ok(out)
}

/// `agents` sessions, each its own server process, each sequential; `total` calls shared.
async fn throughput(
    backend: &Backend,
    agents: usize,
    total: usize,
    dir: &Path,
    next: &mut usize,
) -> Result<f64, String> {
    let tool = PAYLOADS[0].tool;
    // Start at most four at a time: 64 Python interpreters importing their SDK at once on two
    // cores take minutes to answer `initialize`. Opening is not timed.
    let gate = Arc::new(tokio::sync::Semaphore::new(4));
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..agents {
        let opener = backend.opener(*next);
        let stderr = log_file(dir, &format!("session-{next}"))?;
        *next += 1;
        let gate = gate.clone();
        opening.spawn(async move {
            let _permit = gate.acquire_owned().await.map_err(|e| e.to_string())?;
            Session::open(opener, stderr).await
        });
    }
    let mut sessions = Vec::with_capacity(agents);
    while let Some(s) = opening.join_next().await {
        sessions.push(s.map_err(|e| e.to_string())??);
    }
    for s in &sessions {
        for _ in 0..5 {
            s.call(tool).await?;
        }
    }
    let per = (total / agents).max(1);
    let barrier = Arc::new(tokio::sync::Barrier::new(agents + 1));
    let mut running = tokio::task::JoinSet::new();
    for s in sessions {
        let barrier = barrier.clone();
        running.spawn(async move {
            barrier.wait().await;
            for _ in 0..per {
                s.call(tool).await?;
            }
            Ok::<Session, String>(s)
        });
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut done = Vec::with_capacity(agents);
    let mut failed = None;
    while let Some(r) = running.join_next().await {
        match r.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(s) => done.push(s),
            Err(e) => failed = Some(e),
        }
    }
    let elapsed = started.elapsed();
    for s in done {
        s.close().await;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok((per * agents) as f64 / elapsed.as_secs_f64())
}

pub fn us(v: u64) -> String {
    if v >= 10_000 {
        format!("{:.1} ms", v as f64 / 1e3)
    } else if v >= 1_000 {
        format!("{:.2} ms", v as f64 / 1e3)
    } else {
        format!("{v} µs")
    }
}

fn signed_us(v: i64) -> String {
    let sign = if v < 0 { "−" } else { "+" };
    format!("{sign}{}", us(v.unsigned_abs()))
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "n/a".into())
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn ratio(slow: f64, fast: f64) -> String {
    if fast <= 0.0 {
        return "n/a".into();
    }
    format!("{:.1}×", slow / fast)
}

#[allow(
    clippy::too_many_lines,
    reason = "a measurement or probe script read top to bottom; not split yet"
)]
pub async fn run(report: &mut Report, opts: &Opts) -> anyhow::Result<()> {
    if let Some(bad) = opts
        .systems
        .iter()
        .find(|s| !KINDS.iter().any(|k| k.key() == s.as_str()))
    {
        anyhow::bail!(
            "unknown system {bad:?}; use floor, leo, leo-claim, py-http, py-stdio, py-sdk, ts-sdk, ts-stdio"
        );
    }
    if let Some(bad) = opts
        .payloads
        .iter()
        .find(|t| Payload::by_tool(t.as_str()).is_none())
    {
        anyhow::bail!("unknown tool {bad:?}; use echo_small, echo_64k, image_256k");
    }
    let wanted = |k: Kind| opts.systems.is_empty() || opts.systems.iter().any(|s| s == k.key());
    let py = PythonEnv::find(wanted(Kind::PyHttp) || wanted(Kind::PyStdio));
    let dir = tempfile::tempdir()?;
    let results = measure_all(opts, &py, dir.path(), wanted).await;
    let this = |kind: Kind| Sys {
        kind,
        variant: None,
    };
    let get = |k: Kind| {
        results
            .iter()
            .find(|(sys, _)| *sys == this(k))
            .and_then(|(_, r)| r.as_ref().ok())
    };
    let why = |k: Kind| -> String {
        match results.iter().find(|(sys, _)| *sys == this(k)) {
            Some((_, Err(e))) if e.starts_with("skipped") => e.clone(),
            Some((_, Err(e))) => format!("failed: {e}"),
            _ => "n/a".into(),
        }
    };

    report.section("Relay round trip: the systems");
    let py_server = match &py.server {
        Ok((path, sdk)) => format!("{sdk}, {}", path.display()),
        Err(e) => format!("skipped: {e}"),
    };
    let py_proxy = match &py.proxy {
        Ok((path, v)) => format!("{v}, {}", path.display()),
        Err(e) => format!("skipped: {e}"),
    };
    report.row(
        "client (all systems)",
        "rmcp 3.11 client over stdio (transport-child-process)".into(),
        "the same code, tools `echo_small` (100 B text), `echo_64k` (64 KiB text), `image_256k` (256 KiB image); arguments `{\"text\":\"hello\"}`",
    );
    report.row(
        "(a) floor",
        "`leo-bench-floor`".into(),
        "rmcp stdio server answering the tools itself, one thread",
    );
    report.row(
        "leo",
        "`leo-mcp --mode native` → broker (IPC) → app (SSE + result with `claim: true`, over `run/leo.sock`)".into(),
        "the app is written on the SDK (`leo-app`, `answers_at_once`), on a thread and one-thread runtime of its own in the bench process, answering at once with content serialized ahead",
    );
    report.row(
        "leo, claim then result",
        "the same, with the app claiming first, then posting the result (two requests per call)"
            .into(),
        "the two-step flow of the protocol and the SDK's default",
    );
    report.row(
        "(b) Python HTTP + mcp-proxy",
        "`mcp-proxy --transport streamablehttp <url>` → `bench/python/server.py --transport http`".into(),
        &format!("server: {py_server}; proxy: {py_proxy}; SDK defaults (stateful, SSE responses), logs at WARNING"),
    );
    report.row(
        "(c) Python stdio",
        "`bench/python/server.py --transport stdio`".into(),
        &format!("server: {py_server}"),
    );
    report.row(
        "leo, Python SDK app",
        "`leo-mcp --mode native` → broker → `bench/python/sdk_app.py` on `sdks/python` (`answers_at_once`, over `run/leo.sock`)".into(),
        "a process of its own, standard library only, answering at once with content serialized ahead",
    );
    report.row(
        "leo, TypeScript SDK app",
        "`leo-mcp --mode native` → broker → `bench/typescript/sdk-app.mjs` on `sdks/typescript` (`answersAtOnce`)".into(),
        "a Node process of its own, answering at once with content serialized ahead",
    );
    report.row(
        "(d) TypeScript stdio",
        "`bench/typescript/server.mjs` on @modelcontextprotocol/sdk 1.32.2".into(),
        "the TypeScript SDK apps' baseline: the same tools served directly",
    );

    report.section(&format!(
        "Relay round trip: latency, {} sequential `tools/call` per payload ({} warm-up)",
        opts.calls, opts.warmup
    ));
    for p in PAYLOADS {
        let lat =
            |k: Kind| get(k).and_then(|m| m.latency.iter().find(|(q, _)| *q == p).map(|(_, l)| *l));
        for k in KINDS {
            let value = match lat(k) {
                Some(l) => format!("p50 {} · p99 {}", us(l.p50), us(l.p99)),
                None => why(k),
            };
            report.row(&format!("{}: {}", p.label, k.label()), value, "");
        }
        sdk_rows(
            report,
            p.label,
            lat(Kind::PySdk),
            lat(Kind::PyStdio),
            lat(Kind::PyHttp),
            "Python",
        );
        sdk_rows(
            report,
            p.label,
            lat(Kind::PyPlain),
            lat(Kind::PyStdio),
            lat(Kind::PyHttp),
            "plain Python",
        );
        sdk_rows(
            report,
            p.label,
            lat(Kind::TsSdk),
            lat(Kind::TsStdio),
            lat(Kind::PyHttp),
            "TypeScript",
        );
        let (Some(leo), floor) = (lat(Kind::Leo), lat(Kind::Floor)) else {
            continue;
        };
        if let Some(floor) = floor {
            let d50 = leo.p50 as i64 - floor.p50 as i64;
            let d99 = leo.p99 as i64 - floor.p99 as i64;
            report.row(
                &format!("{}: leo overhead over the floor", p.label),
                format!("p50 {} · p99 {}", signed_us(d50), signed_us(d99)),
                &format!(
                    "target < 300 µs p50: {}; < 2 ms p99: {}",
                    met(d50 < 300),
                    met(d99 < 2_000)
                ),
            );
        }
        for (k, target) in [(Kind::PyHttp, true), (Kind::PyStdio, false)] {
            let value = match lat(k) {
                Some(b) => format!(
                    "{} faster at p50 · {} at p99",
                    ratio(b.p50 as f64, leo.p50 as f64),
                    ratio(b.p99 as f64, leo.p99 as f64)
                ),
                None => why(k),
            };
            let note = match (target, lat(k)) {
                (true, Some(b)) => format!(
                    "target ≥ 5× at p50: {}",
                    met(b.p50 as f64 >= 5.0 * leo.p50 as f64)
                ),
                _ => String::new(),
            };
            report.row(&format!("{}: leo vs {}", p.label, k.label()), value, &note);
        }
    }

    if let Some(leo) = get(Kind::Leo) {
        report.section("Relay: where leo's time goes (same run, same app)");
        for (p, ipc) in &leo.breakdown.ipc {
            let full = leo.latency.iter().find(|(q, _)| q == p).map(|(_, l)| *l);
            let note = match full {
                Some(full) => format!(
                    "leo − this = leo-mcp and its stdio: p50 {}",
                    signed_us(full.p50 as i64 - ipc.p50 as i64)
                ),
                None => String::new(),
            };
            report.row(
                &format!("{}: IPC client → broker → app → result frame", p.label),
                format!("p50 {} · p99 {}", us(ipc.p50), us(ipc.p99)),
                &note,
            );
        }
        if let Some(h) = leo.breakdown.http_post {
            report.row(
                "one keep-alive HTTP POST to the broker over TCP",
                format!("p50 {} · p99 {}", us(h.p50), us(h.p99)),
                "a claim refused at once; the app makes one per call (two when it claims first)",
            );
        }
        if let Some(h) = leo.breakdown.https_post {
            report.row(
                "the same POST over HTTPS (`web.tls`)",
                format!("p50 {} · p99 {}", us(h.p50), us(h.p99)),
                "TLS 1.3 on one kept-alive connection (the handshake is not timed), to a broker of the same build with leo tls init's certificate",
            );
        }
        if let Some(h) = leo.breakdown.unix_post {
            report.row(
                "the same POST over `run/leo.sock`",
                format!("p50 {} · p99 {}", us(h.p50), us(h.p99)),
                "what an app on the unix socket would pay instead",
            );
        }
    }

    report.section("Relay: CPU per call and context switches per call (during the latency runs)");
    for p in PAYLOADS {
        for k in KINDS {
            let Some(cost) = get(k).and_then(|m| m.cost.iter().find(|(q, _)| *q == p)) else {
                continue;
            };
            let per = &cost.1.per_process;
            let total: f64 = per.iter().map(|(_, c, _)| c).sum();
            let value = per
                .iter()
                .map(|(name, c, _)| format!("{name} {c:.0} µs"))
                .collect::<Vec<_>>()
                .join(" · ");
            let switches = per
                .iter()
                .map(|(name, _, s)| format!("{name} {s:.1}"))
                .collect::<Vec<_>>()
                .join(" · ");
            report.row(
                &format!("{}: {}", p.label, k.label()),
                format!("{value} (total {total:.0} µs)"),
                &format!("switches: {switches}"),
            );
        }
    }

    report.section(&format!(
        "Relay throughput: `echo_small`, {} calls shared by N agents, each sequential on its own server process",
        opts.throughput_calls
    ));
    for &c in &opts.concurrency {
        let rate = |k: Kind| {
            get(k).and_then(|m| {
                m.throughput
                    .iter()
                    .find(|(n, _)| *n == c)
                    .map(|(_, r)| r.clone())
            })
        };
        let agents = if c == 1 { "agent" } else { "agents" };
        for k in KINDS {
            let (value, ok) = match rate(k) {
                Some(Ok(r)) => (format!("{r:.0} calls/s"), Some(r)),
                Some(Err(e)) => (format!("failed: {e}"), None),
                None => (why(k), None),
            };
            let note = match (k, ok) {
                (Kind::Leo, Some(leo)) => {
                    let vs = |k: Kind| match rate(k) {
                        Some(Ok(r)) => ratio(leo, r),
                        _ => "n/a".into(),
                    };
                    let floor = match rate(Kind::Floor) {
                        Some(Ok(f)) if f > 0.0 => format!("{:.0} % of the floor", leo / f * 100.0),
                        _ => "floor n/a".into(),
                    };
                    format!(
                        "{floor}; {} (b); {} (c)",
                        vs(Kind::PyHttp),
                        vs(Kind::PyStdio)
                    )
                }
                _ => String::new(),
            };
            report.row(&format!("{c} {agents}: {}", k.label()), value, &note);
        }
    }

    report.section("Relay memory (VmRSS)");
    if let Some(m) = get(Kind::Leo) {
        let ok = m.rss_idle.map(|k| k < 8 * 1024);
        report.row(
            "leo-mcp, idle (initialized, tools listed)",
            mib(m.rss_idle),
            &format!("target < 8 MiB: {}", ok.map(met).unwrap_or("n/a")),
        );
        report.row("leo-mcp, after the latency runs", mib(m.rss_after), "");
        report.row("broker, after the relay runs", mib(m.rss_server), "");
    }
    for (k, what) in [
        (Kind::Floor, "(a) floor server"),
        (Kind::PyHttp, "(b) mcp-proxy"),
        (Kind::PyStdio, "(c) Python stdio server"),
    ] {
        let value = match get(k) {
            Some(m) => format!("{} idle · {} after", mib(m.rss_idle), mib(m.rss_after)),
            None => why(k),
        };
        report.row(what, value, "");
    }
    if let Some(m) = get(Kind::PyHttp) {
        report.row(
            "(b) Python HTTP server, after the runs",
            mib(m.rss_server),
            "",
        );
    }

    targets(report, get(Kind::Leo), get(Kind::Floor), get(Kind::PyHttp));
    if !opts.variants.is_empty() {
        variant_rows(report, opts, &results);
    }
    if wanted(Kind::Leo) {
        crate::store::run(report, opts).await?;
    }
    Ok(())
}

type Results = [(Sys, Result<Measured, String>)];

/// What `sys` measured, or why not.
fn measured(results: &Results, sys: Sys) -> Result<&Measured, String> {
    match results.iter().find(|(s, _)| *s == sys).map(|(_, r)| r) {
        Some(Ok(m)) => Ok(m),
        Some(Err(e)) => Err(format!("failed: {e}")),
        None => Err("n/a".into()),
    }
}

/// "2.0×" with two decimals: the ratios of builds are close to 1.
fn ratio2(num: f64, den: f64) -> String {
    if den <= 0.0 {
        return "n/a".into();
    }
    format!("{:.2}×", num / den)
}

fn total_cpu(c: &Cost) -> f64 {
    c.per_process.iter().map(|(_, c, _)| c).sum()
}

/// The rows of every variant next to this build's, as ratios this build ÷ the variant (below
/// 1.00×: this build is faster).
fn variant_rows(report: &mut Report, opts: &Opts, results: &Results) {
    report.section(
        "Relay against other builds, in the same run (taking turns with this build block by block)",
    );
    let pairs: Vec<(Sys, Sys)> = (0..opts.variants.len())
        .flat_map(|v| {
            [Kind::Leo, Kind::LeoClaim].map(|kind| {
                let this = Sys {
                    kind,
                    variant: None,
                };
                (
                    this,
                    Sys {
                        variant: Some(v),
                        kind,
                    },
                )
            })
        })
        .filter(|(_, v)| results.iter().any(|(s, _)| s == v))
        .collect();
    for v in &opts.variants {
        report.row(&format!("leo@{}", v.name), v.what.clone(), "");
    }
    variant_latency(report, opts, results, &pairs);
    variant_commits(report, opts, results, &pairs);
    variant_cost(report, opts, results, &pairs);
    variant_throughput(report, opts, results, &pairs);
    for &(_, other) in pairs.iter().filter(|(t, _)| t.kind == Kind::Leo) {
        if let Ok(m) = measured(results, other) {
            report.row(
                &format!("broker of {}, after the relay runs", other.label(opts)),
                mib(m.rss_server),
                "",
            );
        }
    }
}

/// Each variant's latency rows, with the ratio this build ÷ it.
fn variant_latency(report: &mut Report, opts: &Opts, results: &Results, pairs: &[(Sys, Sys)]) {
    let get = |sys: Sys| measured(results, sys);
    for p in PAYLOADS {
        let lat = |m: &Measured| m.latency.iter().find(|(q, _)| *q == p).map(|(_, l)| *l);
        for &(this, other) in pairs {
            let Ok(o) = get(other) else {
                report.row(
                    &format!("{}: {}", p.label, other.label(opts)),
                    get(other).err().unwrap_or_default(),
                    "",
                );
                continue;
            };
            let (Some(ol), ml) = (lat(o), get(this).ok().and_then(lat)) else {
                continue;
            };
            let note = match ml {
                Some(ml) => format!(
                    "{} ÷ {}: p50 {} · p99 {}",
                    this.kind.key(),
                    other.label(opts),
                    ratio2(ml.p50 as f64, ol.p50 as f64),
                    ratio2(ml.p99 as f64, ol.p99 as f64)
                ),
                None => String::new(),
            };
            report.row(
                &format!("{}: {}", p.label, other.label(opts)),
                format!("p50 {} · p99 {}", us(ol.p50), us(ol.p99)),
                &note,
            );
        }
    }
}

/// The store's commits per call (one PostgreSQL round trip each), this build's and each
/// variant's; and for a cluster, its `echo_small` p50 against this build's (the target: within
/// 1 ms).
fn variant_commits(report: &mut Report, opts: &Opts, results: &Results, pairs: &[(Sys, Sys)]) {
    let per = |sys: Sys| {
        measured(results, sys)
            .ok()
            .and_then(|m| m.commits_per_call)
            .map_or("n/a".into(), |c| format!("{c:.2}"))
    };
    for &(this, other) in pairs.iter().filter(|(t, _)| t.kind == Kind::Leo) {
        report.row(
            &format!(
                "store commits per call: {} · {}",
                this.label(opts),
                other.label(opts)
            ),
            format!("{} · {}", per(this), per(other)),
            "over the latency runs, from the leader's /metrics",
        );
        let v = &opts.variants[other.variant.unwrap_or_default()];
        let small = |sys: Sys| {
            let m = measured(results, sys).ok()?;
            m.latency
                .iter()
                .find(|(q, _)| q.tool == "echo_small")
                .map(|(_, l)| *l)
        };
        if v.instances > 1
            && let (Some(one), Some(cross)) = (small(this), small(other))
        {
            let d = cross.p50 as i64 - one.p50 as i64;
            report.row(
                &format!(
                    "echo_small: {} p50 over {}",
                    other.label(opts),
                    this.label(opts)
                ),
                signed_us(d),
                &format!("target within 1 ms: {}", met(d <= 1_000)),
            );
        }
    }
}

/// Each variant's CPU per call, with this build's difference.
fn variant_cost(report: &mut Report, opts: &Opts, results: &Results, pairs: &[(Sys, Sys)]) {
    let get = |sys: Sys| measured(results, sys);
    for p in PAYLOADS {
        let cost = |m: &Measured| m.cost.iter().find(|(q, _)| *q == p).map(|(_, c)| c.clone());
        for &(this, other) in pairs {
            let (Some(oc), mc) = (
                get(other).ok().and_then(cost),
                get(this).ok().and_then(cost),
            ) else {
                continue;
            };
            let value = oc
                .per_process
                .iter()
                .map(|(name, c, _)| format!("{name} {c:.0} µs"))
                .collect::<Vec<_>>()
                .join(" · ");
            let note = match mc {
                Some(mc) => {
                    let broker = |c: &Cost| {
                        c.per_process
                            .iter()
                            .find(|(n, _, _)| *n == "broker")
                            .map(|(_, c, _)| *c)
                            .unwrap_or_default()
                    };
                    format!(
                        "{} − it: broker {:+.0} µs · total {:+.0} µs",
                        this.kind.key(),
                        broker(&mc) - broker(&oc),
                        total_cpu(&mc) - total_cpu(&oc)
                    )
                }
                None => String::new(),
            };
            report.row(
                &format!("{}: CPU per call, {}", p.label, other.label(opts)),
                format!("{value} (total {:.0} µs)", total_cpu(&oc)),
                &note,
            );
        }
    }
}

/// Each variant's throughput rows, with the ratio this build ÷ it.
fn variant_throughput(report: &mut Report, opts: &Opts, results: &Results, pairs: &[(Sys, Sys)]) {
    let get = |sys: Sys| measured(results, sys);
    for &c in &opts.concurrency {
        let rate = |m: &Measured| match m.throughput.iter().find(|(n, _)| *n == c) {
            Some((_, Ok(r))) => Some(*r),
            _ => None,
        };
        for &(this, other) in pairs {
            let Some(or) = get(other).ok().and_then(rate) else {
                continue;
            };
            let note = match get(this).ok().and_then(rate) {
                Some(mr) => format!(
                    "{} ÷ {}: {}",
                    this.kind.key(),
                    other.label(opts),
                    ratio2(mr, or)
                ),
                None => String::new(),
            };
            report.row(
                &format!("{c} agents, throughput: {}", other.label(opts)),
                format!("{or:.0} calls/s"),
                &note,
            );
        }
    }
}

/// An SDK app against its language's direct stdio server (target within +300 µs at p50) and
/// the mcp-proxy chain (target ≥ 5× faster at p50); nothing is asserted.
fn sdk_rows(
    report: &mut Report,
    payload: &str,
    sdk: Option<Latency>,
    direct: Option<Latency>,
    chain: Option<Latency>,
    language: &str,
) {
    let Some(sdk) = sdk else { return };
    // The plain app is no SDK app: its rows name it as it is.
    let (app, server) = match language.strip_prefix("plain ") {
        Some(l) => (format!("plain {l} app"), format!("{l} stdio server")),
        None => (
            format!("{language} SDK app"),
            format!("{language} stdio server"),
        ),
    };
    if let Some(d) = direct {
        let d50 = sdk.p50 as i64 - d.p50 as i64;
        report.row(
            &format!("{payload}: {app} − {server}"),
            format!(
                "p50 {} · p99 {}",
                signed_us(d50),
                signed_us(sdk.p99 as i64 - d.p99 as i64)
            ),
            &format!("target ≤ +300 µs at p50: {}", met(d50 <= 300)),
        );
    }
    if let Some(c) = chain {
        report.row(
            &format!("{payload}: {app} vs (b) mcp-proxy chain"),
            format!("{} faster at p50", ratio(c.p50 as f64, sdk.p50 as f64)),
            &format!(
                "target ≥ 5× at p50: {}",
                met(c.p50 as f64 >= 5.0 * sdk.p50 as f64)
            ),
        );
    }
}

/// The relay targets in one place (for the note; nothing is asserted).
fn targets(
    report: &mut Report,
    leo: Option<&Measured>,
    floor: Option<&Measured>,
    alt: Option<&Measured>,
) {
    report.section("Relay targets (2 cores)");
    let lat = |m: Option<&Measured>, p: Payload| {
        m.and_then(|m| m.latency.iter().find(|(q, _)| *q == p).map(|(_, l)| *l))
    };
    let mut rows: Vec<(&str, Vec<String>, bool, bool)> = vec![
        ("leo − floor, p50 < 300 µs", Vec::new(), true, false),
        ("leo − floor, p99 < 2 ms", Vec::new(), true, false),
        ("≥ 5× faster than (b) at p50", Vec::new(), true, false),
    ];
    for p in PAYLOADS {
        let (Some(l), f, b) = (lat(leo, p), lat(floor, p), lat(alt, p)) else {
            continue;
        };
        if let Some(f) = f {
            let d50 = l.p50 as i64 - f.p50 as i64;
            let d99 = l.p99 as i64 - f.p99 as i64;
            rows[0].1.push(format!("{} {}", p.label, signed_us(d50)));
            rows[0].2 &= d50 < 300;
            rows[0].3 = true;
            rows[1].1.push(format!("{} {}", p.label, signed_us(d99)));
            rows[1].2 &= d99 < 2_000;
            rows[1].3 = true;
        }
        if let Some(b) = b {
            rows[2]
                .1
                .push(format!("{} {}", p.label, ratio(b.p50 as f64, l.p50 as f64)));
            rows[2].2 &= b.p50 as f64 >= 5.0 * l.p50 as f64;
            rows[2].3 = true;
        }
    }
    for (what, values, ok, any) in rows {
        if any {
            report.row(what, values.join(" · "), met(ok));
        } else {
            report.row(what, "n/a".into(), "not measured in this run");
        }
    }
    match leo.and_then(|m| m.rss_idle) {
        Some(k) => report.row("leo-mcp idle < 8 MiB", mib(Some(k)), met(k < 8 * 1024)),
        None => report.row(
            "leo-mcp idle < 8 MiB",
            "n/a".into(),
            "not measured in this run",
        ),
    }
}
