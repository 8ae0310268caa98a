//! PostgreSQL for the tests: a new database per test on a real server, never a mock.
//!
//! The server is, in order: the one `LEO_TEST_POSTGRES` names (a URL; it must answer, since it
//! was asked for), the local server (its default socket `/var/run/postgresql`, then
//! `127.0.0.1:5432`, as user `postgres`), and when neither answers a throwaway server this
//! process starts from PostgreSQL's binaries (`/usr/lib/postgresql/*/bin`) in a temporary
//! directory on a free port, shared by the process's tests. Where the binaries are missing
//! the test fails with the install command (`cargo xtask setup` installs Debian's
//! `postgresql` when root), unless `LEO_TEST_SKIP` names `postgres`.
//!
//! [`database`] gives each test a database of its own, named at random and dropped (`WITH
//! (FORCE)`, so a broker left connected does not keep it) when its guard drops. Tests that
//! stop the server on purpose start a [`Throwaway`] of their own: the machine's server is never
//! stopped. Every throwaway server has a watchdog process that stops it and removes its
//! directory once the test process is gone, even after a `SIGKILL`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::require::{Prereq, require};

/// The variable naming the server to test against, as a URL.
pub const URL_VAR: &str = "LEO_TEST_POSTGRES";

/// The local server's addresses, tried in order when `LEO_TEST_POSTGRES` is unset.
pub const LOCAL: [&str; 2] = [
    "postgresql://postgres@/postgres?host=/var/run/postgresql",
    "postgresql://postgres@127.0.0.1:5432/postgres",
];

/// The command that installs PostgreSQL's binaries.
pub const INSTALL: &str = "sudo apt-get update && sudo apt-get install -y postgresql";

/// A server the tests may create databases on: its maintenance database's URL, and the
/// throwaway process behind it, if this process started it.
#[derive(Clone)]
pub struct Server {
    pub admin_url: String,
    throwaway: Option<Arc<Throwaway>>,
}

impl Server {
    /// The first of `candidates` that answers, else a throwaway server (shared by this
    /// process); `None` when the binaries are missing and `LEO_TEST_SKIP` names `postgres`.
    pub async fn find(candidates: &[String]) -> Option<Server> {
        for url in candidates {
            if answers(url).await {
                return Some(Server {
                    admin_url: url.clone(),
                    throwaway: None,
                });
            }
        }
        static SHARED: tokio::sync::OnceCell<Option<Arc<Throwaway>>> =
            tokio::sync::OnceCell::const_new();
        let shared = SHARED
            .get_or_init(|| async { Throwaway::start().await.map(Arc::new) })
            .await
            .clone()?;
        Some(Server {
            admin_url: shared.admin_url(),
            throwaway: Some(shared),
        })
    }

    /// The server at `url` (a URL of any database on it), if it answers; never a throwaway.
    pub async fn at(url: &str) -> Option<Server> {
        answers(url).await.then(|| Server {
            admin_url: url.to_owned(),
            throwaway: None,
        })
    }

    /// The server the tests use (see the module's doc).
    pub async fn for_tests() -> Option<Server> {
        match std::env::var(URL_VAR) {
            Ok(url) if !url.is_empty() => {
                assert!(
                    answers(&url).await,
                    "{URL_VAR}={url}: no PostgreSQL answers there"
                );
                Some(Server {
                    admin_url: url,
                    throwaway: None,
                })
            }
            _ => Server::find(&LOCAL.map(String::from)).await,
        }
    }

    /// Whether this is a throwaway server this process started.
    pub fn is_throwaway(&self) -> bool {
        self.throwaway.is_some()
    }

    /// A new, empty database on this server.
    pub async fn database(&self) -> Database {
        let name = random_name();
        let client = connect(&self.admin_url)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.admin_url));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        Database {
            url: with_database(&self.admin_url, &name),
            name,
            server: self.clone(),
        }
    }
}

/// A test's own database; dropped with the guard.
pub struct Database {
    /// Its URL, for `store.url` or `LEO_STORE_URL`.
    pub url: String,
    pub name: String,
    server: Server,
}

