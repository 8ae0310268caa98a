//! The history and the audit trail in PostgreSQL (the tables `history` and `audit`), with a
//! PostgreSQL store: every instance on the database writes its rows there under its instance
//! id, so `GET …/requests?state=ended`, `GET /api/v1/audit`, `leo requests --ended`, `leo
//! audit` and the console show the whole cluster's, whichever instance answers or answered.
//!
//! This is only the SQL and the connection it runs on ([`Pg`], the history's [`Log`]); what is
//! written and when is the history's writer, the same as for `state/history.db`. [`Pg`] runs
//! on the instance's one [`Database`], driven from the history's own thread, so the
//! database's round trips never take the broker's thread nor wait behind the live state's
//! writes. A batch is one transaction of at most two statements (every call in one `INSERT …
//! SELECT FROM UNNEST`, every audit entry in another), fenced by the leader's lead, so a
//! burst costs two round trips, not one per row, and a deposed leader's rows are refused.
//! `seq` is an identity column: it orders each log across instances and is the pages'
//! `before` cursor.

use deadpool_postgres::Client;
use leo_protocol::history::{AuditEntry, CallApp, CallOutcome, EndedRequest};
use tokio_postgres::types::ToSql;

use super::chain::{self, Chained};
use super::db::{AuditRow, CallQuery, CallRow, Table};
use super::{Error, Log};
use crate::postgres::fence;
use crate::postgres::{Database, Fenced, PgError, Tx, Unfenced};

/// The history's connection to the database: the instance's one handle, driven by the thread
/// that owns this.
pub struct Pg {
    db: Database,
    instance: String,
}

impl Pg {
    /// The history of `instance` (`i_…`) on `db`; it connects when it first needs to.
    pub fn open(db: &Database, instance: String) -> Pg {
        Pg {
            db: db.clone(),
            instance,
        }
    }

    /// Runs `work` on a pooled connection, to its end: polled on this thread, the
    /// connection's I/O on the database's runtime.
    fn on<T>(&self, work: impl AsyncFnOnce(&mut Client) -> Result<T, PgError>) -> Result<T, Error> {
        self.db
            .block_on(async {
                let mut client = self.db.client().await?;
                work(&mut client).await
            })
            .map_err(Error::from)
    }
}

impl Log for Pg {
    fn write(&mut self, calls: &[CallRow], audits: &[AuditRow]) -> Result<Vec<bool>, Error> {
        // A broker's rows are its lead's: none yet (never in practice) is refused too.
        let lead = self.db.leading()?;
        let instance = self.instance.clone();
        self.on(async |c| {
            let began = fence::begin(c, &lead).await?;
            let new = write(&began.handle(), &instance, calls, audits).await?;
            began.commit().await?;
            Ok(new)
        })
    }

    fn calls(&mut self, q: &CallQuery, contents: bool) -> Result<Vec<EndedRequest>, Error> {
        self.on(async |c| list_calls(c, q, contents).await)
    }

    fn audits(&mut self, limit: u32, before: Option<u64>) -> Result<Vec<AuditEntry>, Error> {
        self.on(async |c| list_audit(c, limit, before).await)
    }

    fn audit_chain(&mut self, after: u64, limit: u32) -> Result<Vec<Chained>, Error> {
        self.on(async |c| audit_chain(c, after, limit).await)
    }

    fn prune(
        &mut self,
        table: Table,
        cutoff_ms: i64,
        max_rows: Option<u64>,
    ) -> Result<usize, Error> {
        // Old rows go whichever instance prunes, but only the one that leads writes.
        let lead = self.db.leading()?;
        self.on(async |c| {
            let began = fence::begin(c, &lead).await?;
            let gone = prune(&began.handle(), table, cutoff_ms, max_rows).await?;
            began.commit().await?;
            Ok(gone)
        })
    }

    fn count(&mut self, table: Table) -> Result<u64, Error> {
        self.on(async |c| count(c, table).await)
    }

    fn per_minute(&mut self, since_ms: i64) -> Result<Vec<super::MinuteCount>, Error> {
        self.on(async |c| per_minute(c, since_ms).await)
    }
}

/// Writes one audit entry as `instance`'s (`leo client|device|agent` on a PostgreSQL store):
/// the operator's own command, on whichever host, so not a leader's write and not fenced.
pub fn record(db: &Database, instance: String, row: AuditRow) -> Result<(), PgError> {
    db.blocking(move |mut client| async move {
        let began = client
            .transaction()
            .await
            .map_err(PgError::doing("begin a write"))?;
        write(
            &Unfenced::within(&began, fence::OPERATOR),
            &instance,
            &[],
            &[row],
        )
        .await?;
        began
            .commit()
            .await
            .map_err(PgError::doing("commit a write"))
    })
}

