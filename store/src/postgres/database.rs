//! One handle on the PostgreSQL database per instance: one thread running one tokio runtime,
//! one `deadpool-postgres` pool on it, and the schema migrated once, at the first connection.
//!
//! Everything an instance keeps in the database goes through it: the live store's writer,
//! the history and audit trail, the cluster's tokens (the start's join and the refresher),
//! the webhooks, the lease and the cluster's key. Why one: each of those once had a thread,
//! a runtime and a pool of its own (and a helper made a fourth of each, and migrated the
//! schema, on every call), so an instance held five pools and a `leo client add` paid a
//! migration. Why a thread of its own: every connection's I/O runs on that runtime, so the
//! database's round trips never take the broker's thread, and a caller on the broker's
//! runtime only awaits the answer ([`Database::run`]); a caller on a plain thread (the
//! history's writer, the `leo` commands) blocks on it ([`Database::blocking`]).
//!
//! **Two connections are not pooled** ([`Database::dedicated`]): the one a leader holds its
//! alive lock on (`lease::hold_alive`), and the one a follower listens for a lease given up
//! on (`lease::listen`). A pooled connection would be handed to other work and recycled: a
//! session-level lock would then be held by whatever borrowed it next and outlive the
//! leadership, and a `LISTEN` would hear for nobody. The lease itself and its fence are
//! rows and transaction-level advisory locks, on pooled connections like everything else.
//!
//! **Every write the cluster shares is fenced.** [`Database::fenced`] runs a write in a
//! transaction whose first statement is `leo_fence(me, epoch)` with this instance's lead
//! ([`Database::lead`], set when it takes the lease), as the store's batches do: once another
//! instance took the lease, a deposed leader's write fails and changes nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio::runtime::Handle;
use tokio_postgres_rustls::MakeRustlsConnect;
use tracing::{debug, warn};

use super::fence::{self, Fenced};
use super::{lease, schema};

/// How long a connection may idle inside a transaction before the server ends it (see
/// `pool`): far above any batch's, below the default lease.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);
/// How long a connection attempt or a wait for a pooled connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections in the instance's one pool: the store's writer, the history's, the lease's
/// look, the tokens' refresher and the occasional webhook change or read, each holding one
/// for a round trip or a transaction.
const POOL_SIZE: usize = 8;

/// Why PostgreSQL could not be reached, or refused (carried as `crate::DbError::Postgres`,
/// the storage's one database error).
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("store.url is not a PostgreSQL connection URL: {0}")]
    Url(#[source] tokio_postgres::Error),
    #[error(
        "store.url: sslmode={0:?} is not one of disable, prefer, require, verify-ca, verify-full"
    )]
    SslMode(String),
    #[error("store.url: sslrootcert {}: {reason}", .path.display())]
    RootCert {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("the TLS settings for the database: {0}")]
    Tls(String),
    /// The TLS handshake failed: the server's certificate refused (`verify-ca`, `verify-full`),
    /// or no TLS where it was required; with its fix.
    #[error("cannot connect to the database over TLS; {fix}")]
    TlsRefused {
        fix: &'static str,
        #[source]
        source: deadpool_postgres::PoolError,
    },
    #[error("cannot connect to the database")]
    Connect(#[source] deadpool_postgres::PoolError),
    #[error("cannot {doing}")]
    Query {
        doing: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error(
        "the database's schema is version {found}, newer than this broker's {known}: it was \
         written by a newer leo; upgrade this one (an instance never runs or leads on a schema \
         newer than it knows, see docs/cluster.md, upgrades)"
    )]
    NewerSchema { found: i32, known: i32 },
    #[error("the database holds a row this broker cannot read: {0}")]
    Unreadable(String),
    #[error("cannot start the database's thread")]
    Thread(#[source] std::io::Error),
    #[error("the database's thread has stopped")]
    Stopped,
    #[error(
        "another instance took over the database ({holder}); this instance no longer leads it \
         and writes nothing more"
    )]
    LeaseLost { holder: String },
    #[error("instance {0} leads this database")]
    Held(lease::Leader),
    /// The server refused this broker for a reason only its operator can fix (see
    /// [`PgError::at_start`]): the server's words, and the fix.
    #[error("the server refused: {message} (SQLSTATE {code}); {fix}")]
    Refused {
        code: String,
        message: String,
        fix: String,
    },
}

impl PgError {
    pub fn doing(doing: &'static str) -> impl FnOnce(tokio_postgres::Error) -> PgError {
        move |source| PgError::Query { doing, source }
    }

