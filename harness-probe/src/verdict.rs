//! From records to verdicts: did each client list tools again after the notification?
//!
//! Per session (one probe process): `yes` if a `tools/list` came after the notification,
//! `no` if the client stayed connected for the grace window after it and never listed again,
//! `unknown` otherwise (it never listed, left before the notification, left inside the grace
//! window, or could not be notified), always with the reason in words.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::Record;
use crate::serve::{ERROR_TOOL, IMAGE_TOOL, NEW_TOOL};

/// The answer to "does this client re-list on `list_changed`".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Honors {
    Yes,
    No,
    Unknown,
}

impl Honors {
    pub fn as_str(self) -> &'static str {
        match self {
            Honors::Yes => "yes",
            Honors::No => "no",
            Honors::Unknown => "unknown",
        }
    }
}

/// `clientInfo` as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientId {
    pub name: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// What happened to one of the probe's special tools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolUse {
    /// Times the client called it.
    pub calls: u32,
    /// Whether the client cancelled a call (`notifications/cancelled` for its id).
    pub cancelled: bool,
    /// What the client reported receiving (from reference clients), or what the model was
    /// shown (from a fake model server), verbatim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen: Vec<Value>,
}

/// The verdict for one probe session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionVerdict {
    pub client: Option<ClientId>,
    #[serde(default)]
    pub protocol_version: Option<String>,
    /// `initialize` or `request _meta`.
    #[serde(default)]
    pub identified_via: Option<String>,
    #[serde(default)]
    pub capabilities: Value,
    pub honors_list_changed: Honors,
    pub latency_ms: Option<u64>,
    pub reason: String,
    /// `session` or `subscription`; none if the notification was never sent.
    pub list_changed_via: Option<String>,
    pub tools_lists: u32,
    pub called_new_tool: bool,
    /// Milliseconds the client stayed after the notification, as far as the records show.
    pub observed_after_notify_ms: Option<u64>,
    pub image_tool: ToolUse,
    pub error_tool: ToolUse,
    /// Requests and notifications by method.
    pub methods: BTreeMap<String, u32>,
    /// What the reference client or the fake model noted (what the SDK did by itself, which
    /// probe tools the model was offered), in order, without repeats.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Groups `records` by probe session (in the order sessions started) and judges each.
/// Records from the client or model side are attached to the session whose client name they
/// carry, or to the only session.
pub fn judge(records: &[Record], grace_ms: u64) -> Vec<SessionVerdict> {
    let mut order: Vec<&str> = Vec::new();
    for r in records {
        if let Some(s) = r.session.as_deref()
            && !order.contains(&s)
        {
            order.push(s);
        }
    }
    let side: Vec<&Record> = records.iter().filter(|r| r.session.is_none()).collect();
    let mut verdicts: Vec<SessionVerdict> = order
        .iter()
        .map(|s| {
            let own: Vec<&Record> = records
                .iter()
                .filter(|r| r.session.as_deref() == Some(*s))
                .collect();
            judge_session(&own, grace_ms)
        })
        .collect();
    let only = verdicts.len() == 1;
    for r in side {
        let target = verdicts.iter_mut().find(|v| {
            only || match (r.str("client_name"), &v.client) {
                (Some(name), Some(c)) => c.name == name,
                _ => false,
            }
        });
        let Some(v) = target else { continue };
        let tool = r.str("tool").unwrap_or("");
        let mut seen = r.fields.clone();
        seen.remove("tool");
        seen.remove("client_name");
        if let Some(src) = &r.source {
            seen.insert("source".into(), Value::String(src.clone()));
        }
        let seen = Value::Object(seen);
        let note = match (r.event.as_str(), r.fields.get("probe_tools_offered")) {
            ("model_offered", Some(offered)) => Some(format!(
                "the model was offered these probe tools: {offered}"
            )),
            _ => r.str("text").map(str::to_owned),
        };
        match tool {
            IMAGE_TOOL => v.image_tool.seen.push(seen),
            ERROR_TOOL => v.error_tool.seen.push(seen),
            _ => {
                if let Some(note) = note
                    && !v.notes.contains(&note)
                {
                    v.notes.push(note);
                }
            }
        }
    }
    verdicts
}

