//! Reading the state back at start: what `store::read` reads from SQLite, in the same order.

use deadpool_postgres::Client;
use leo_protocol::ipc::Message;
use leo_protocol::names::ClientId;
use leo_protocol::outcome::CallOutcome;
use leo_protocol::requests::Request;
use serde_json::value::RawValue;

use super::PgError;
use crate::{Restored, StoredCall, StoredClient, StoredDefinition, StoredEnd};

pub async fn restore(client: &Client) -> Result<Restored, PgError> {
    Ok(Restored {
        live: live(client).await?,
        ended: ended(client).await?,
        mail: mail(client).await?,
        clients: clients(client).await?,
        owners: owners(client).await?,
        definitions: definitions(client).await?,
    })
}

async fn rows(client: &Client, sql: &str) -> Result<Vec<tokio_postgres::Row>, PgError> {
    client
        .query(sql, &[])
        .await
        .map_err(PgError::doing("read the state"))
}

async fn live(client: &Client) -> Result<Vec<StoredCall>, PgError> {
    let rows = rows(
        client,
        "SELECT id, agent, session, local_id, grp, tool, arguments, timeout_s, deadline_ms,
         created_at, claimed_by FROM live ORDER BY n",
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| StoredCall {
            request: Request {
                id: r.get::<_, String>(0).into(),
                agent: r.get(1),
                session: r.get(2),
                group: r.get(4),
                tool: r.get(5),
                // Kept as the text that was written; checked as JSON, not parsed into a tree.
                arguments: RawValue::from_string(r.get(6)).unwrap_or_default(),
                timeout_s: r.get::<_, Option<i64>>(7).map(|t| t as u64),
                created_at: r.get(9),
                owner: None,
                // The span ended with the process that opened it.
                traceparent: None,
            },
            local_id: r.get::<_, i64>(3) as u64,
            deadline_ms: r.get(8),
            claimed_by: r.get::<_, Option<String>>(10).map(ClientId::from),
        })
        .collect())
}

async fn ended(client: &Client) -> Result<Vec<StoredEnd>, PgError> {
    let rows = rows(
        client,
        "SELECT id, how, agent, session, local_id, outcome FROM ended ORDER BY n",
    )
    .await?;
    rows.iter()
        .map(|r| {
            let how: String = r.get(1);
            Ok(StoredEnd {
                id: r.get::<_, String>(0).into(),
                // An unknown outcome fails the read: the row is not one this broker wrote.
                how: CallOutcome::parse_stored(&how)
                    .map_err(|e| PgError::Unreadable(format!("ended.how {how:?}: {e}")))?,
                agent: r.get(2),
                session: r.get(3),
                local_id: r.get::<_, i64>(4) as u64,
                outcome: r.get(5),
            })
        })
        .collect()
}

async fn mail(client: &Client) -> Result<Vec<(String, Message)>, PgError> {
    let rows = rows(
        client,
        "SELECT agent, text, sender, at FROM mail ORDER BY n",
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let message = Message {
                text: r.get(1),
                from: r.get(2),
                at: r.get(3),
            };
            (r.get(0), message)
        })
        .collect())
}

async fn clients(client: &Client) -> Result<Vec<StoredClient>, PgError> {
    let rows = rows(
        client,
        "SELECT client_id, resume_key, principal, name FROM clients ORDER BY n",
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| StoredClient {
            client_id: r.get::<_, String>(0).into(),
            resume_key: r.get(1),
            principal: r.get(2),
            name: r.get(3),
        })
        .collect())
}

async fn owners(client: &Client) -> Result<Vec<(String, String, String)>, PgError> {
    let rows = rows(client, "SELECT agent, grp, client_id FROM owners").await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

async fn definitions(client: &Client) -> Result<Vec<StoredDefinition>, PgError> {
    let rows = rows(
        client,
        "SELECT name, grp, digest, definition FROM definitions",
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| StoredDefinition {
            name: r.get(0),
            group: r.get(1),
            digest: r.get(2),
            definition: r.get(3),
        })
        .collect())
}