impl Database {
    /// The server it lives on.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The `config.yaml` lines that put a broker's store in this database, as an instance of
    /// a cluster whose instances run on this host and forward to each other over plain http on
    /// loopback (`cluster.plain_http_on_loopback`).
    pub fn config(&self) -> String {
        format!(
            "{}cluster:\n  plain_http_on_loopback: true\n",
            store_config(&self.url)
        )
    }

    /// [`Database::config`] with a short lease (`cluster.lease_ms`, renewed every second):
    /// for the tests that wait one out (a killed or frozen leader), kept long enough that a
    /// loaded machine does not depose a leader that is only slow.
    pub fn config_with_short_lease(&self) -> String {
        format!(
            "{}  heartbeat_ms: 1000\n  lease_ms: 5000\n  poll_ms: 250\n",
            self.config()
        )
    }

    /// A client on this database.
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url).await.unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The `config.yaml` lines that put a broker's store in the database at `url`.
pub fn store_config(url: &str) -> String {
    format!("store:\n  url: \"{url}\"\n")
}

impl Drop for Database {
    fn drop(&mut self) {
        let admin = self.server.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop runs inside the test's runtime, which cannot be blocked on: a thread of its own
        // with a runtime of its own does the work, and is waited for.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let client = connect(&admin).await?;
                client.batch_execute(&sql).await.map_err(|e| e.to_string())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop the test database {}: {e}", self.name);
        }
    }
}

/// A new database on the tests' server; `None` only when `LEO_TEST_SKIP` names `postgres`
/// and no server could be had.
pub async fn database() -> Option<Database> {
    Some(Server::for_tests().await?.database().await)
}

/// A PostgreSQL server started from the binaries, in a temporary directory, on a free port
/// of 127.0.0.1. It can be stopped and started again (for outage tests); dropping it stops it
/// and removes its files.
pub struct Throwaway {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
}

impl Throwaway {
    /// Starts one; fails the test with the install command when the binaries are missing
    /// (`None` when `LEO_TEST_SKIP` names `postgres`).
    pub async fn start() -> Option<Throwaway> {
        let bin = binaries();
        let missing = bin
            .is_none()
            .then(|| "PostgreSQL's binaries (/usr/lib/postgresql/*/bin/initdb)".to_owned());
        if !require(Prereq::Postgres, missing, INSTALL) {
            return None;
        }
        let bin = bin?;
        let dir = tempfile::Builder::new()
            .prefix("leo-test-pg")
            .tempdir()
            .expect("tempdir");
        let port = free_port();
        let server = Throwaway { dir, bin, port };
        server.init();
        server.watchdog();
        server.start_again().await;
        Some(server)
    }

    /// A new database on it, for one test.
    pub async fn database(&self) -> Database {
        Server::find(&[self.admin_url()])
            .await
            .expect("the throwaway server answers")
            .database()
            .await
    }

