//! What a handler may ask of the agent's harness besides questions: log messages for the call
//! and completions by the harness's own model (MCP logging and sampling).

use leo_protocol::logging::{LogBody, LogLevel};
use leo_protocol::sampling::SampleBody;
use serde_json::Value;

use crate::call::{Call, json_body};
use crate::error::{Error, Result};

impl Call {
    /// Logs `data` (a string, or any JSON) at `level` for the agent's harness: MCP
    /// `notifications/message`, sent when it reaches the level the harness chose with
    /// `logging/setLevel` (every level until it chooses). `logger` names the part of the app
    /// that speaks. A message is advice: one after the call ended is dropped quietly (`Ok`).
    pub async fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) -> Result<()> {
        let link = self.claimant("log")?;
        let body = LogBody {
            client_id: link.client_id.clone(),
            level,
            logger: logger.map(str::to_owned),
            data,
        };
        body.check().map_err(Error::Config)?;
        let path = format!("/api/v1/client-tools/requests/{}/log", self.id);
        let answer = link.client.post(&path, json_body(&body)?).await?;
        match answer.data::<Value>() {
            Ok(_) => Ok(()),
            Err(Error::Refused { code, .. }) if code.lost_the_race() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Asks the harness's model for a completion: `params` are MCP's `sampling/createMessage`
    /// params (`messages`, `maxTokens`, and any of `systemPrompt`, `modelPreferences`, …), and
    /// the answer is the harness's `CreateMessageResult` (`role`, `content`, `model`,
    /// `stopReason`), waited for at most until the call ends. A harness that did not declare
    /// sampling answers at once with
    /// `Error::Refused { code: leo_protocol::ErrorCode::InputUnsupported, .. }`.
    pub async fn sample(&self, params: Value) -> Result<Value> {
        let link = self.claimant("sample")?;
        let body = SampleBody {
            client_id: link.client_id.clone(),
            params,
        };
        body.check().map_err(Error::Config)?;
        let path = format!("/api/v1/client-tools/requests/{}/sample", self.id);
        // Bounded by the call: the broker answers at its deadline or when it ends.
        link.client
            .post_unbounded(&path, json_body(&body)?)
            .await?
            .data()
    }
}
