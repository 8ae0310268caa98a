//! Reading the state back at start.

use leo_protocol::ipc::Message;
use leo_protocol::names::ClientId;
use leo_protocol::outcome::CallOutcome;
use leo_protocol::requests::Request;
use rusqlite::Connection;
use rusqlite::types::Type;
use serde_json::value::RawValue;

use super::{StoredCall, StoredClient, StoredDefinition, StoredEnd};

/// What the last run left: live calls in the order they were parked, recent endings oldest
/// first, unread messages oldest first, resumable clients and their groups' owners.
#[derive(Debug, Default)]
pub struct Restored {
    pub live: Vec<StoredCall>,
    pub ended: Vec<StoredEnd>,
    pub mail: Vec<(String, Message)>,
    pub clients: Vec<StoredClient>,
    /// `(agent, group, client_id)`.
    pub owners: Vec<(String, String, String)>,
    /// The definitions agents were last offered, by name.
    pub definitions: Vec<StoredDefinition>,
}

pub fn restore(conn: &Connection) -> rusqlite::Result<Restored> {
    Ok(Restored {
        live: live(conn)?,
        ended: ended(conn)?,
        mail: mail(conn)?,
        clients: clients(conn)?,
        owners: owners(conn)?,
        definitions: definitions(conn)?,
    })
}

fn live(conn: &Connection) -> rusqlite::Result<Vec<StoredCall>> {
    let mut s = conn.prepare(
        "SELECT id, agent, session, local_id, grp, tool, arguments, timeout_s, deadline_ms,
         created_at, claimed_by FROM live ORDER BY rowid",
    )?;
    let rows = s.query_map([], |r| {
        let arguments: String = r.get(6)?;
        Ok(StoredCall {
            request: Request {
                id: r.get::<_, String>(0)?.into(),
                agent: r.get(1)?,
                session: r.get(2)?,
                group: r.get(4)?,
                tool: r.get(5)?,
                // Kept as the text that was written; checked as JSON, not parsed into a tree.
                arguments: RawValue::from_string(arguments).unwrap_or_default(),
                timeout_s: r.get::<_, Option<i64>>(7)?.map(|t| t as u64),
                created_at: r.get(9)?,
                owner: None,
                // The span ended with the process that opened it.
                traceparent: None,
            },
            local_id: r.get::<_, i64>(3)? as u64,
            deadline_ms: r.get(8)?,
            claimed_by: r.get::<_, Option<String>>(10)?.map(ClientId::from),
        })
    })?;
    rows.collect()
}

fn ended(conn: &Connection) -> rusqlite::Result<Vec<StoredEnd>> {
    let mut s =
        conn.prepare("SELECT id, how, agent, session, local_id, outcome FROM ended ORDER BY n")?;
    let rows = s.query_map([], |r| {
        let how: String = r.get(1)?;
        Ok(StoredEnd {
            id: r.get::<_, String>(0)?.into(),
            // An unknown outcome fails the read (the file is not one this broker wrote); the
            // old spelling `app_error` still reads.
            how: CallOutcome::parse_stored(&how).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(1, Type::Text, Box::new(e))
            })?,
            agent: r.get(2)?,
            session: r.get(3)?,
            local_id: r.get::<_, i64>(4)? as u64,
            outcome: r.get(5)?,
        })
    })?;
    rows.collect()
}

fn mail(conn: &Connection) -> rusqlite::Result<Vec<(String, Message)>> {
    let mut s = conn.prepare("SELECT agent, text, sender, at FROM mail ORDER BY n")?;
    let rows = s.query_map([], |r| {
        Ok((
            r.get(0)?,
            Message {
                text: r.get(1)?,
                from: r.get(2)?,
                at: r.get(3)?,
            },
        ))
    })?;
    rows.collect()
}

fn clients(conn: &Connection) -> rusqlite::Result<Vec<StoredClient>> {
    let mut s =
        conn.prepare("SELECT client_id, resume_key, principal, name FROM clients ORDER BY rowid")?;
    let rows = s.query_map([], |r| {
        Ok(StoredClient {
            client_id: r.get::<_, String>(0)?.into(),
            resume_key: r.get(1)?,
            principal: r.get(2)?,
            name: r.get(3)?,
        })
    })?;
    rows.collect()
}

fn owners(conn: &Connection) -> rusqlite::Result<Vec<(String, String, String)>> {
    let mut s = conn.prepare("SELECT agent, grp, client_id FROM owners")?;
    let rows = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}

fn definitions(conn: &Connection) -> rusqlite::Result<Vec<StoredDefinition>> {
    let mut s = conn.prepare("SELECT name, grp, digest, definition FROM definitions")?;
    s.query_map([], |r| {
        Ok(StoredDefinition {
            name: r.get(0)?,
            group: r.get(1)?,
            digest: r.get(2)?,
            definition: r.get(3)?,
        })
    })?
    .collect()
}
