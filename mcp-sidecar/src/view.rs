//! What the broker last told this session about tools.
//!
//! The view is one value behind a `watch` channel: the reconnect task writes it from `welcome`
//! and `tools` frames and when the connection drops; the MCP server reads it to list tools, and
//! the native notifier wakes on every change. While the broker is down the client tools are gone
//! (nothing can serve them), but `denied` and `ever_registered` are kept: they do not change
//! without a broker restart, and the next `welcome` refreshes them.

use std::collections::BTreeSet;

use leo_protocol::ipc::{AgentTool, BrokerFrame, Mode};

/// The tool state of this session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// True between a `welcome` and the end of that connection.
    pub connected: bool,
    /// The broker's revision of the tool set.
    pub revision: u64,
    /// Client tools this agent may see now (the broker already removed denied ones).
    pub tools: Vec<AgentTool>,
    /// Whether some app has ever registered a tool; `None` until a first `welcome`.
    pub ever_registered: Option<bool>,
    /// `deny_tools` for this agent; `None` until a first `welcome`.
    pub denied: Option<BTreeSet<String>>,
    /// The operator's mode for this agent (`agents.NAME.mode`), if not `auto`.
    pub mode: Option<Mode>,
}

/// The tools with the words a model reads (description, label, the descriptions inside the
/// schema) through the one sanitizer; the broker applied it too, and a second pass changes
/// nothing. Every listing, native or fallback, reads the view, so this is the one place.
fn sanitized(tools: &[AgentTool]) -> Vec<AgentTool> {
    use leo_protocol::sanitize::{Lines, sanitize, sanitize_schema};
    tools
        .iter()
        .map(|t| {
            let mut input_schema = t.input_schema.clone();
            sanitize_schema(&mut input_schema);
            let output_schema = t.output_schema.clone().map(|mut s| {
                sanitize_schema(&mut s);
                s
            });
            AgentTool {
                annotations: t.annotations,
                output_schema,
                execution: t.execution,
                name: t.name.clone(),
                description: sanitize(&t.description, Lines::Keep).into_owned(),
                input_schema,
                title: t
                    .title
                    .as_deref()
                    .map(|l| sanitize(l, Lines::Join).into_owned()),
                group: t.group.clone(),
            }
        })
        .collect()
}

impl View {
    /// The view after `frame`; frames that carry no tool state leave it as is.
    pub fn apply(&self, frame: &BrokerFrame) -> View {
        match frame {
            BrokerFrame::Welcome {
                revision,
                tools,
                ever_registered,
                denied,
                mode,
                ..
            } => View {
                connected: true,
                revision: *revision,
                tools: sanitized(tools),
                ever_registered: Some(*ever_registered),
                denied: Some(denied.iter().cloned().collect()),
                mode: *mode,
            },
            BrokerFrame::Tools {
                revision,
                tools,
                ever_registered,
            } => View {
                revision: *revision,
                tools: sanitized(tools),
                ever_registered: Some(*ever_registered),
                ..self.clone()
            },
            _ => self.clone(),
        }
    }

    /// The view once the connection is gone.
    pub fn disconnected(&self) -> View {
        View {
            connected: false,
            tools: Vec::new(),
            ..self.clone()
        }
    }

    /// The client tools to show, without any denied name.
    pub fn visible_tools(&self, denied: &BTreeSet<String>) -> Vec<AgentTool> {
        self.tools
            .iter()
            .filter(|t| !denied.contains(&t.name))
            .cloned()
            .collect()
    }
}
