//! The PostgreSQL schema, as append-only migrations numbered in the table `leo_schema`.
//!
//! The same rule as SQLite's `PRAGMA user_version` (`store::schema`): a migration is never
//! edited once released, a database written by an older broker is brought up to date by the
//! migrations it has not seen, in one transaction, and a newer one is refused at start. Several
//! instances may start at once on one database, so the check and the migration run under
//! `pg_advisory_lock(SCHEMA_LOCK)`: exactly one of them migrates, the others then find the
//! schema current.

use deadpool_postgres::Client;

use super::PgError;

/// The advisory lock key the migrations run under (`leo` in ASCII).
pub const SCHEMA_LOCK: i64 = 0x6c_65_6f;

/// Each entry moves the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: the tables of `store::schema` (live calls, recent endings with their undelivered
    // outcome, unread messages, resumable clients, owners) and the instances that use the
    // database. `n` keeps the order rows were written in, as SQLite's rowid does.
    "CREATE TABLE live (
        n BIGINT GENERATED ALWAYS AS IDENTITY,
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        local_id BIGINT NOT NULL,
        grp TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        timeout_s BIGINT,
        deadline_ms BIGINT,
        created_at TEXT NOT NULL,
        claimed_by TEXT
    );
    CREATE TABLE ended (
        n BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        how TEXT NOT NULL,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        local_id BIGINT NOT NULL,
        outcome TEXT
    );
    CREATE TABLE mail (
        n BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        agent TEXT NOT NULL,
        text TEXT NOT NULL,
        sender TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE INDEX mail_agent ON mail (agent, n);
    CREATE TABLE clients (
        n BIGINT GENERATED ALWAYS AS IDENTITY,
        client_id TEXT PRIMARY KEY,
        resume_key TEXT NOT NULL UNIQUE,
        principal TEXT NOT NULL,
        name TEXT
    );
    CREATE TABLE owners (
        agent TEXT NOT NULL,
        grp TEXT NOT NULL,
        client_id TEXT NOT NULL,
        PRIMARY KEY (agent, grp)
    );
    CREATE TABLE instances (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid BIGINT NOT NULL,
        version TEXT NOT NULL,
        started_at TIMESTAMPTZ NOT NULL,
        seen_at TIMESTAMPTZ NOT NULL
    );",
    // 2: the active cluster (see `lease`). `instances.url` is where an instance's peers reach
    // it; `cluster` is one row: the key instances forward with, the leader and its epoch,
    // bumped at each take. `leo_fence` is the first statement of every write batch: it fails
    // the batch's transaction unless the writer's instance still leads in its epoch, and its
    // `FOR SHARE` makes a take wait for a batch in flight, so a new leader restores only after
    // the old one's last commit, and the old one can commit nothing after the take.
    "ALTER TABLE instances ADD COLUMN url TEXT;
    CREATE TABLE cluster (
        one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
        key TEXT NOT NULL,
        leader TEXT,
        epoch BIGINT NOT NULL DEFAULT 0
    );
    CREATE FUNCTION leo_fence(me TEXT, held BIGINT) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM cluster WHERE leader = me AND epoch = held FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'instance % no longer leads this database', me
                USING ERRCODE = 'LEO01';
        END IF;
        RETURN true;
    END $$;",
    // The cluster's tokens (`store::postgres::tokens`): every instance on the database accepts
    // exactly these. `kind` is `operator`, `agent` (the shared agent token; both with the name
    // ''), `device`, `client` (with its `can_message` globs) or `own_agent` (`leo agent add`).
    // The token text is kept as the files keep it: instances write the operator and agent
    // tokens into their own `state/`, so those must be readable (docs/security.md).
    "CREATE TABLE tokens (
        kind TEXT NOT NULL
            CHECK (kind IN ('operator', 'agent', 'device', 'client', 'own_agent')),
        name TEXT NOT NULL,
        token TEXT NOT NULL UNIQUE,
        can_message TEXT[] NOT NULL DEFAULT '{}',
        created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (kind, name)
    );",
    // The history of ended calls and the audit trail (`history::postgres`), shared by every
    // instance on the database, as `state/history.db` holds one instance's. `instance` is the
    // id of the instance whose broker (or `leo` command) wrote the row; `seq` orders each log
    // across instances and is the pages' cursor, as SQLite's rowid is there. Self-contained:
    // it reads no other table.
    "CREATE TABLE history (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        instance TEXT NOT NULL,
        tool TEXT NOT NULL,
        grp TEXT NOT NULL,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        client_id TEXT,
        app_name TEXT,
        outcome TEXT NOT NULL,
        error_code TEXT,
        reason TEXT,
        created_at TEXT NOT NULL,
        claimed_at TEXT,
        ended_at TEXT NOT NULL,
        ended_ms BIGINT NOT NULL,
        wait_ms BIGINT,
        work_ms BIGINT,
        duration_ms BIGINT NOT NULL,
        arguments_bytes BIGINT NOT NULL,
        result_bytes BIGINT,
        arguments TEXT,
        result TEXT
    );
    CREATE INDEX history_by_end ON history (ended_ms);
    CREATE TABLE audit (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        instance TEXT NOT NULL,
        at TEXT NOT NULL,
        at_ms BIGINT NOT NULL,
        principal TEXT NOT NULL,
        token_kind TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT,
        detail TEXT
    );
    CREATE INDEX audit_by_time ON audit (at_ms);",
    // The webhook providers (`webhooks::store`), the cluster's as `state/webhooks.json` is one
    // broker's: whichever instance leads delivers to the same ones with the same secrets and
    // client ids. One row each, its body the file's entry (it holds the signing secret).
    "CREATE TABLE webhooks (
        name TEXT PRIMARY KEY,
        body TEXT NOT NULL
    );",
    // The definition agents were last offered under each name, as SQLite's migration 3: a new
    // leader still holds a changed definition back under `client_tools.pin_definitions`. And
    // who serves which group now, through which instance (a mirror, emptied by each leader).
    "CREATE TABLE definitions (
        name TEXT PRIMARY KEY,
        grp TEXT NOT NULL,
        digest TEXT NOT NULL,
        definition TEXT NOT NULL
    );
    CREATE TABLE registrations (
        client_id TEXT NOT NULL,
        grp TEXT NOT NULL,
        tools TEXT NOT NULL,
        via TEXT,
        PRIMARY KEY (client_id, grp)
    );",
    // `leo cluster rotate-key`: the key before the current one, which leaders still accept
    // until `previous_until`, while followers take the new one up.
    "ALTER TABLE cluster ADD COLUMN previous_key TEXT, ADD COLUMN previous_until TIMESTAMPTZ;",
    // OAuth (`store::oauth`), as SQLite's migration 4: clients, grants and their tokens (as
    // SHA-256 hashes), shared so that whichever instance leads honours and revokes the same.
    "CREATE TABLE oauth_clients (
        client_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        redirect_uris TEXT NOT NULL,
        secret_hash TEXT,
        how TEXT NOT NULL,
        created_ms BIGINT NOT NULL
    );
    CREATE TABLE oauth_grants (
        id TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        resource TEXT NOT NULL,
        approved_by TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        revoked BOOLEAN NOT NULL DEFAULT false
    );
    CREATE TABLE oauth_tokens (
        hash TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        expires_ms BIGINT NOT NULL,
        used BOOLEAN NOT NULL DEFAULT false
    );
    CREATE INDEX oauth_tokens_grant ON oauth_tokens (grant_id);",
    // A live call's approval (see `store::StoredCall::approval`).
    "ALTER TABLE live ADD COLUMN approval TEXT;",
    // The audit trail's chain (`history::chain`), as SQLite's migration 3 of
    // `state/history.db`: each entry's hash and the hash of the one before; entries written
    // before this have neither.
    "ALTER TABLE audit ADD COLUMN prev BYTEA, ADD COLUMN hash BYTEA;",
];

