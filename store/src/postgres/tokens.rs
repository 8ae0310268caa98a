//! The cluster's tokens in the table `tokens`: read whole, filled once, changed one row at a
//! time. The rule they serve (who fills, who adopts, how instances follow changes) is
//! the broker's `cluster::tokens`; this is only its SQL and the shape of a row.

use deadpool_postgres::Client;

use super::fence::OPERATOR;
use super::{PgError, Tx, Unfenced};

/// What a token opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `state/operator.token`.
    Operator,
    /// The shared agent token, `state/agent.token`.
    Agent,
    /// `leo device pair NAME`.
    Device,
    /// `leo client add NAME` (with its `can_message`).
    Client,
    /// `leo agent add NAME`.
    OwnAgent,
}

impl Kind {
    /// Its name in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Operator => "operator",
            Kind::Agent => "agent",
            Kind::Device => "device",
            Kind::Client => "client",
            Kind::OwnAgent => "own_agent",
        }
    }

    /// The kind named `text` in the database.
    pub fn parse(text: &str) -> Option<Kind> {
        [
            Kind::Operator,
            Kind::Agent,
            Kind::Device,
            Kind::Client,
            Kind::OwnAgent,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// One token of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// The device's, client's or agent's name; empty for the operator and agent tokens.
    pub name: String,
    pub token: String,
    /// An API client's targets (globs); empty for every other kind.
    pub can_message: Vec<String>,
}

/// The advisory lock the first filling runs under, so that two instances starting together on
/// a new database cannot both fill it (`leot` in ASCII).
const FILL_LOCK: i64 = 0x6c_65_6f_74;

/// Every row, ordered by kind and name, so two reads of the same rows compare equal.
pub async fn read(client: &Client) -> Result<Vec<Entry>, PgError> {
    let rows = client
        .query(
            "SELECT kind, name, token, can_message FROM tokens ORDER BY kind, name",
            &[],
        )
        .await
        .map_err(PgError::doing("read the cluster's tokens"))?;
    rows.iter()
        .map(|row| {
            let kind: String = row.get(0);
            let kind = Kind::parse(&kind).ok_or_else(|| {
                PgError::Unreadable(format!("tokens: a row of unknown kind {kind:?}"))
            })?;
            Ok(Entry {
                kind,
                name: row.get(1),
                token: row.get(2),
                can_message: row.get(3),
            })
        })
        .collect()
}

/// Writes `local` (this instance's own files) unless the database holds an operator token
/// already; true when it did, that is when this instance is the first on the database.
pub async fn fill(client: &mut Client, local: &[Entry]) -> Result<bool, PgError> {
    let tx = client
        .transaction()
        .await
        .map_err(PgError::doing("begin filling the tokens"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&FILL_LOCK])
        .await
        .map_err(PgError::doing("take the tokens' lock"))?;
    let already: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM tokens WHERE kind = 'operator')",
            &[],
        )
        .await
        .map_err(PgError::doing("read the cluster's tokens"))?
        .get(0);
    if already {
        return Ok(false);
    }
    let fill = Unfenced::within(
        &tx,
        "the first instance fills a new database, before any leads",
    );
    for entry in local {
        // A row a `leo` command wrote before any broker started stays as it is.
        add(&fill, entry)
            .await
            .map_err(PgError::doing("fill the cluster's tokens"))?;
    }
    tx.commit()
        .await
        .map_err(PgError::doing("fill the cluster's tokens"))?;
    Ok(true)
}

/// Adds `entry`; false when its kind and name (or, never in practice, its token) exist.
pub async fn insert(client: &Client, entry: &Entry) -> Result<bool, PgError> {
    add(&Unfenced::on(client, OPERATOR), entry)
        .await
        .map(|n| n == 1)
        .map_err(PgError::doing("add the token"))
}

/// The one INSERT of a token row, in a transaction (`fill`) or not (`insert`); an existing
/// kind and name is left as it is.
async fn add(tx: &Tx<'_>, entry: &Entry) -> Result<u64, tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO tokens (kind, name, token, can_message) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
        &[
            &entry.kind.as_str(),
            &entry.name,
            &entry.token,
            &entry.can_message,
        ],
    )
    .await
}

/// Removes the token of `kind` named `name`; false when there was none.
pub async fn delete(client: &Client, kind: Kind, name: &str) -> Result<bool, PgError> {
    remove(&Unfenced::on(client, OPERATOR), kind, name).await
}

async fn remove(tx: &Unfenced<'_>, kind: Kind, name: &str) -> Result<bool, PgError> {
    tx.execute(
        "DELETE FROM tokens WHERE kind = $1 AND name = $2",
        &[&kind.as_str(), &name],
    )
    .await
    .map(|n| n == 1)
    .map_err(PgError::doing("remove the token"))
}
