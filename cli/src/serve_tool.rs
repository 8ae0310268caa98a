//! `leo serve-tool`: make any program a client tool.
//!
//! It is an app built on `leo_app`: it registers the tools given by flags or a tools file, and
//! answers each call by running the tool's command (`child`). The SDK does the rest: the
//! connection to `$LEO_HOME/run/leo.sock` with the operator token, reconnecting, recovery of
//! waiting calls, the `--jobs` bound (its `max_concurrent`), and the stop: Ctrl-C or SIGTERM
//! stops it (`App::run_until`), which withdraws its groups, so the calls waiting for them end at
//! once, before its stream closes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use leo_app::{App, Status, Tool};
use leo_broker::home::Home;
use leo_broker::server;

mod child;
mod spec;

use spec::{ContentKind, Fields, ToolSpec};

/// `leo serve-tool` flags.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  leo serve-tool --name word_count --description 'Count the words of a text' \\
      --schema '{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}}}' \\
      -- sh -c 'jq -r .text | wc -w'
  leo serve-tool --tools tools.yaml --jobs 4

Each call runs COMMAND with the call's arguments as JSON on stdin. stdout is the result (one
text block; with --content json, MCP content blocks); a non-zero exit is the app error
exit_<status> with the last line of stderr. A cancelled call stops the command's process group.")]
pub struct Args {
    /// The tool's name, 1 to 64 of [A-Za-z0-9_-].
    #[arg(long, required_unless_present = "tools", conflicts_with = "tools")]
    name: Option<String>,
    /// What the tool does, as the agent reads it.
    #[arg(long, required_unless_present = "tools", conflicts_with = "tools")]
    description: Option<String>,
    /// The input schema: a JSON object, or a file holding one [default: {"type":"object"}].
    #[arg(long, value_name = "FILE|JSON", conflicts_with = "tools")]
    schema: Option<String>,
    /// Seconds a call may take; 0 means never [default: the broker's, 600].
    #[arg(long, value_name = "S", conflicts_with = "tools")]
    timeout: Option<u64>,
    /// The group to register the tool in [default: the tool's name].
    #[arg(long, value_name = "G", conflicts_with = "tools")]
    group: Option<String>,
    /// How stdout becomes the result [default: text].
    #[arg(long, value_enum, conflicts_with = "tools")]
    content: Option<ContentKind>,
    /// Serve every tool of this YAML or JSON file instead (same fields, plus command and args).
    #[arg(long, value_name = "FILE")]
    tools: Option<PathBuf>,
    /// What this app is called in `leo status` and the console [default: serve-tool NAME, or
    /// serve-tool FILE with --tools].
    #[arg(long, value_name = "TEXT")]
    app_name: Option<String>,
    /// Calls run at once, at most; more wait unclaimed [default: the number of CPUs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    jobs: Option<u32>,
    /// The command and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// The tools the flags describe.
fn specs(args: Args) -> anyhow::Result<Vec<ToolSpec>> {
    if let Some(file) = &args.tools {
        if !args.command.is_empty() {
            bail!("--tools takes each tool's command from the file; give nothing after --");
        }
        return spec::from_file(file).map_err(anyhow::Error::msg);
    }
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        bail!(
            "a command is required: leo serve-tool --name NAME --description TEXT -- COMMAND ARGS…"
        );
    };
    let fields = Fields {
        name: args.name.unwrap_or_default(),
        description: args.description.unwrap_or_default(),
        schema: None,
        timeout: args.timeout,
        group: args.group,
        command: program,
        args: command.collect(),
        content: args.content.unwrap_or_default(),
    };
    Ok(vec![
        spec::from_flags(fields, args.schema.as_deref()).map_err(anyhow::Error::msg)?,
    ])
}

/// `serve-tool word_count`, or `serve-tool tools.yaml`: what it serves, as far as it fits.
fn default_app_name(args: &Args) -> String {
    let what = match (&args.tools, &args.name) {
        (Some(file), _) => file.file_name().map(|n| n.to_string_lossy().into_owned()),
        (None, name) => name.clone(),
    };
    let name: String = format!("serve-tool {}", what.unwrap_or_default())
        .chars()
        .take(leo_protocol::limits::MAX_APP_NAME)
        .collect();
    match leo_protocol::events::check_app_name(&name) {
        Ok(()) => name,
        Err(_) => "serve-tool".into(),
    }
}

pub fn run(home: &Home, args: Args) -> anyhow::Result<()> {
    let jobs = match args.jobs {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(4, usize::from),
    };
    let app_name = args
        .app_name
        .clone()
        .unwrap_or_else(|| default_app_name(&args));
    let specs = specs(args)?;
    let mut groups: BTreeMap<String, Vec<Tool>> = BTreeMap::new();
    for spec in &specs {
        let shared = Arc::new(spec.clone());
        let tool = Tool::new(&spec.def.name, &spec.def.description, move |call| {
            let spec = shared.clone();
            async move { child::answer(&spec, call).await }
        })
        .schema(spec.def.input_schema.clone());
        let tool = match spec.def.timeout_s {
            Some(s) => tool.timeout_s(s),
            None => tool,
        };
        groups.entry(spec.group.clone()).or_default().push(tool);
    }
    let mut builder = App::builder()
        .name(app_name)
        .home(home.root.clone())
        .max_concurrent(jobs);
    for (group, tools) in groups {
        builder = builder.group(group, tools);
    }
    let app = builder.build()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let endpoint = app.endpoint().to_string();
        let status = app.status();
        let report = tokio::spawn(report(status, specs, endpoint));
        let result = app.run_until(server::signals()).await;
        report.abort();
        result.map_err(anyhow::Error::from)
    })
}

/// Says once on stderr when the tools are served. (While the broker is not there, the SDK
/// logs why it retries.)
async fn report(
    mut status: tokio::sync::watch::Receiver<Status>,
    specs: Vec<ToolSpec>,
    endpoint: String,
) {
    while !matches!(*status.borrow_and_update(), Status::Serving { .. }) {
        if status.changed().await.is_err() {
            return;
        }
    }
    for spec in &specs {
        eprintln!(
            "leo serve-tool: serving tool {} (group {}) on {endpoint}",
            spec.def.name, spec.group
        );
    }
}