/// A count or size as PostgreSQL's `BIGINT`.
fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One column of `rows`, as the array `UNNEST` takes.
fn column<'a, R, T>(rows: &'a [R], f: impl Fn(&'a R) -> T) -> Vec<T> {
    rows.iter().map(f).collect()
}

const INSERT_CALLS: &str = "INSERT INTO history (instance, id, tool, grp, agent, session,
        client_id, app_name, outcome, error_code, reason, created_at, claimed_at, ended_at,
        ended_ms, wait_ms, work_ms, duration_ms, arguments_bytes, result_bytes, arguments, result)
    SELECT $1, id, tool, grp, agent, session, client_id, app_name, outcome, error_code, reason,
        created_at, claimed_at, ended_at, ended_ms, wait_ms, work_ms, duration_ms,
        arguments_bytes, result_bytes, arguments, result
    FROM UNNEST($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
        $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
        $15::int8[], $16::int8[], $17::int8[], $18::int8[], $19::int8[], $20::int8[],
        $21::text[], $22::text[])
        WITH ORDINALITY AS u(id, tool, grp, agent, session, client_id, app_name, outcome,
            error_code, reason, created_at, claimed_at, ended_at, ended_ms, wait_ms, work_ms,
            duration_ms, arguments_bytes, result_bytes, arguments, result, n)
    ORDER BY n
    ON CONFLICT (id) DO NOTHING
    RETURNING id";