    /// Whether the database refused a write because this instance no longer leads (the
    /// fence, see `lease`).
    pub fn is_fenced(&self) -> bool {
        matches!(self, PgError::LeaseLost { .. })
            || matches!(self, PgError::Query { source, .. }
                if source.code().is_some_and(|c| c.code() == lease::FENCED))
    }

    /// Whether the database refused the data of one change (SQLSTATE class 22, a data
    /// exception: a character its encoding cannot hold, such as U+0000), not the change
    /// itself nor the database: the change is at fault, and the rest of its batch can be written.
    pub fn is_data(&self) -> bool {
        matches!(self, PgError::Query { source, .. }
            if source.code().is_some_and(|c| c.code().starts_with("22")))
    }

    /// The error the server answered with, if it answered at all.
    fn db_error(&self) -> Option<&tokio_postgres::error::DbError> {
        match self {
            PgError::Connect(deadpool_postgres::PoolError::Backend(source))
            | PgError::Query { source, .. } => source.as_db_error(),
            _ => None,
        }
    }

    /// At start, an error no wait would end becomes [`PgError::Refused`], with its fix: a
    /// role the server does not know or whose password is wrong (SQLSTATE 28000, 28P01), a
    /// database that does not exist (3D000), a role without the rights to create the
    /// broker's tables (42501). Such a start stops, where an unreachable server (refused,
    /// timed out, shutting down or starting: [`PgError::is_outage`]) is waited for. A running
    /// broker keeps treating whatever cut it off as an outage: a password changed under it is
    /// no reason to drop what it holds.
    pub fn at_start(self) -> PgError {
        let this = match self {
            PgError::Connect(source) => tls_refused(source),
            other => other,
        };
        let Some(db) = this.db_error() else {
            return this;
        };
        let key = crate::store_key();
        let fix = match db.code().code() {
            "28P01" => format!(
                "correct the password of the user named in {key} (or the server's pg_hba.conf)"
            ),
            "28000" if db.message().contains("no encryption") => format!(
                "the server accepts only encrypted connections from here: set sslmode=verify-full \
                 (with sslrootcert=PATH of its CA) or sslmode=require in {key}"
            ),
            "28000" => format!(
                "create that role (CREATE ROLE name LOGIN PASSWORD '...'), or name one that \
                 exists in {key}, and let it log in from here (the server's pg_hba.conf)"
            ),
            "3D000" => format!(
                "create the database (CREATE DATABASE name OWNER role), or name one that \
                 exists in {key}"
            ),
            "42501" => format!(
                "the role named in {key} may not create the broker's tables: make it the \
                 database's owner (ALTER DATABASE name OWNER TO role), or grant it the schema \
                 (GRANT USAGE, CREATE ON SCHEMA public TO role)"
            ),
            _ => return this,
        };
        PgError::Refused {
            code: db.code().code().to_owned(),
            message: db.message().to_owned(),
            fix,
        }
    }

    /// Whether the database could not be reached (the server down, restarting, the network
    /// cut), as opposed to an error the database answered on purpose.
    pub fn is_outage(&self) -> bool {
        match self {
            PgError::Connect(_) | PgError::Stopped => true,
            PgError::Query { source, .. } => {
                let Some(db) = source.as_db_error() else {
                    // Not an answer from the server: the connection failed or closed.
                    return true;
                };
                let code = db.code().code();
                // 08: connection exceptions; 57P01-57P03: the server shutting down or starting.
                code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
            }
            _ => false,
        }
    }
}

/// `source`, a connection that failed, as [`PgError::TlsRefused`] when the TLS handshake
/// failed (a certificate refused, or no TLS where it was required), which no wait would end.
fn tls_refused(source: deadpool_postgres::PoolError) -> PgError {
    let text = match &source {
        deadpool_postgres::PoolError::Backend(e) if e.as_db_error().is_none() => e.to_string(),
        _ => return PgError::Connect(source),
    };
    let fix = if text.contains("does not support TLS") {
        "the server offers no TLS: turn ssl on in its postgresql.conf, or lower sslmode in \
         store.url"
    } else if text.contains("TLS") {
        "the server's certificate is refused: name the CA that signed it in sslrootcert=PATH, \
         and for verify-full connect to a host name the certificate names"
    } else {
        return PgError::Connect(source);
    };
    PgError::TlsRefused { fix, source }
}

/// The instance that leads, in the epoch it took the lease in: what [`Database::fenced`]
/// writes are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lead {
    pub me: String,
    pub epoch: i64,
}

