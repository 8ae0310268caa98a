//! The SQL of OAuth: the clients, the grants an approver consented to, and their tokens, on
//! SQLite (`state/leo.db`, migration 4 of `schema`) or PostgreSQL (the same tables, a
//! migration of `postgres::schema`). The rules (who may register, what a grant allows, when a
//! token is refused) are the broker's `oauth`; this is only what it keeps and how.
//!
//! Tokens are never stored, only their SHA-256 hashes: a copy of the database opens nothing.
//! Every change is small and rare (a registration, a consent, a token issued), so it is
//! written at once in its own transaction, not through the live store's batching writer.

use std::path::Path;
use std::sync::Mutex;

use tokio_postgres::GenericClient;

use crate::postgres::PgError;
use crate::sqlite;

/// A registered client: by Dynamic Client Registration (`how` = `dcr`) or a Client ID
/// Metadata Document that was read (`cimd`, its `client_id` the document's URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    /// The hash of its secret, for a confidential client.
    pub secret_hash: Option<String>,
    pub how: String,
    pub created_ms: i64,
}

/// A consent: `client_id` may act as `agent` at `resource`, until revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub id: String,
    pub client_id: String,
    pub agent: String,
    pub resource: String,
    pub approved_by: String,
    pub created_ms: i64,
    pub revoked: bool,
}

/// A token of a grant, by its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub hash: String,
    pub grant_id: String,
    /// `access` or `refresh`.
    pub kind: String,
    pub expires_ms: i64,
    /// A refresh token that was exchanged already: presented again, it revokes its grant.
    pub used: bool,
}

/// What the tables hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Saved {
    pub clients: Vec<Client>,
    pub grants: Vec<Grant>,
    pub tokens: Vec<Token>,
}

/// One change, written in the order given, all of a call's in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Client(Client),
    Grant(Grant),
    Token(Token),
    /// A refresh token was exchanged.
    Used(String),
    /// The grant and every token of it are revoked.
    Revoke(String),
    /// Tokens that expired, forgotten.
    Expired(i64),
}

/// The SQLite side: its own connection to `state/leo.db`, beside the live store's writer
/// (WAL lets both write, one transaction at a time, waiting up to the busy timeout).
pub struct Sqlite(Mutex<rusqlite::Connection>);

impl Sqlite {
    pub fn open(path: &Path) -> Result<Sqlite, sqlite::Error> {
        let options = sqlite::Options {
            full_sync: false,
            check: false,
        };
        let conn = sqlite::open(path, options, crate::schema::MIGRATIONS)?;
        Ok(Sqlite(Mutex::new(conn)))
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, rusqlite::Connection> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Everything the tables hold (expired tokens left out).
    pub fn load(&self, now_ms: i64) -> Result<Saved, sqlite::Error> {
        let conn = self.conn();
        let read = sqlite::Error::doing("read the OAuth tables");
        load_sqlite(&conn, now_ms).map_err(read)
    }

    /// Writes `changes` in one transaction.
    pub fn apply(&self, changes: &[Change]) -> Result<(), sqlite::Error> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sqlite::Error::doing("begin an OAuth write"))?;
        for change in changes {
            apply_sqlite(&tx, change).map_err(sqlite::Error::doing("write an OAuth change"))?;
        }
        tx.commit()
            .map_err(sqlite::Error::doing("commit an OAuth write"))
    }
}

