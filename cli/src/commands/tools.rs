//! `leo tools approve NAME`: the operator approves a tool's changed definition, held back by
//! `client_tools.pin_definitions`, as the console's Approve button does. Agents are offered
//! the new definition from then on (a `list_changed` where the harness listens for it), and
//! their calls are checked against its schema.

use std::io::Write;

use leo_protocol::requests::Approved;
use leo_protocol::tool::is_valid_tool_name;

use super::api::Api;
use crate::error::CliError;

#[derive(Debug, clap::Subcommand)]
pub enum ToolsCommand {
    /// Offer a tool's changed definition to agents (with client_tools.pin_definitions).
    #[command(after_help = super::APPROVE_HELP)]
    Approve {
        /// The tool's name, as `leo status` lists it.
        #[arg(value_name = "NAME")]
        name: String,
    },
}

pub fn run(home: &leo_broker::home::Home, command: &ToolsCommand) -> crate::error::Result {
    match command {
        ToolsCommand::Approve { name } => {
            // The name goes into the path: only a tool name's characters, so it aims nowhere else.
            if !is_valid_tool_name(name) {
                return Err(CliError::BadArgument(format!(
                    "{name:?} is not a tool name (1 to 64 of [A-Za-z0-9_-]; leo status lists them)"
                )));
            }
            let done: Approved =
                Api::new(home).post(&format!("/api/v1/client-tools/definitions/{name}/approve"))?;
            writeln!(
                std::io::stdout(),
                "approved {} ({}); agents are offered it from revision {}",
                done.tool,
                done.digest,
                done.revision
            )?;
            Ok(())
        }
    }
}
