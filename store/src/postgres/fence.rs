//! The handles a write to a table the cluster shares is made on, so that "every write passes
//! the fence" is a fact of the types: a write statement runs on a [`Tx`], and a `Tx` is had only
//! through [`Fenced`] (a transaction whose first statement is the fence, `lease::FENCE`: a
//! deposed leader's write fails and changes nothing) or [`Unfenced`] (a write made whoever
//! leads, each naming why: an operator's `leo` command, the first filling of a new database).
//! Neither can be made outside this module. `broker/tests/architecture.rs` checks the rest: every
//! write statement of the PostgreSQL code sits in a function that takes one of them, and the
//! unfenced ones are exactly those it lists. The lease's own rows (`cluster`, `instances`) and
//! the schema's version are the exceptions: taking the lease is what the fence checks against.

use std::future::Future;

use deadpool_postgres::{Client, Transaction};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement, ToStatement};

use super::{Lead, PgError, lease};

/// A connection inside a transaction a write is made in (see the module's doc).
#[derive(Clone, Copy)]
pub struct Tx<'t>(Conn<'t>);

#[derive(Clone, Copy)]
enum Conn<'t> {
    Transaction(&'t Transaction<'t>),
    /// A connection that is in a transaction the caller began (`Fenced::pipelined`), or a
    /// single statement (`Unfenced::on`).
    Client(&'t Client),
}

/// A [`Tx`] whose transaction began with the fence: a leader's write.
pub struct Fenced<'t>(Tx<'t>);

/// A [`Tx`] for a write made whoever leads (see [`Unfenced::on`]).
pub struct Unfenced<'t>(Tx<'t>);

impl<'t> std::ops::Deref for Fenced<'t> {
    type Target = Tx<'t>;
    fn deref(&self) -> &Tx<'t> {
        &self.0
    }
}

impl<'t> std::ops::Deref for Unfenced<'t> {
    type Target = Tx<'t>;
    fn deref(&self) -> &Tx<'t> {
        &self.0
    }
}

/// A transaction whose first statement was the fence: its writes are made on
/// [`Began::handle`], and it ends with [`Began::commit`] (dropped, it rolls back).
pub(crate) struct Began<'c>(Transaction<'c>);

/// Begins a transaction on `client` whose first statement is the fence of `lead`: refused,
/// with nothing of it ever committed, unless `lead` still leads.
pub(crate) async fn begin<'c>(client: &'c mut Client, lead: &Lead) -> Result<Began<'c>, PgError> {
    let tx = client
        .transaction()
        .await
        .map_err(PgError::doing("begin a write"))?;
    tx.execute(lease::FENCE, &[&lead.me, &lead.epoch])
        .await
        .map_err(PgError::doing("check that this instance leads"))?;
    Ok(Began(tx))
}

impl<'c> Began<'c> {
    /// The handle its writes are made on.
    pub(crate) fn handle(&self) -> Fenced<'_> {
        Fenced(Tx(Conn::Transaction(&self.0)))
    }

    pub(crate) async fn commit(self) -> Result<(), PgError> {
        self.0
            .commit()
            .await
            .map_err(PgError::doing("commit a write"))
    }
}

impl<'t> Fenced<'t> {
    /// The live store's batch in one round trip: the returned future sends `BEGIN` and the
    /// fence when first polled, which must be before any statement on the handle is (requests
    /// go out in the order their futures are first polled); [`Fenced::commit`] ends it. If
    /// the fence fails, the server aborts the transaction, so no statement after it is kept.
    pub(crate) async fn pipelined(
        client: &'t Client,
        fence: (&'t str, i64),
    ) -> Result<(impl Future<Output = Result<(), PgError>> + 't, Fenced<'t>), PgError> {
        // Prepared once per connection, so that the batch stays one round trip.
        let check = client
            .prepare_cached(lease::FENCE)
            .await
            .map_err(PgError::doing("prepare a statement"))?;
        let raw: &tokio_postgres::Client = client;
        let begin = async move {
            raw.batch_execute("BEGIN")
                .await
                .map_err(PgError::doing("begin a transaction"))
        };
        let checked = async move {
            raw.execute(&check, &[&fence.0, &fence.1])
                .await
                .map(drop)
                .map_err(PgError::doing("check that this instance leads"))
        };
        let opened = async move { futures_util::try_join!(begin, checked).map(drop) };
        Ok((opened, Fenced(Tx(Conn::Client(client)))))
    }

    /// Commits a [`Fenced::pipelined`] transaction.
    pub(crate) async fn commit(&self) -> Result<(), PgError> {
        self.batch_execute("COMMIT")
            .await
            .map_err(PgError::doing("commit"))
    }
}

/// Why an operator's write is not fenced: `leo client|device|agent` change the cluster's
/// tokens and audit trail on any host, whoever leads; they are the operator's, not a leader's
/// decision.
pub(crate) const OPERATOR: &str = "the operator's own command, made whoever leads";

impl<'t> Unfenced<'t> {
    /// A write on `client` made whoever leads, for the reason `why` (for the reader and the
    /// architecture test, which lists every one).
    pub(crate) fn on(client: &'t Client, why: &'static str) -> Unfenced<'t> {
        let _ = why;
        Unfenced(Tx(Conn::Client(client)))
    }

    /// [`Unfenced::on`], inside the caller's transaction `tx`.
    pub(crate) fn within(tx: &'t Transaction<'t>, why: &'static str) -> Unfenced<'t> {
        let _ = why;
        Unfenced(Tx(Conn::Transaction(tx)))
    }
}

/// A method of [`Tx`] that runs a statement with parameters on whichever connection it holds.
macro_rules! run_on_either {
    ($($name:ident -> $out:ty),*) => {$(
        pub async fn $name<T>(
            &self,
            statement: &T,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<$out, tokio_postgres::Error>
        where
            T: ?Sized + ToStatement + Sync,
        {
            match self.0 {
                Conn::Transaction(tx) => tx.$name(statement, params).await,
                Conn::Client(c) => c.$name(statement, params).await,
            }
        }
    )*};
}

impl Tx<'_> {
    run_on_either!(execute -> u64, query -> Vec<Row>, query_opt -> Option<Row>);

    /// A statement prepared once per connection (the pool's cache).
    pub async fn prepare_cached(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        match self.0 {
            Conn::Transaction(tx) => tx.prepare_cached(sql).await,
            Conn::Client(c) => c.prepare_cached(sql).await,
        }
    }

    pub(crate) async fn batch_execute(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        match self.0 {
            Conn::Transaction(tx) => tx.batch_execute(sql).await,
            Conn::Client(c) => c.batch_execute(sql).await,
        }
    }
}