fn load_sqlite(conn: &rusqlite::Connection, now_ms: i64) -> rusqlite::Result<Saved> {
    let mut s = conn.prepare(
        "SELECT client_id, name, redirect_uris, secret_hash, how, created_ms FROM oauth_clients",
    )?;
    let clients = s
        .query_map([], |r| {
            Ok(Client {
                client_id: r.get(0)?,
                name: r.get(1)?,
                redirect_uris: uris(&r.get::<_, String>(2)?),
                secret_hash: r.get(3)?,
                how: r.get(4)?,
                created_ms: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut s = conn.prepare(
        "SELECT id, client_id, agent, resource, approved_by, created_ms, revoked FROM oauth_grants",
    )?;
    let grants = s
        .query_map([], |r| {
            Ok(Grant {
                id: r.get(0)?,
                client_id: r.get(1)?,
                agent: r.get(2)?,
                resource: r.get(3)?,
                approved_by: r.get(4)?,
                created_ms: r.get(5)?,
                revoked: r.get::<_, i64>(6)? != 0,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut s = conn.prepare(
        "SELECT hash, grant_id, kind, expires_ms, used FROM oauth_tokens WHERE expires_ms > ?1",
    )?;
    let tokens = s
        .query_map([now_ms], |r| {
            Ok(Token {
                hash: r.get(0)?,
                grant_id: r.get(1)?,
                kind: r.get(2)?,
                expires_ms: r.get(3)?,
                used: r.get::<_, i64>(4)? != 0,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Saved {
        clients,
        grants,
        tokens,
    })
}

fn apply_sqlite(tx: &rusqlite::Transaction<'_>, change: &Change) -> rusqlite::Result<usize> {
    use rusqlite::params;
    match change {
        Change::Client(c) => tx.execute(
            "INSERT OR REPLACE INTO oauth_clients
             (client_id, name, redirect_uris, secret_hash, how, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                c.client_id,
                c.name,
                uris_text(&c.redirect_uris),
                c.secret_hash,
                c.how,
                c.created_ms
            ],
        ),
        Change::Grant(g) => tx.execute(
            "INSERT INTO oauth_grants
             (id, client_id, agent, resource, approved_by, created_ms, revoked)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                g.id,
                g.client_id,
                g.agent,
                g.resource,
                g.approved_by,
                g.created_ms,
                i64::from(g.revoked)
            ],
        ),
        Change::Token(t) => tx.execute(
            "INSERT INTO oauth_tokens (hash, grant_id, kind, expires_ms, used)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![t.hash, t.grant_id, t.kind, t.expires_ms, i64::from(t.used)],
        ),
        Change::Used(hash) => tx.execute(
            "UPDATE oauth_tokens SET used = 1 WHERE hash = ?1",
            params![hash],
        ),
        Change::Revoke(id) => {
            tx.execute(
                "UPDATE oauth_grants SET revoked = 1 WHERE id = ?1",
                params![id],
            )?;
            tx.execute("DELETE FROM oauth_tokens WHERE grant_id = ?1", params![id])
        }
        Change::Expired(now) => tx.execute(
            "DELETE FROM oauth_tokens WHERE expires_ms <= ?1",
            params![now],
        ),
    }
}

/// Redirect URIs as the column keeps them: a JSON array.
fn uris_text(uris: &[String]) -> String {
    serde_json::to_string(uris).unwrap_or_else(|_| "[]".to_owned())
}

fn uris(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// Everything the PostgreSQL tables hold (expired tokens left out).
pub async fn load_postgres(client: &impl GenericClient, now_ms: i64) -> Result<Saved, PgError> {
    let read = || PgError::doing("read the OAuth tables");
    let clients = client
        .query(
            "SELECT client_id, name, redirect_uris, secret_hash, how, created_ms FROM oauth_clients",
            &[],
        )
        .await
        .map_err(read())?
        .iter()
        .map(|r| Client {
            client_id: r.get(0),
            name: r.get(1),
            redirect_uris: uris(r.get(2)),
            secret_hash: r.get(3),
            how: r.get(4),
            created_ms: r.get(5),
        })
        .collect();
    let grants = client
        .query(
            "SELECT id, client_id, agent, resource, approved_by, created_ms, revoked
             FROM oauth_grants",
            &[],
        )
        .await
        .map_err(read())?
        .iter()
        .map(|r| Grant {
            id: r.get(0),
            client_id: r.get(1),
            agent: r.get(2),
            resource: r.get(3),
            approved_by: r.get(4),
            created_ms: r.get(5),
            revoked: r.get(6),
        })
        .collect();
    let tokens = client
        .query(
            "SELECT hash, grant_id, kind, expires_ms, used FROM oauth_tokens WHERE expires_ms > $1",
            &[&now_ms],
        )
        .await
        .map_err(read())?
        .iter()
        .map(|r| Token {
            hash: r.get(0),
            grant_id: r.get(1),
            kind: r.get(2),
            expires_ms: r.get(3),
            used: r.get(4),
        })
        .collect();
    Ok(Saved {
        clients,
        grants,
        tokens,
    })
}

/// Writes `changes` in the transaction `tx` (the caller's, fenced by the leader's lead).
pub async fn apply_postgres(
    tx: &impl GenericClient,
    changes: &[Change],
) -> Result<(), tokio_postgres::Error> {
    for change in changes {
        match change {
            Change::Client(c) => {
                tx.execute(
                    "INSERT INTO oauth_clients
                     (client_id, name, redirect_uris, secret_hash, how, created_ms)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (client_id) DO UPDATE SET name = $2, redirect_uris = $3,
                         secret_hash = $4, how = $5",
                    &[
                        &c.client_id,
                        &c.name,
                        &uris_text(&c.redirect_uris),
                        &c.secret_hash,
                        &c.how,
                        &c.created_ms,
                    ],
                )
                .await?
            }
            Change::Grant(g) => {
                tx.execute(
                    "INSERT INTO oauth_grants
                     (id, client_id, agent, resource, approved_by, created_ms, revoked)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    &[
                        &g.id,
                        &g.client_id,
                        &g.agent,
                        &g.resource,
                        &g.approved_by,
                        &g.created_ms,
                        &g.revoked,
                    ],
                )
                .await?
            }
            Change::Token(t) => {
                tx.execute(
                    "INSERT INTO oauth_tokens (hash, grant_id, kind, expires_ms, used)
                     VALUES ($1, $2, $3, $4, $5)",
                    &[&t.hash, &t.grant_id, &t.kind, &t.expires_ms, &t.used],
                )
                .await?
            }
            Change::Used(hash) => {
                tx.execute(
                    "UPDATE oauth_tokens SET used = true WHERE hash = $1",
                    &[hash],
                )
                .await?
            }
            Change::Revoke(id) => {
                tx.execute(
                    "UPDATE oauth_grants SET revoked = true WHERE id = $1",
                    &[id],
                )
                .await?;
                tx.execute("DELETE FROM oauth_tokens WHERE grant_id = $1", &[id])
                    .await?
            }
            Change::Expired(now) => {
                tx.execute("DELETE FROM oauth_tokens WHERE expires_ms <= $1", &[now])
                    .await?
            }
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_is_read_back_and_a_revocation_drops_the_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let db = Sqlite::open(&dir.path().join("leo.db")).unwrap();
        let client = Client {
            client_id: "c1".into(),
            name: "Claude".into(),
            redirect_uris: vec!["http://127.0.0.1/cb".into()],
            secret_hash: None,
            how: "dcr".into(),
            created_ms: 1,
        };
        let grant = Grant {
            id: "g1".into(),
            client_id: "c1".into(),
            agent: "scout".into(),
            resource: "http://h/mcp".into(),
            approved_by: "operator".into(),
            created_ms: 2,
            revoked: false,
        };
        let token = |hash: &str, expires_ms| Token {
            hash: hash.into(),
            grant_id: "g1".into(),
            kind: "access".into(),
            expires_ms,
            used: false,
        };
        db.apply(&[
            Change::Client(client.clone()),
            Change::Grant(grant.clone()),
            Change::Token(token("h1", 100)),
            Change::Token(token("h0", 5)),
            Change::Used("h1".into()),
        ])
        .unwrap();
        let saved = db.load(10).unwrap();
        assert_eq!(saved.clients, vec![client]);
        assert_eq!(saved.grants, vec![grant]);
        assert_eq!(
            saved.tokens,
            vec![Token {
                used: true,
                ..token("h1", 100)
            }]
        );
        db.apply(&[Change::Revoke("g1".into())]).unwrap();
        let saved = db.load(10).unwrap();
        assert!(saved.grants[0].revoked && saved.tokens.is_empty());
    }
}
