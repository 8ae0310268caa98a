//! The app written for the bench: it holds a provider stream and claims and answers every
//! request at once, on 16 keep-alive connections, with the payload of the tool called.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::body::Bytes;
use leo_testkit::{Http, Sse};
use serde_json::{Value, json};

use crate::conn::RawConn;

/// The result body the app posts for each tool, serialized once.
pub struct Answers {
    claim: Bytes,
    by_tool: HashMap<String, Bytes>,
    default: Bytes,
}

impl Answers {
    /// Answers `content` for the tools listed, and one text block `ok` for any other.
    pub fn new(client: &str, contents: impl IntoIterator<Item = (String, Value)>) -> Answers {
        let body = |content: Value| {
            Bytes::from(json!({"client_id": client, "ok": true, "content": content}).to_string())
        };
        Answers {
            claim: Bytes::from(json!({"client_id": client}).to_string()),
            by_tool: contents
                .into_iter()
                .map(|(tool, content)| (tool, body(content)))
                .collect(),
            default: body(json!([{"type": "text", "text": "ok"}])),
        }
    }

    fn result(&self, tool: &str) -> Bytes {
        self.by_tool.get(tool).unwrap_or(&self.default).clone()
    }
}

/// Spawns the app: reads `sse` (a provider stream of `client`) and answers every
/// `client_tool.request`; counts answers in `served`.
pub fn answer_all(
    mut sse: Sse,
    http: Http,
    answers: Answers,
    served: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    let answers = Arc::new(answers);
    tokio::spawn(async move {
        let (tx, rx) = tokio::sync::mpsc::channel::<(String, String)>(4096);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..16 {
            let rx = rx.clone();
            let served = served.clone();
            let answers = answers.clone();
            let Ok(mut conn) = RawConn::open(&http).await else {
                eprintln!("bench app: cannot connect to the broker");
                return;
            };
            tokio::spawn(async move {
                loop {
                    let Some((id, tool)) = rx.lock().await.recv().await else {
                        return;
                    };
                    let claim = conn
                        .post(
                            &format!("/api/v1/client-tools/requests/{id}/claim"),
                            answers.claim.clone(),
                        )
                        .await;
                    match claim {
                        Ok(200) => {}
                        Ok(_) => continue,
                        Err(_) => return,
                    }
                    let result = conn
                        .post(
                            &format!("/api/v1/client-tools/requests/{id}/result"),
                            answers.result(&tool),
                        )
                        .await;
                    if result.is_err() {
                        return;
                    }
                    served.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while let Some(e) = sse.next_or_end().await {
            if e.event != "client_tool.request" {
                continue;
            }
            let (Some(id), Some(tool)) = (e.data["id"].as_str(), e.data["tool"].as_str()) else {
                continue;
            };
            if tx.send((id.to_owned(), tool.to_owned())).await.is_err() {
                return;
            }
        }
    })
}