    /// Its maintenance database's URL.
    pub fn admin_url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn init(&self) {
        if as_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(self.dir.path()));
        }
        let mut initdb = self.command("initdb");
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(self.data());
        run(&mut initdb);
    }

    /// Starts (again) the server and waits until it accepts connections.
    pub async fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let mut pg_ctl = self.command("pg_ctl");
        pg_ctl
            .args(["-w", "-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .arg("-D")
            .arg(self.data())
            .arg("start");
        run(&mut pg_ctl);
        let url = self.admin_url();
        for _ in 0..200 {
            if answers(&url).await {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!(
            "the throwaway PostgreSQL on port {} did not answer",
            self.port
        );
    }

    /// Restarts it with `ssl = on` and the certificate chain `cert_pem` and its key: over
    /// TCP the role `postgres` may still connect in clear (the tests' own connections), every
    /// other role only with TLS (`hostssl`).
    pub async fn with_tls(&self, cert_pem: &str, key_pem: &str) {
        use std::os::unix::fs::PermissionsExt;
        let data = self.data();
        std::fs::write(data.join("server.crt"), cert_pem).unwrap();
        std::fs::write(data.join("server.key"), key_pem).unwrap();
        std::fs::set_permissions(
            data.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        conf.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(data.join("postgresql.conf"), conf).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all postgres 127.0.0.1/32 trust\n\
             hostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        if as_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data));
        }
        self.stop();
        self.start_again().await;
    }

    /// Stops the server at once (`immediate`: as a crash would, clients cut off).
    pub fn stop(&self) {
        stop(&self.bin, &self.data(), as_root());
    }

    /// Runs one of the binaries, as the `postgres` user when this process is root (the
    /// server refuses to run as root).
    fn command(&self, name: &str) -> Command {
        command(&self.bin, name, as_root())
    }

    /// A process that stops the server and removes its directory once this process is gone.
    fn watchdog(&self) {
        let user = if as_root() {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {user}'{pg_ctl}' -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data().display(),
            dir = self.dir.path().display(),
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        self.stop();
    }
}

fn command(bin: &Path, name: &str, root: bool) -> Command {
    let program = bin.join(name);
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn stop(bin: &Path, data: &Path, root: bool) {
    let mut pg_ctl = command(bin, "pg_ctl", root);
    pg_ctl
        .args(["-w", "-m", "immediate", "-D"])
        .arg(data)
        .arg("stop");
    let _ = pg_ctl.output();
}

fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// The newest installed `/usr/lib/postgresql/N/bin` that has `initdb` and `pg_ctl`.
pub fn binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// A port of 127.0.0.1 that nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A client on `url`, its connection driven by a task of the current runtime.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn answers(url: &str) -> bool {
    let attempt = async {
        connect(url)
            .await?
            .simple_query("SELECT 1")
            .await
            .map_err(|e| e.to_string())
    };
    matches!(
        tokio::time::timeout(std::time::Duration::from_secs(5), attempt).await,
        Ok(Ok(_))
    )
}

/// `url` with its database replaced by `name` (the path of a URL, before any query).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// `leo_test_` and 16 random hex digits: a valid unquoted identifier.
fn random_name() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("random bytes");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("leo_test_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn exists(server: &Server, name: &str) -> bool {
        let client = connect(&server.admin_url).await.unwrap();
        let rows = client
            .query("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .await
            .unwrap();
        !rows.is_empty()
    }

    #[test]
    fn a_url_gets_another_database() {
        let cases = [
            (
                LOCAL[0],
                "postgresql://postgres@/x?host=/var/run/postgresql",
            ),
            (LOCAL[1], "postgresql://postgres@127.0.0.1:5432/x"),
            ("postgres://u@h", "postgres://u@h/x"),
        ];
        for (url, want) in cases {
            assert_eq!(with_database(url, "x"), want, "{url}");
        }
    }

    #[tokio::test]
    async fn each_test_gets_its_own_database_dropped_with_its_guard() {
        let server = Server::for_tests().await.expect("a server");
        let (a, b) = (server.database().await, server.database().await);
        assert_ne!(a.name, b.name);
        let client = connect(&a.url).await.unwrap();
        client
            .batch_execute("CREATE TABLE t (n int); INSERT INTO t VALUES (1)")
            .await
            .unwrap();
        let other = connect(&b.url).await.unwrap();
        assert!(
            other.query("SELECT n FROM t", &[]).await.is_err(),
            "b is a new database"
        );
        let name = a.name.clone();
        assert!(exists(&server, &name).await);
        // Still connected: the drop forces the connection out.
        drop(a);
        assert!(!exists(&server, &name).await, "the guard dropped {name}");
        drop(client);
    }

    #[tokio::test]
    async fn a_dead_address_starts_a_throwaway_server() {
        let dead = format!("postgresql://postgres@127.0.0.1:{}/postgres", free_port());
        let server = Server::find(std::slice::from_ref(&dead))
            .await
            .expect("a server");
        assert!(server.is_throwaway());
        assert_ne!(server.admin_url, dead);
        let db = server.database().await;
        let client = connect(&db.url).await.unwrap();
        let row = client
            .query_one("SELECT current_database()", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), db.name);
    }

    #[tokio::test]
    async fn a_throwaway_server_stops_and_starts_again() {
        let server = Throwaway::start().await.expect("the binaries");
        let url = server.admin_url();
        assert!(answers(&url).await);
        server.stop();
        assert!(!answers(&url).await, "stopped");
        server.start_again().await;
        assert!(answers(&url).await, "started again");
        let data = server.data();
        drop(server);
        assert!(!data.exists(), "its files are removed");
    }
}