#[allow(
    clippy::too_many_lines,
    reason = "a measurement or probe script read top to bottom; not split yet"
)]
fn judge_session(records: &[&Record], grace_ms: u64) -> SessionVerdict {
    let mut client = None;
    let mut protocol_version = None;
    let mut identified_via = None;
    let mut capabilities = Value::Null;
    let mut methods = BTreeMap::new();
    let mut tools_lists = 0;
    let mut first_list_t = None;
    let mut notified_t = None;
    let mut via = None;
    let mut undeliverable = None;
    let mut relist_after = None;
    let mut called_new_tool = false;
    let mut closed_t = None;
    let mut last_t = 0;
    let mut waited = None;
    let mut image_tool = ToolUse::default();
    let mut error_tool = ToolUse::default();
    let mut ids: BTreeMap<String, &'static str> = BTreeMap::new();
    for r in records {
        let t = r.t_ms.unwrap_or(0);
        last_t = last_t.max(t);
        match r.event.as_str() {
            "client" if client.is_none() => {
                client = r
                    .fields
                    .get("client")
                    .and_then(|c| serde_json::from_value::<ClientId>(c.clone()).ok());
                protocol_version = r.str("protocol_version").map(str::to_owned);
                identified_via = r.str("via").map(str::to_owned);
                capabilities = r.fields.get("capabilities").cloned().unwrap_or(Value::Null);
            }
            "request" | "notification" => {
                let method = r.str("method").unwrap_or("?").to_owned();
                *methods.entry(method.clone()).or_insert(0) += 1;
                if method == "tools/list" {
                    tools_lists += 1;
                    first_list_t.get_or_insert(t);
                }
                if method == "tools/call" {
                    let id = r.fields.get("id").map(Value::to_string).unwrap_or_default();
                    match r.str("tool") {
                        Some(IMAGE_TOOL) => {
                            image_tool.calls += 1;
                            ids.insert(id, IMAGE_TOOL);
                        }
                        Some(ERROR_TOOL) => {
                            error_tool.calls += 1;
                            ids.insert(id, ERROR_TOOL);
                        }
                        Some(NEW_TOOL) => called_new_tool = true,
                        _ => {}
                    }
                }
                if method == "notifications/cancelled" {
                    let id = r
                        .fields
                        .get("request_id")
                        .map(Value::to_string)
                        .unwrap_or_default();
                    match ids.get(&id) {
                        Some(&IMAGE_TOOL) => image_tool.cancelled = true,
                        Some(&ERROR_TOOL) => error_tool.cancelled = true,
                        _ => {}
                    }
                }
            }
            "list_changed_sent" if r.fields.get("ok") == Some(&Value::Bool(true)) => {
                notified_t.get_or_insert(r.u64("sent_at_ms").unwrap_or(t));
                via.get_or_insert_with(|| r.str("via").unwrap_or("?").to_owned());
            }
            "list_changed_undeliverable" => {
                undeliverable = r.str("reason").map(str::to_owned);
            }
            "relisted" => {
                relist_after.get_or_insert(r.u64("after_ms").unwrap_or(0));
            }
            "new_tool_called" => called_new_tool = true,
            "waited" => {
                waited = waited.max(r.u64("after_notify_ms"));
            }
            "closed" => closed_t = Some(t),
            _ => {}
        }
    }
    let observed = notified_t.map(|n| {
        let end = closed_t.unwrap_or(last_t).max(last_t);
        end.saturating_sub(n).max(waited.unwrap_or(0))
    });
    let (honors, latency, reason) = match (notified_t, relist_after, observed) {
        (Some(_), Some(after), _) => (
            Honors::Yes,
            Some(after),
            format!(
                "listed tools again {after} ms after notifications/tools/list_changed{}",
                if called_new_tool {
                    ", then called the added tool"
                } else {
                    ""
                }
            ),
        ),
        (Some(_), None, Some(obs)) if obs >= grace_ms => (
            Honors::No,
            None,
            format!(
                "stayed connected {obs} ms after notifications/tools/list_changed and never listed tools again"
            ),
        ),
        (Some(_), None, obs) => (
            Honors::Unknown,
            None,
            format!(
                "closed {} ms after notifications/tools/list_changed, inside the {grace_ms} ms grace window, without listing again",
                obs.unwrap_or(0)
            ),
        ),
        (None, _, _) => {
            let reason = if client.is_none() && methods.is_empty() {
                "the client started the probe but completed no handshake".to_owned()
            } else if tools_lists == 0 {
                "the client never sent tools/list, so the probe never changed its tools".to_owned()
            } else if let Some(why) = undeliverable {
                format!("the notification could not be delivered: {why}")
            } else {
                let after = closed_t
                    .unwrap_or(last_t)
                    .saturating_sub(first_list_t.unwrap_or(0));
                format!(
                    "closed the connection {after} ms after its first tools/list, before the probe's notification went out (a health check that lists and exits)"
                )
            };
            (Honors::Unknown, None, reason)
        }
    };
    SessionVerdict {
        client,
        protocol_version,
        identified_via,
        capabilities,
        honors_list_changed: honors,
        latency_ms: latency,
        reason,
        list_changed_via: via,
        tools_lists,
        called_new_tool,
        observed_after_notify_ms: observed,
        image_tool,
        error_tool,
        methods,
        notes: Vec::new(),
    }
}