const INSERT_AUDITS: &str = "INSERT INTO audit (instance, at, at_ms, principal, token_kind,
        action, target, detail, prev, hash)
    SELECT $1, at, at_ms, principal, token_kind, action, target, detail, prev, hash
    FROM UNNEST($2::text[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[],
        $8::text[], $9::bytea[], $10::bytea[])
        WITH ORDINALITY AS u(at, at_ms, principal, token_kind, action, target, detail, prev,
            hash, n)
    ORDER BY n";

/// Taken before the chain's head is read, held to the commit: one writer at a time appends to
/// the chain, whichever instance or `leo` command it is, so it never forks. Reads go on.
const LOCK_AUDIT: &str = "LOCK TABLE audit IN EXCLUSIVE MODE";

const AUDIT_HEAD: &str = "SELECT hash FROM audit ORDER BY seq DESC LIMIT 1";

/// Writes `calls` and `audits` as `instance`'s, in their order, on `tx`: in the transaction a
/// leader's fence began (see `lease`), or alone for the operator's one audit entry; for each
/// call, whether it was new.
async fn write(
    tx: &Tx<'_>,
    instance: &str,
    calls: &[CallRow],
    audits: &[AuditRow],
) -> Result<Vec<bool>, PgError> {
    let mut new = Vec::with_capacity(calls.len());
    if !calls.is_empty() {
        let statement = tx
            .prepare_cached(INSERT_CALLS)
            .await
            .map_err(PgError::doing("write the history"))?;
        let rows = tx
            .query(&statement, &call_columns(instance, calls).refs())
            .await
            .map_err(PgError::doing("write the history"))?;
        let mut written: std::collections::HashSet<String> =
            rows.iter().map(|r| r.get(0)).collect();
        new.extend(calls.iter().map(|c| written.remove(&c.id)));
    }
    if !audits.is_empty() {
        let doing = || PgError::doing("write the audit trail");
        tx.batch_execute(LOCK_AUDIT).await.map_err(doing())?;
        let head = tx.prepare_cached(AUDIT_HEAD).await.map_err(doing())?;
        let head: Option<Vec<u8>> = tx
            .query_opt(&head, &[])
            .await
            .map_err(doing())?
            .and_then(|r| r.get(0));
        let mut prev = head.unwrap_or_else(|| chain::GENESIS.to_vec());
        let links: Vec<(Vec<u8>, Vec<u8>)> = audits
            .iter()
            .map(|a| {
                let hash = chain::link(&prev, Some(instance), a);
                (std::mem::replace(&mut prev, hash.clone()), hash)
            })
            .collect();
        let statement = tx.prepare_cached(INSERT_AUDITS).await.map_err(doing())?;
        tx.execute(&statement, &audit_columns(instance, audits, links).refs())
            .await
            .map_err(doing())?;
    }
    Ok(new)
}

/// Statement parameters of several types.
struct Params(Vec<Box<dyn ToSql + Sync + Send>>);

impl Params {
    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// `INSERT_CALLS`'s parameters: the instance, then one array per column.
fn call_columns(instance: &str, calls: &[CallRow]) -> Params {
    let text = |f: fn(&CallRow) -> &String| -> Box<dyn ToSql + Sync + Send> {
        Box::new(column(calls, |c| f(c).clone()))
    };
    let opt_text = |f: fn(&CallRow) -> &Option<String>| -> Box<dyn ToSql + Sync + Send> {
        Box::new(column(calls, |c| f(c).clone()))
    };
    let opt_int = |f: fn(&CallRow) -> Option<u64>| -> Box<dyn ToSql + Sync + Send> {
        Box::new(column(calls, |c| f(c).map(big)))
    };
    Params(vec![
        Box::new(instance.to_owned()),
        text(|c| &c.id),
        text(|c| &c.tool),
        text(|c| &c.group),
        text(|c| &c.agent),
        text(|c| &c.session),
        opt_text(|c| &c.client_id),
        opt_text(|c| &c.app_name),
        Box::new(column(calls, |c| c.outcome.as_str().to_owned())),
        opt_text(|c| &c.error_code),
        opt_text(|c| &c.reason),
        text(|c| &c.created_at),
        opt_text(|c| &c.claimed_at),
        text(|c| &c.ended_at),
        Box::new(column(calls, |c| c.ended_ms)),
        opt_int(|c| c.wait_ms),
        opt_int(|c| c.work_ms),
        Box::new(column(calls, |c| big(c.duration_ms))),
        Box::new(column(calls, |c| big(c.arguments_bytes))),
        opt_int(|c| c.result_bytes),
        opt_text(|c| &c.arguments),
        opt_text(|c| &c.result),
    ])
}

/// `INSERT_AUDITS`'s parameters; `links` are each entry's `prev` and `hash`.
fn audit_columns(instance: &str, audits: &[AuditRow], links: Vec<(Vec<u8>, Vec<u8>)>) -> Params {
    let text = |f: fn(&AuditRow) -> &String| -> Box<dyn ToSql + Sync + Send> {
        Box::new(column(audits, |a| f(a).clone()))
    };
    let opt_text = |f: fn(&AuditRow) -> &Option<String>| -> Box<dyn ToSql + Sync + Send> {
        Box::new(column(audits, |a| f(a).clone()))
    };
    Params(vec![
        Box::new(instance.to_owned()),
        text(|a| &a.at),
        Box::new(column(audits, |a| a.at_ms)),
        text(|a| &a.principal),
        text(|a| &a.token_kind),
        text(|a| &a.action),
        opt_text(|a| &a.target),
        opt_text(|a| &a.detail),
        Box::new(column(&links, |l| l.0.clone())),
        Box::new(column(&links, |l| l.1.clone())),
    ])
}

/// Ended calls, newest first; `contents` includes the stored arguments and result.
async fn list_calls(
    client: &Client,
    q: &CallQuery,
    contents: bool,
) -> Result<Vec<EndedRequest>, PgError> {
    let mut sql = String::from(
        "SELECT seq, id, tool, grp, agent, session, client_id, app_name, outcome, error_code,
            reason, created_at, claimed_at, ended_at, wait_ms, work_ms, duration_ms,
            arguments_bytes, result_bytes, arguments, result, instance FROM history WHERE true",
    );
    let mut args = Params(Vec::new());
    let mut add = |clause: &str, v: Box<dyn ToSql + Sync + Send>| {
        args.0.push(v);
        sql.push_str(&format!(" {clause} ${}", args.0.len()));
    };
    if let Some(b) = q.before {
        add("AND seq <", Box::new(big(b)));
    }
    if let Some(t) = &q.tool {
        add("AND tool =", Box::new(t.clone()));
    }
    if let Some(a) = &q.agent {
        add("AND agent =", Box::new(a.clone()));
    }
    if let Some(o) = q.outcome {
        add("AND outcome =", Box::new(o.as_str().to_owned()));
    }
    add("ORDER BY seq DESC LIMIT", Box::new(i64::from(q.limit)));
    let statement = client
        .prepare_cached(&sql)
        .await
        .map_err(PgError::doing("read the history"))?;
    let rows = client
        .query(&statement, &args.refs())
        .await
        .map_err(PgError::doing("read the history"))?;
    rows.iter().map(|r| ended_of(r, contents)).collect()
}

/// One row of `history` as the route shows it.
fn ended_of(r: &tokio_postgres::Row, contents: bool) -> Result<EndedRequest, PgError> {
    let unsigned = |i: usize| -> u64 { u64::try_from(r.get::<_, i64>(i)).unwrap_or(0) };
    let opt_unsigned = |i: usize| -> Option<u64> {
        r.get::<_, Option<i64>>(i)
            .map(|n| u64::try_from(n).unwrap_or(0))
    };
    let json = |i: usize| -> Option<serde_json::Value> {
        r.get::<_, Option<String>>(i)
            .filter(|_| contents)
            .and_then(|t| serde_json::from_str(&t).ok())
    };
    let client_id: Option<String> = r.get(6);
    let outcome: String = r.get(8);
    Ok(EndedRequest {
        seq: unsigned(0),
        id: r.get::<_, String>(1).into(),
        tool: r.get(2),
        group: r.get(3),
        agent: r.get(4),
        session: r.get(5),
        app: client_id.map(|client_id| CallApp {
            client_id: client_id.into(),
            name: r.get(7),
        }),
        outcome: CallOutcome::parse(&outcome)
            .map_err(|e| PgError::Unreadable(format!("history: {e}")))?,
        error_code: r.get(9),
        reason: r.get(10),
        created_at: r.get(11),
        claimed_at: r.get(12),
        ended_at: r.get(13),
        wait_ms: opt_unsigned(14),
        work_ms: opt_unsigned(15),
        duration_ms: unsigned(16),
        arguments_bytes: unsigned(17),
        result_bytes: opt_unsigned(18),
        arguments: json(19),
        result: json(20),
        instance: r.get(21),
    })
}

/// Audit entries, newest first.
async fn list_audit(
    client: &Client,
    limit: u32,
    before: Option<u64>,
) -> Result<Vec<AuditEntry>, PgError> {
    let before = before.map_or(i64::MAX, big);
    let statement = client
        .prepare_cached(
            "SELECT seq, at, principal, token_kind, action, target, detail, instance FROM audit
             WHERE seq < $1 ORDER BY seq DESC LIMIT $2",
        )
        .await
        .map_err(PgError::doing("read the audit trail"))?;
    let rows = client
        .query(&statement, &[&before, &i64::from(limit)])
        .await
        .map_err(PgError::doing("read the audit trail"))?;
    Ok(rows
        .iter()
        .map(|r| AuditEntry {
            seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            at: r.get(1),
            principal: r.get(2),
            token_kind: r.get(3),
            action: r.get(4),
            target: r.get(5),
            detail: r.get(6),
            instance: r.get(7),
        })
        .collect())
}

/// Audit entries with their chain, oldest first, after `after` (`Log::audit_chain`).
async fn audit_chain(client: &Client, after: u64, limit: u32) -> Result<Vec<Chained>, PgError> {
    let statement = client
        .prepare_cached(
            "SELECT seq, at, at_ms, principal, token_kind, action, target, detail, instance,
                prev, hash
             FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .await
        .map_err(PgError::doing("read the audit trail"))?;
    let rows = client
        .query(&statement, &[&big(after), &i64::from(limit)])
        .await
        .map_err(PgError::doing("read the audit trail"))?;
    Ok(rows
        .iter()
        .map(|r| Chained {
            seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            row: AuditRow {
                at: r.get(1),
                at_ms: r.get(2),
                principal: r.get(3),
                token_kind: r.get(4),
                action: r.get(5),
                target: r.get(6),
                detail: r.get(7),
            },
            instance: r.get(8),
            prev: r.get(9),
            hash: r.get(10),
        })
        .collect())
}

/// The table of each log, and the column its age is read from.
fn table_of(table: Table) -> (&'static str, &'static str) {
    match table {
        Table::Calls => ("history", "ended_ms"),
        Table::Audit => ("audit", "at_ms"),
    }
}

/// Deletes rows older than `cutoff_ms` and all but the newest `max_rows`; how many.
async fn prune(
    client: &Fenced<'_>,
    table: Table,
    cutoff_ms: i64,
    max_rows: Option<u64>,
) -> Result<usize, PgError> {
    let (name, time) = table_of(table);
    let doing = PgError::doing("prune the history");
    let mut gone = client
        .execute(
            &format!("DELETE FROM {name} WHERE {time} < $1"),
            &[&cutoff_ms],
        )
        .await
        .map_err(doing)?;
    if let Some(max) = max_rows {
        let edge = client
            .query_opt(
                &format!("SELECT seq FROM {name} ORDER BY seq DESC LIMIT 1 OFFSET $1"),
                &[&big(max)],
            )
            .await
            .map_err(PgError::doing("prune the history"))?;
        if let Some(edge) = edge {
            let edge: i64 = edge.get(0);
            gone += client
                .execute(&format!("DELETE FROM {name} WHERE seq <= $1"), &[&edge])
                .await
                .map_err(PgError::doing("prune the history"))?;
        }
    }
    Ok(usize::try_from(gone).unwrap_or(usize::MAX))
}

/// How many rows `table` holds.
async fn count(client: &Client, table: Table) -> Result<u64, PgError> {
    let (name, _) = table_of(table);
    let row = client
        .query_one(&format!("SELECT count(*) FROM {name}"), &[])
        .await
        .map_err(PgError::doing("count the history"))?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

/// How many calls ended in each minute from `since_ms` on, by outcome, on every instance.
async fn per_minute(client: &Client, since_ms: i64) -> Result<Vec<super::MinuteCount>, PgError> {
    let statement = client
        .prepare_cached(
            "SELECT ended_ms / 60000, outcome, count(*) FROM history WHERE ended_ms >= $1
             GROUP BY 1, 2",
        )
        .await
        .map_err(PgError::doing("count the history"))?;
    let rows = client
        .query(&statement, &[&since_ms])
        .await
        .map_err(PgError::doing("count the history"))?;
    rows.iter()
        .map(|r| {
            let outcome: String = r.get(1);
            let outcome = CallOutcome::parse(&outcome)
                .map_err(|e| PgError::Unreadable(format!("history: {e}")))?;
            Ok((
                r.get(0),
                outcome,
                u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> CallRow {
        CallRow::for_test(id)
    }

    /// The history and audit rows of a leader are fenced by its lead: written while it leads,
    /// refused once another instance took the lease, and a `leo` command's entry (no lead)
    /// is written whoever leads.
    #[test]
    fn a_deposed_leaders_history_and_audit_rows_are_refused() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let Some(pg) = rt.block_on(leo_testkit::postgres::database()) else {
            return;
        };
        let admin = rt.block_on(pg.client());
        let db = Database::open(&pg.url).unwrap();
        let mut log = Pg::open(&db, "i_a".into());
        let audit = |action: &str| AuditRow {
            action: action.into(),
            ..AuditRow::default()
        };
        // A `leo` command's entry: no lead, written (and the schema migrated).
        record(&db, "i_a".into(), audit("client_add")).unwrap();
        // No lead yet: a broker's rows are refused.
        assert!(log.write(&[row("r_0")], &[]).is_err());
        rt.block_on(admin.batch_execute(
            "INSERT INTO cluster (one, key, leader, epoch) VALUES (true, 'k', 'i_a', 1)",
        ))
        .unwrap();
        db.set_lead(crate::postgres::Lead {
            me: "i_a".into(),
            epoch: 1,
        });
        assert_eq!(log.write(&[row("r_1")], &[audit("claim")]).unwrap(), [true]);
        rt.block_on(admin.batch_execute("UPDATE cluster SET leader = 'i_b', epoch = 2"))
            .unwrap();
        let refused = log.write(&[row("r_2")], &[audit("result")]).unwrap_err();
        assert!(
            matches!(&refused, Error::Database(e) if e.is_fenced()),
            "{refused:?}"
        );
        let ids = |sql: &str| -> Vec<String> {
            let rows = rt.block_on(admin.query(sql, &[])).unwrap();
            rows.iter().map(|r| r.get(0)).collect()
        };
        assert_eq!(ids("SELECT id FROM history ORDER BY seq"), ["r_1"]);
        assert_eq!(
            ids("SELECT action FROM audit ORDER BY seq"),
            ["client_add", "claim"]
        );
    }

    /// Instances and `leo` commands appending at once never fork the cluster's chain: each
    /// appends under the table's lock.
    #[test]
    fn writers_appending_at_once_keep_one_chain() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let Some(pg) = rt.block_on(leo_testkit::postgres::database()) else {
            return;
        };
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let url = pg.url.clone();
                std::thread::spawn(move || {
                    let db = Database::open(&url).unwrap();
                    for n in 0..10 {
                        let row = AuditRow {
                            action: format!("w{w}_{n}"),
                            ..AuditRow::default()
                        };
                        record(&db, format!("i_{w}"), row).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let db = Database::open(&pg.url).unwrap();
        let verdict = chain::verify(&mut Pg::open(&db, "i_0".into())).unwrap();
        assert!(
            matches!(verdict, chain::Verdict::Chains { entries: 40, .. }),
            "{verdict:?}"
        );
    }
}