/// The schema version this broker writes.
pub fn current() -> i32 {
    MIGRATIONS.len() as i32
}

/// Brings the database to [`current`] under the advisory lock, or refuses a newer one.
pub async fn migrate(client: &mut Client) -> Result<(), PgError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(PgError::doing("take the schema lock"))?;
    let done = migrate_locked(client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(PgError::doing("release the schema lock"));
    done.and(unlocked.map(drop))
}

async fn migrate_locked(client: &mut Client) -> Result<(), PgError> {
    let tx = client
        .transaction()
        .await
        .map_err(PgError::doing("begin the migration"))?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS leo_schema (version INTEGER NOT NULL)")
        .await
        .map_err(PgError::doing("create the schema table"))?;
    let found: i32 = tx
        .query_opt("SELECT version FROM leo_schema", &[])
        .await
        .map_err(PgError::doing("read the schema version"))?
        .map(|r| r.get(0))
        .unwrap_or(0);
    let known = current();
    if found > known {
        return Err(PgError::NewerSchema { found, known });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(sql)
            .await
            .map_err(PgError::doing("migrate the schema"))?;
        tracing::info!(version = i + 1, "database schema migrated");
    }
    if found < known {
        tx.execute("DELETE FROM leo_schema", &[])
            .await
            .and(
                tx.execute("INSERT INTO leo_schema (version) VALUES ($1)", &[&known])
                    .await,
            )
            .map_err(PgError::doing("record the schema version"))?;
    }
    tx.commit()
        .await
        .map_err(PgError::doing("commit the migration"))
}