/// One verdict for a set of sessions: `yes` if any session re-listed (the client can), else
/// `no` if any session proved it does not, else `unknown`. Returns the index of the session
/// the answer comes from.
pub fn overall(sessions: &[SessionVerdict]) -> Option<usize> {
    let pick = |h: Honors| sessions.iter().position(|s| s.honors_list_changed == h);
    pick(Honors::Yes)
        .or_else(|| pick(Honors::No))
        .or_else(|| pick(Honors::Unknown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(t: u64, event: &str, fields: Value) -> Record {
        let mut v = json!({"session": "s", "t_ms": t, "unix_ms": 0, "event": event});
        if let (Some(o), Value::Object(f)) = (v.as_object_mut(), fields) {
            o.extend(f);
        }
        serde_json::from_value(v).unwrap()
    }

    fn base() -> Vec<Record> {
        vec![
            rec(0, "session_start", json!({})),
            rec(
                1,
                "client",
                json!({"via": "initialize", "client": {"name": "c", "version": "1"}}),
            ),
            rec(2, "request", json!({"method": "initialize"})),
            rec(5, "request", json!({"method": "tools/list"})),
            rec(
                110,
                "list_changed_sent",
                json!({"via": "session", "ok": true}),
            ),
        ]
    }

    #[test]
    fn relist_is_yes_with_latency() {
        let mut r = base();
        r.push(rec(140, "request", json!({"method": "tools/list"})));
        r.push(rec(140, "relisted", json!({"after_ms": 30})));
        r.push(rec(
            150,
            "request",
            json!({"method": "tools/call", "tool": NEW_TOOL, "id": 4}),
        ));
        let v = judge(&r, 5000);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].honors_list_changed, Honors::Yes);
        assert_eq!(v[0].latency_ms, Some(30));
        assert!(v[0].called_new_tool);
        assert_eq!(v[0].tools_lists, 2);
    }

    #[test]
    fn staying_silent_past_grace_is_no() {
        let mut r = base();
        r.push(rec(5200, "waited", json!({"after_notify_ms": 5000})));
        let v = judge(&r, 5000);
        assert_eq!(v[0].honors_list_changed, Honors::No, "{}", v[0].reason);
    }

    #[test]
    fn leaving_early_is_unknown() {
        let mut r = base();
        r.push(rec(400, "closed", json!({"reason": "Closed"})));
        assert_eq!(judge(&r, 5000)[0].honors_list_changed, Honors::Unknown);
        let mut r = base();
        r.truncate(4);
        r.push(rec(20, "closed", json!({"reason": "Closed"})));
        let v = judge(&r, 5000);
        assert_eq!(v[0].honors_list_changed, Honors::Unknown);
        assert!(v[0].reason.contains("health check"), "{}", v[0].reason);
    }

    #[test]
    fn side_records_attach_by_client_name() {
        let mut r = base();
        r.push(
            serde_json::from_value(
                json!({"source": "client", "unix_ms": 0, "event": "client_saw",
                "client_name": "c", "tool": IMAGE_TOOL, "content_types": ["image", "text"]}),
            )
            .unwrap(),
        );
        let v = judge(&r, 5000);
        assert_eq!(v[0].image_tool.seen.len(), 1);
        assert_eq!(
            v[0].image_tool.seen[0]["content_types"],
            json!(["image", "text"])
        );
    }
}