/// The handle: cheap to clone, one per instance (see the module's doc).
#[derive(Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// The database's runtime, driven by its thread until `stop` drops.
    handle: Handle,
    migrated: tokio::sync::OnceCell<()>,
    /// How a connection is made: for the pool, and for [`Database::dedicated`].
    connect: QuietNotices,
    config: tokio_postgres::Config,
    lead: Mutex<Option<Lead>>,
    /// The database and hosts, for logs: never the password.
    described: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.pool.close();
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("at", &self.inner.described)
            .finish()
    }
}

impl Database {
    /// The database at `url`: its thread and pool start now, no connection is made yet (a
    /// database away at this moment is found by the first use). A URL that is not
    /// PostgreSQL's is refused here.
    pub fn open(url: &str) -> Result<Database, PgError> {
        let (config, tls) = super::tls::parse(url)?;
        if tls.mode == super::tls::SslMode::Disable && super::tls::beyond_loopback(&config) {
            warn!(
                database = %describe(&config),
                "sslmode=disable: the database's traffic (tokens, the cluster's key, every \
                 call's arguments and results) crosses the network in clear"
            );
        }
        let connector = super::tls::connector(&tls)?;
        let described = describe(&config);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(PgError::Thread)?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("leo-database".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
                // Tasks still running (a refresher whose stop was not cancelled) end here.
                rt.shutdown_timeout(Duration::from_millis(100));
            })
            .map_err(PgError::Thread)?;
        let config = configured(config);
        let connect = QuietNotices {
            handle: handle.clone(),
            tls: connector,
            notify: None,
        };
        let pool = pool(config.clone(), connect.clone())?;
        Ok(Database {
            inner: Arc::new(Inner {
                pool,
                handle,
                migrated: tokio::sync::OnceCell::new(),
                connect,
                config,
                lead: Mutex::new(None),
                described,
                _stop: stop,
            }),
        })
    }

    /// The pool itself, for a writer that holds it (the store's: migrated at its start).
    pub(crate) fn pool(&self) -> Pool {
        self.inner.pool.clone()
    }

    /// The database and hosts, for logs.
    pub fn describe(&self) -> &str {
        &self.inner.described
    }

    /// A pooled connection, the schema brought up to date first if this instance has not yet
    /// (`schema::migrate`, under its lock: once per instance, at its first connection).
    pub async fn client(&self) -> Result<Object, PgError> {
        let mut client = self.inner.pool.get().await.map_err(PgError::Connect)?;
        self.inner
            .migrated
            .get_or_try_init(|| schema::migrate(&mut client))
            .await?;
        Ok(client)
    }

    /// A connection of its own, outside the pool (see the module's doc): it closes when the
    /// client is dropped. The notifications it receives (after a `LISTEN`) go to `notify`.
    pub async fn dedicated(
        &self,
        notify: Option<tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>>,
    ) -> Result<tokio_postgres::Client, PgError> {
        let connect = QuietNotices {
            notify,
            ..self.inner.connect.clone()
        };
        let config = self.inner.config.clone();
        self.inner
            .handle
            .spawn(async move {
                use deadpool_postgres::Connect;
                connect.connect(&config).await.map(|(client, _)| client)
            })
            .await
            .map_err(|_| PgError::Stopped)?
            .map_err(PgError::doing("open a connection of its own"))
    }

    /// Runs `work` on a connection, on the database's runtime; the caller only awaits its end.
    pub async fn run<T, F, Fut>(&self, work: F) -> Result<T, PgError>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, PgError>> + Send + 'static,
    {
        let db = self.clone();
        self.inner
            .handle
            .spawn(async move { work(db.client().await?).await })
            .await
            .unwrap_or(Err(PgError::Stopped))
    }

    /// [`Database::run`] for a caller on a plain thread (the history's writer, a `leo`
    /// command): blocks it until `work` ends. Never call it on an async runtime's thread.
    pub fn blocking<T, F, Fut>(&self, work: F) -> Result<T, PgError>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, PgError>> + Send + 'static,
    {
        let (done, answer) = std::sync::mpsc::sync_channel(1);
        let db = self.clone();
        self.inner.handle.spawn(async move {
            let _ = done.send(db.run(work).await);
        });
        answer.recv().unwrap_or(Err(PgError::Stopped))
    }

    /// Runs `work` to its end on this plain thread (the history's writer), the connections'
    /// I/O driven by the database's runtime meanwhile; `work` may borrow from the caller.
    /// Panics on an async runtime's thread, as `Handle::block_on` does.
    pub fn block_on<T>(&self, work: impl Future<Output = T>) -> T {
        self.inner.handle.block_on(work)
    }

    /// Starts `task` on the database's runtime (a writer, a refresher), to run until it ends.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.inner.handle.spawn(task);
    }

    /// Records that this instance leads in `lead`'s epoch (it took the lease).
    pub fn set_lead(&self, lead: Lead) {
        if let Ok(mut held) = self.inner.lead.lock() {
            *held = Some(lead);
        }
    }

    /// The lead this instance last took, if it ever led.
    pub fn lead(&self) -> Option<Lead> {
        self.inner.lead.lock().ok().and_then(|l| l.clone())
    }

    /// Runs `work` in a transaction fenced by this instance's lead, and commits it: a write
    /// the cluster shares. Refused (`PgError::LeaseLost`, or the fence's own error) when this
    /// instance does not lead, or no longer does: then nothing of `work` is committed.
    pub async fn fenced<T, F>(&self, work: F) -> Result<T, PgError>
    where
        T: Send + 'static,
        F: for<'t> FnOnce(
                &'t Fenced<'t>,
            ) -> futures_util::future::BoxFuture<'t, Result<T, PgError>>
            + Send
            + 'static,
    {
        let lead = self.leading()?;
        self.run(move |mut client| async move {
            let began = fence::begin(&mut client, &lead).await?;
            let out = work(&began.handle()).await?;
            began.commit().await?;
            Ok(out)
        })
        .await
    }

    /// The lead this instance writes in; refused when it never took the lease.
    pub(crate) fn leading(&self) -> Result<Lead, PgError> {
        self.lead().ok_or_else(|| PgError::LeaseLost {
            holder: "this instance has not taken the lease".into(),
        })
    }
}

