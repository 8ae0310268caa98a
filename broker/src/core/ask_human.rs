//! The web console's built-in provider: the `ask_human` tool, served by the broker itself.
//!
//! It lives here rather than in the browser so that a reload, a second tab or a closed laptop
//! lid does not cancel an agent's question: the internal client `console` registers group
//! `console` while the operator's switch is on, its calls wait (`timeout_s: 0`, a handoff) until
//! the operator answers from any console page, and switching off withdraws the tool like any app
//! leaving, so pending questions end `cancelled` (`tool_withdrawn`). The switch is broker-wide
//! and in memory; `console.ask_human: true` in the config turns it on at start.

use leo_protocol::ErrorCode;
use leo_protocol::console::{ASK_HUMAN, AskHumanState, CONSOLE_GROUP};
use leo_protocol::content::Posted;
use leo_protocol::requests::{AckState, RequestAck};
use leo_protocol::tool::ToolDef;
use serde_json::json;
use tracing::{info, warn};

use super::{Broker, ClientInfo};
use crate::refusal::Refusal;
use crate::registry::Registry;

/// The client id (and principal) of the console's built-in provider.
pub const CONSOLE_CLIENT: &str = "console";

/// The tool as agents see it.
fn ask_human_tool() -> ToolDef {
    ToolDef {
        name: ASK_HUMAN.into(),
        description: "Ask the human operator a question and wait for the answer. The question \
            appears in the operator's Leo web console; use it for a decision, a preference or \
            information only the person can give. Give choices when the answer is one of a \
            few options. The answer may take minutes or hours."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, complete enough to answer without other context"},
                "choices": {"type": "array", "items": {"type": "string"}, "description": "Answers the operator can pick with one click"}
            },
            "required": ["question"]
        }),
        timeout_s: Some(0),
        label: Some("Asking the operator".into()),
        ..ToolDef::default()
    }
}

impl Broker {
    /// Switches the console's `ask_human` tool on or off. Switching to the state it is in
    /// changes nothing. On fails with `name_conflict` when an app already registered the name.
    pub fn set_ask_human(&self, on: bool) -> Result<AskHumanState, Refusal> {
        if !on {
            // Withdrawing is what any client leaving does: pending questions end cancelled.
            self.client_gone(CONSOLE_CLIENT);
            return Ok(AskHumanState { on: false });
        }
        let specs = Registry::prepare(CONSOLE_GROUP, vec![ask_human_tool()], None, 0)?;
        let mut core = self.lock();
        if core.clients.contains_key(CONSOLE_CLIENT) {
            return Ok(AskHumanState { on: true });
        }
        let change = core
            .registry
            .register(CONSOLE_CLIENT, CONSOLE_GROUP, specs)?;
        core.next_conn += 1;
        let n = core.next_conn;
        core.clients.insert(
            CONSOLE_CLIENT.to_owned().into(),
            ClientInfo {
                n,
                provider: true,
                principal: CONSOLE_CLIENT.to_owned(),
                // Only so that the operator, naming it over HTTP, is told to use the console.
                owner: "operator".to_owned(),
                name: Some("web console".to_owned()),
                connected_at: leo_protocol::time::now(),
                internal: true,
                webhook: None,
                via: None,
            },
        );
        if let Err(e) = core.ever.remember([ASK_HUMAN]) {
            warn!(error = %e, "cannot write client-tools.json");
        }
        self.after_change(&mut core, change, Vec::new());
        self.touched();
        info!("ask_human switched on");
        Ok(AskHumanState { on: true })
    }

    /// The operator answers one of the console's own calls: claimed and settled as the
    /// internal client in one step, with the answer as a text block; acknowledged once the
    /// ending is on disk.
    pub async fn answer_from_console(&self, id: &str, text: &str) -> Result<RequestAck, Refusal> {
        self.accepted(|| self.answer_now(id, text)).await
    }

    fn answer_now(&self, id: &str, text: &str) -> Result<RequestAck, Refusal> {
        let mut core = self.lock();
        let core = &mut *core;
        let Some((call, _)) = core.requests.get(id) else {
            return Err(core.requests.not_live(id));
        };
        if call.group != CONSOLE_GROUP {
            return Err(Refusal::new(
                ErrorCode::NotProvider,
                format!(
                    "request {id} is a call of tool {:?} of group {:?}; the console answers only its own {ASK_HUMAN} calls",
                    call.tool, call.group
                ),
            ));
        }
        let block = serde_json::value::to_raw_value(&json!({"type": "text", "text": text}))
            .map_err(|e| {
                Refusal::new(
                    ErrorCode::Internal,
                    format!("cannot encode the answer: {e}"),
                )
            })?;
        let content = vec![block];
        let posted = Posted::Content(content);
        let posting = self.history.posting(&posted);
        let call = Self::settle_locked(core, id, CONSOLE_CLIENT, posted, true)?;
        info!(request = id, agent = %call.agent, "the operator answered");
        let by = (CONSOLE_CLIENT.to_owned(), Some("console".to_owned()));
        self.history.settled(id, call, by, posting);
        self.touched();
        Ok(RequestAck {
            id: id.to_owned().into(),
            state: AckState::Settled,
        })
    }
}
