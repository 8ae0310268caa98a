//! `leo webhook add|list|rm`: webhook providers, for apps that cannot hold an event stream. A
//! client of the routes `…/client-tools/webhooks` like any other, with the operator token.

use std::io::Write;
use std::path::PathBuf;

use leo_protocol::tool::ToolDef;
use leo_protocol::webhooks::{WebhookBody, WebhookCreated, WebhookList, WebhookRemoved};

use super::api::Api;
use crate::error::CliError;

/// `--help` text for `leo webhook`.
pub const WEBHOOK_HELP: &str = "The broker POSTs each call of the group's tools to URL, signed \
the Standard Webhooks way with the secret `add` prints once (webhook-id, webhook-timestamp, \
webhook-signature). The app answers 200 {\"ok\": true, \"content\": [...]} (or {\"ok\": false, \
\"error\": {...}}) at once, or 202 and later the claim and result routes with the printed \
client_id. URL must be http:// to a loopback host or to a host in webhooks.allowed_hosts.

Exit codes: 0 done; 1 the broker refused (invalid_parameter, name_conflict, not_found, \
invalid_tool); 2 the broker is not running, or a bad argument.";

#[derive(Debug, clap::Subcommand)]
pub enum WebhookCommand {
    /// Create a webhook provider; prints its client_id and its signing secret (shown once).
    #[command(after_help = WEBHOOK_HELP)]
    Add {
        /// Its name: 1 to 64 of [A-Za-z0-9_.-].
        name: String,
        /// Where calls are POSTed: http:// to a loopback host or an allowed host.
        #[arg(long)]
        url: String,
        /// The group its tools are registered in.
        #[arg(long)]
        group: String,
        /// A JSON file with the tool definitions (an array, as in a registration); `-` reads
        /// standard input.
        #[arg(long, value_name = "FILE")]
        tools: PathBuf,
        /// The agents offered the tools (names or globs, comma-separated); default every agent.
        #[arg(long, value_delimiter = ',')]
        agents: Option<Vec<String>>,
    },
    /// List the webhook providers and how their deliveries go.
    List,
    /// Remove a webhook provider: its tools are withdrawn and its pending calls end.
    Rm {
        #[arg(value_name = "NAME")]
        name: String,
    },
}

pub fn run(home: &leo_broker::home::Home, command: &WebhookCommand) -> crate::error::Result {
    let api = Api::new(home);
    let mut out = std::io::stdout().lock();
    match command {
        WebhookCommand::Add {
            name,
            url,
            group,
            tools,
            agents,
        } => {
            let tools = read_tools(tools)?;
            let body = WebhookBody {
                name: name.clone(),
                url: url.clone(),
                group: group.clone(),
                tools,
                agents: agents.clone(),
            };
            let body = serde_json::to_vec(&body).map_err(anyhow::Error::from)?;
            let made: WebhookCreated = api.post_body(leo_broker::WEBHOOKS_PATH, body)?;
            writeln!(
                out,
                "webhook {} calls {} for group {}",
                made.name, made.url, made.group
            )?;
            writeln!(out, "tools:     {}", made.tools.join(", "))?;
            writeln!(out, "client_id: {}", made.client_id)?;
            writeln!(out, "secret:    {}", made.secret)?;
            writeln!(
                out,
                "(the secret is shown only now: give it to the app to verify signatures)"
            )?;
            for w in &made.warnings {
                writeln!(out, "warning: {w}")?;
            }
            Ok(())
        }
        WebhookCommand::List => {
            let list: WebhookList = api.get(leo_broker::WEBHOOKS_PATH)?;
            if list.webhooks.is_empty() {
                writeln!(out, "no webhooks")?;
            }
            for w in list.webhooks {
                let health = if w.health.healthy {
                    "healthy".to_owned()
                } else {
                    format!(
                        "UNHEALTHY ({} failed deliveries: {})",
                        w.health.failures,
                        w.health.last_error.as_deref().unwrap_or("-")
                    )
                };
                writeln!(
                    out,
                    "{}  {}  group {}  [{}]  {}  {}",
                    w.name,
                    w.url,
                    w.group,
                    w.tools.join(", "),
                    w.client_id,
                    health
                )?;
            }
            Ok(())
        }
        WebhookCommand::Rm { name } => {
            if !leo_protocol::names::is_name(name) {
                return Err(CliError::BadArgument(format!(
                    "{name:?} is not a webhook name (1 to 64 of [A-Za-z0-9_.-]; leo webhook list lists them)"
                )));
            }
            let gone: WebhookRemoved =
                api.delete(&format!("{}/{name}", leo_broker::WEBHOOKS_PATH))?;
            writeln!(out, "removed webhook {}", gone.name)?;
            Ok(())
        }
    }
}

/// The tools file of `leo webhook add`; one that cannot be read or is not an array of
/// definitions is a bad argument.
fn read_tools(path: &PathBuf) -> Result<Vec<ToolDef>, CliError> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| CliError::BadArgument(format!("cannot read {}: {e}", path.display())))?;
    leo_protocol::envelope::parse_json(text.as_bytes())
        .map_err(|e| CliError::BadArgument(format!("{}: {e}", path.display())))
}