/// `config` as every connection of the instance uses it: named `leo` on the server, and ended
/// by the server when it idles in a transaction (below).
fn configured(mut config: tokio_postgres::Config) -> tokio_postgres::Config {
    config.connect_timeout(CONNECT_TIMEOUT);
    config.application_name("leo");
    // A transaction left open by an instance that stopped running mid-batch (frozen, or its
    // host cut off) keeps the fence's `FOR SHARE` on the cluster's row, which the next take
    // waits for: the server ends such a session once it idles that long in its transaction,
    // so a take waits for a vanished leader's batch at most this long, never for ever.
    let options = format!(
        "{} -c idle_in_transaction_session_timeout={}",
        config.get_options().unwrap_or_default(),
        IDLE_IN_TRANSACTION.as_millis()
    );
    config.options(options.trim());
    config
}

/// A pool of connections to the database of `config`, each made by `connect`.
fn pool(config: tokio_postgres::Config, connect: QuietNotices) -> Result<Pool, PgError> {
    let manager = Manager::from_connect(
        config,
        connect,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(Runtime::Tokio1)
        .create_timeout(Some(CONNECT_TIMEOUT))
        .wait_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| PgError::Unreadable(format!("the connection pool: {e}")))
}

/// Connects as deadpool does, but drives each connection itself, on the database's runtime
/// whoever asked: tokio-postgres logs the server's notices at INFO (`relation … already
/// exists, skipping` on every start), which are the server's chatter, not the broker's news;
/// they are logged at DEBUG here.
#[derive(Clone)]
struct QuietNotices {
    handle: Handle,
    /// `None` for `sslmode=disable`.
    tls: Option<MakeRustlsConnect>,
    /// Where a dedicated connection's notifications go (`None`: dropped).
    notify: Option<tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>>,
}

impl deadpool_postgres::Connect for QuietNotices {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> futures_util::future::BoxFuture<
        '_,
        Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let config = config.clone();
        Box::pin(async move {
            let (client, task) = match &self.tls {
                Some(tls) => {
                    let (client, connection) = config.connect(tls.clone()).await?;
                    (
                        client,
                        self.handle.spawn(drive(connection, self.notify.clone())),
                    )
                }
                None => {
                    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                    (
                        client,
                        self.handle.spawn(drive(connection, self.notify.clone())),
                    )
                }
            };
            Ok((client, task))
        })
    }
}

/// Drives one connection until it ends, its notices logged at DEBUG and its notifications
/// sent to `notify`.
async fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    notify: Option<tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(tokio_postgres::AsyncMessage::Notice(notice))) => {
                debug!(severity = notice.severity(), "{}", notice.message());
            }
            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                if let Some(notify) = &notify {
                    let _ = notify.send(n);
                }
            }
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                warn!(%error, "a PostgreSQL connection failed");
                break;
            }
            None => break,
        }
    }
}

/// The database and hosts of `config`, for logs: never the password.
pub fn describe(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    format!(
        "{} on {}",
        config.get_dbname().unwrap_or("(default)"),
        hosts.join(",")
    )
}
