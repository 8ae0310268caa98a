//! The database's schema, as append-only migrations numbered by `PRAGMA user_version`.
//!
//! A migration is never edited once released: a file written by an older broker is brought
//! up to date by running the migrations it has not seen, in order, in one transaction. A file
//! written by a newer broker (a higher version than this one knows) is refused with a clear
//! error instead of being read with assumptions that may be wrong. `crate::sqlite::migrate`
//! runs them, as it does the history's.

/// Each entry moves the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: live requests, recently ended ones (with the outcome until the sidecar has it), and
    // unread messages.
    "CREATE TABLE live (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        local_id INTEGER NOT NULL,
        grp TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        timeout_s INTEGER,
        deadline_ms INTEGER,
        created_at TEXT NOT NULL,
        claimed_by TEXT
    );
    CREATE TABLE ended (
        n INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        how TEXT NOT NULL,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        local_id INTEGER NOT NULL,
        outcome TEXT
    );
    CREATE TABLE mail (
        n INTEGER PRIMARY KEY AUTOINCREMENT,
        agent TEXT NOT NULL,
        text TEXT NOT NULL,
        sender TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE INDEX mail_agent ON mail (agent, n);",
    // 2: provider streams that may resume: their client id, resume key and claims' owners.
    "CREATE TABLE clients (
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
    );",
    // 3: the definition agents were last offered under each name (pinning's reference), and
    // who serves which group now (a mirror, emptied at start).
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
    // 4: OAuth (`oauth`): the clients that registered (or whose metadata document was read),
    // the grants an approver consented to, and their tokens, kept only as SHA-256 hashes.
    "CREATE TABLE oauth_clients (
        client_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        redirect_uris TEXT NOT NULL,
        secret_hash TEXT,
        how TEXT NOT NULL,
        created_ms INTEGER NOT NULL
    );
    CREATE TABLE oauth_grants (
        id TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        resource TEXT NOT NULL,
        approved_by TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE oauth_tokens (
        hash TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        expires_ms INTEGER NOT NULL,
        used INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX oauth_tokens_grant ON oauth_tokens (grant_id);",
    // 5: a live call's approval (see `StoredCall::approval`).
    "ALTER TABLE live ADD COLUMN approval TEXT;",
];

/// The schema version this broker writes.
pub fn current() -> u32 {
    MIGRATIONS.len() as u32
}
