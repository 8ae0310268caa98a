//! A tool: its definition as the broker registers it, and the async handler that answers it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use leo_protocol::tool::{Execution, ToolAnnotations, ToolDef};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::call::Call;
use crate::reply::Reply;

/// The boxed future a handler returns.
pub(crate) type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// A type-erased handler.
pub(crate) type Handler = Arc<dyn Fn(Call) -> ReplyFuture + Send + Sync>;

/// A tool and its handler.
#[derive(Clone)]
pub struct Tool {
    pub(crate) def: ToolDef,
    pub(crate) handler: Handler,
    /// Run at once and post the reply with the claim (`answers_at_once`).
    pub(crate) at_once: bool,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool").field("def", &self.def).finish()
    }
}

impl Tool {
    /// A tool named `name` that `handler` answers. The input schema defaults to
    /// `{"type": "object"}` (any object), the timeout to the broker's default.
    ///
    /// The handler is an async function of the `Call`; it returns a `Reply`, an
    /// `AppError`, or `Result<Reply, AppError>` (so `call.args()?` works).
    pub fn new<F, Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Tool
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: Into<Reply>,
    {
        let handler: Handler = Arc::new(move |call: Call| {
            let fut = handler(call);
            Box::pin(async move { fut.await.into() }) as ReplyFuture
        });
        Tool {
            def: ToolDef {
                name: name.into(),
                description: description.into(),
                input_schema: json!({"type": "object"}),
                timeout_s: None,
                label: None,
                ..ToolDef::default()
            },
            handler,
            at_once: false,
        }
    }

    /// A tool whose arguments are an `A`: the input schema is derived from `A` (`schemars`,
    /// with every subschema inlined, since the broker accepts no `$ref`), and the handler gets
    /// the arguments already deserialized, so schema and struct cannot drift apart. Arguments
    /// that do not deserialize (the broker checked them against the schema, so this is rare)
    /// answer `invalid_arguments` with the JSON path. A recursive `A` cannot be inlined: the
    /// broker's check then refuses the schema when the app is built.
    pub fn typed<A, F, Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Tool
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: Into<Reply>,
    {
        let handler = Arc::new(handler);
        Tool::new(name, description, move |call: Call| {
            let handler = handler.clone();
            async move {
                match call.args::<A>() {
                    Ok(args) => handler(args, call).await.into(),
                    Err(e) => Reply::from(e),
                }
            }
        })
        .schema(schema_for::<A>())
    }

    /// This tool's handler answers at once and may safely run on more than one instance of
    /// the app. Its calls are not claimed first: the handler runs as soon as a call arrives and
    /// its reply is posted with the claim in one request (`"claim": true`), which saves a round
    /// trip to the broker per call. If another instance claimed the call meanwhile, the reply
    /// is dropped. Leave it off for tools with side effects that must happen once.
    pub fn answers_at_once(mut self) -> Tool {
        self.at_once = true;
        self
    }

    /// The JSON Schema of the arguments (a root `{"type": "object", …}`).
    pub fn schema(mut self, schema: Value) -> Tool {
        self.def.input_schema = schema;
        self
    }

    /// How long a call may take, in seconds; `0` means never (a handoff).
    pub fn timeout_s(mut self, seconds: u64) -> Tool {
        self.def.timeout_s = Some(seconds);
        self
    }

    /// A short human title.
    pub fn label(mut self, label: impl Into<String>) -> Tool {
        self.def.label = Some(label.into());
        self
    }

    /// The title a harness shows instead of the name (MCP `title`; `label` when absent).
    pub fn title(mut self, title: impl Into<String>) -> Tool {
        self.def.title = Some(title.into());
        self
    }

    /// Hints for the harness (read-only, destructive, idempotent, open-world), which it may
    /// use to decide whether to ask its user before a call. Leo does not check them.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Tool {
        self.def.annotations = Some(annotations);
        self
    }

    /// An object schema for the reply's structured content: the handler must then answer
    /// with `Reply::structured`, which the broker checks against it.
    pub fn output_schema(mut self, schema: Value) -> Tool {
        self.def.output_schema = Some(schema);
        self
    }

    /// `output_schema` derived from `T`, as `typed` derives the input schema.
    pub fn output_schema_for<T: JsonSchema>(self) -> Tool {
        self.output_schema(schema_for::<T>())
    }

    /// How a harness that supports MCP tasks runs the tool's calls (`Execution::Task` lets a
    /// long call run without blocking the conversation).
    pub fn execution(mut self, execution: Execution) -> Tool {
        self.def.execution = Some(execution);
        self
    }

    /// Every call waits for a person's approval (an approver: `leo approve`, the console, an
    /// app with [`crate::Approver`]) before this app sees it: `approval: "required"`.
    pub fn needs_approval(mut self) -> Tool {
        self.def.approval = Some(leo_protocol::tool::ApprovalMode::Required);
        self
    }

    /// The definition sent to the broker.
    pub fn definition(&self) -> &ToolDef {
        &self.def
    }
}

/// The input schema of `A`: JSON Schema 2020-12 with every subschema inlined and no `$schema`
/// (the broker's subset is its own dialect; harnesses ignore the URI).
pub fn schema_for<A: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<A>();
    schema.to_value()
}
