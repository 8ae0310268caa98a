//! The app: where the broker is, which groups of tools it serves, and how it behaves under load,
//! gathered by a `Builder` and checked before anything connects.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leo_protocol::events::check_app_name;
use leo_protocol::limits::MAX_APP_NAME;
use leo_protocol::tool::{ToolDef, is_valid_group_name};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::endpoint::{Endpoint, TokenSource, default_home};
use crate::error::{Error, Result};
use crate::offers::{Offered, Prompt, Resource, ResourceTemplate};
use crate::tool::{Handler, Tool};

/// The default bound on calls handled at once.
pub const DEFAULT_MAX_CONCURRENT: usize = 64;
/// The default time a cancelled handler has to return before it is dropped.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Where the app stands, for display (`App::status`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// Opening the event stream.
    Connecting,
    /// Registered every group and serving calls as `client_id`.
    Serving { client_id: String },
    /// The broker could not be reached or the stream broke; retrying after a delay.
    Waiting { error: String },
    /// `run` returned.
    Stopped,
}

/// One group and its tools.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub name: String,
    pub tools: Vec<ToolDef>,
    /// The agents the group is offered to (names or `*`/`?` globs); `None`: every agent.
    pub agents: Option<Vec<String>>,
    pub prompts: Vec<leo_protocol::offers::PromptDef>,
    pub resources: Vec<leo_protocol::offers::ResourceDef>,
    pub templates: Vec<leo_protocol::offers::ResourceTemplateDef>,
}

/// Everything a session needs, shared by its tasks.
pub(crate) struct Settings {
    pub endpoint: Endpoint,
    /// The TLS of an `https://` endpoint, built once for every reconnect.
    pub tls: Option<crate::http::Connector>,
    /// What the app calls itself in `leo status` and the console.
    pub name: Option<String>,
    pub token: TokenSource,
    pub groups: Vec<Group>,
    /// Tool name → (group, handler, answers at once).
    pub handlers: Handlers,
    /// What each group offers besides tools, and its handlers, by group name.
    pub offered: Arc<HashMap<String, Offered>>,
    /// The app's current link, for `Notifier`.
    pub notifier: crate::offers::Notifier,
    pub max_concurrent: usize,
    pub cancel_grace: Duration,
    pub backoff: (Duration, Duration),
}

/// A group as the builder was given it: name, agents (`None`: every agent), tools.
type Declared = (String, Option<Vec<String>>, Vec<Tool>);

/// Each tool's group, handler and whether it answers at once, by tool name.
pub(crate) type Handlers = HashMap<String, (String, Handler, bool)>;

/// Builds an `App`.
#[derive(Debug, Default)]
pub struct Builder {
    home: Option<PathBuf>,
    socket: Option<PathBuf>,
    url: Option<String>,
    ca_file: Option<PathBuf>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    device: Option<String>,
    name: Option<String>,
    groups: Vec<Declared>,
    offered: HashMap<String, Offered>,
    max_concurrent: Option<usize>,
    cancel_grace: Option<Duration>,
    backoff: Option<(Duration, Duration)>,
}

impl Builder {
    /// The broker's home (default `$LEO_HOME`, else `~/.leo`): its socket and token files.
    pub fn home(mut self, home: impl Into<PathBuf>) -> Builder {
        self.home = Some(home.into());
        self
    }

    /// Connects to this unix socket instead of `$home/run/leo.sock`.
    pub fn socket(mut self, path: impl Into<PathBuf>) -> Builder {
        self.socket = Some(path.into());
        self
    }

    /// Connects over TCP, `http://host:port` (such as `http://127.0.0.1:8370`), or over TLS,
    /// `https://host:port`, to a broker with `web.tls`.
    pub fn url(mut self, url: impl Into<String>) -> Builder {
        self.url = Some(url.into());
        self
    }

    /// For an `https://` URL: trust the CA certificates in this PEM file besides the system's
    /// (default: the file `LEO_CA_FILE` names, if any), such as the `tls/ca.pem` of
    /// `leo tls init`.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Builder {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents this token.
    pub fn token(mut self, token: impl Into<String>) -> Builder {
        self.token = Some(token.into());
        self
    }

    /// Presents the token in this file, read at each connection.
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Builder {
        self.token_file = Some(path.into());
        self
    }

    /// Presents the token of paired device `name` (`$home/state/devices/NAME.token`).
    pub fn device(mut self, name: impl Into<String>) -> Builder {
        self.device = Some(name.into());
        self
    }

    /// What the app calls itself, shown by `leo status`, `leo requests` and the web console
    /// (default: the program's file name): 1 to 64 printable characters.
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// Serves `tools` as group `name`. A group is registered as a whole; two instances of one
    /// app register the same group and share its calls.
    pub fn group(
        mut self,
        name: impl Into<String>,
        tools: impl IntoIterator<Item = Tool>,
    ) -> Builder {
        self.groups
            .push((name.into(), None, tools.into_iter().collect()));
        self
    }

    /// Serves `tools` as group `name`, offered only to `agents`: exact agent names or `*`/`?`
    /// globs (`["rocket", "ci-*"]`). Other agents neither see the tools nor can call them.
    pub fn group_for<S: Into<String>>(
        mut self,
        name: impl Into<String>,
        agents: impl IntoIterator<Item = S>,
        tools: impl IntoIterator<Item = Tool>,
    ) -> Builder {
        let agents = agents.into_iter().map(Into::into).collect();
        self.groups
            .push((name.into(), Some(agents), tools.into_iter().collect()));
        self
    }

    /// Offers `prompt` in group `group` (declared with `group` or `group_for`, with the
    /// group's agents), answered by its handler.
    pub fn prompt(mut self, group: impl Into<String>, prompt: Prompt) -> Builder {
        self.offered
            .entry(group.into())
            .or_default()
            .prompts
            .push(prompt);
        self
    }

    /// Offers `resource` in group `group`.
    pub fn resource(mut self, group: impl Into<String>, resource: Resource) -> Builder {
        let offered = self.offered.entry(group.into()).or_default();
        offered.resources.push(resource);
        self
    }

    /// Offers the resources of `template` in group `group`.
    pub fn resource_template(
        mut self,
        group: impl Into<String>,
        template: ResourceTemplate,
    ) -> Builder {
        let offered = self.offered.entry(group.into()).or_default();
        offered.templates.push(template);
        self
    }

    /// Handles at most `n` calls at once (default 64); requests beyond wait unclaimed.
    pub fn max_concurrent(mut self, n: usize) -> Builder {
        self.max_concurrent = Some(n);
        self
    }

    /// How long a cancelled handler may run on before it is dropped (default 5 s).
    pub fn cancel_grace(mut self, grace: Duration) -> Builder {
        self.cancel_grace = Some(grace);
        self
    }

    /// The reconnect delay: `first` doubling to `cap`, with jitter (default 100 ms to 5 s).
    pub fn reconnect_backoff(mut self, first: Duration, cap: Duration) -> Builder {
        self.backoff = Some((first, cap));
        self
    }

    /// Checks the settings and the tool definitions.
    pub fn build(self) -> Result<App> {
        let home = self.home.unwrap_or_else(default_home);
        let endpoint = match (self.url, self.socket) {
            (Some(_), Some(_)) => {
                return Err(Error::Config("give a URL or a socket, not both".into()));
            }
            (Some(url), None) => Endpoint::from_url(&url)?,
            (None, Some(path)) => Endpoint::Unix(path),
            (None, None) => Endpoint::in_home(&home),
        };
        let tls = match (&endpoint, &self.ca_file) {
            (Endpoint::Https { .. }, ca) => Some(crate::http::connector(ca.as_deref())?),
            (_, Some(_)) => {
                return Err(Error::Config("a CA file needs an https:// URL".into()));
            }
            (_, None) => None,
        };
        let token = match (self.token, self.token_file, self.device) {
            (None, None, None) => TokenSource::operator(&home),
            (Some(token), None, None) => TokenSource::Value(token),
            (None, Some(path), None) => TokenSource::File(path),
            (None, None, Some(device)) => {
                if !is_valid_group_name(&device) {
                    return Err(Error::Config(format!("invalid device name {device:?}")));
                }
                TokenSource::device(&home, &device)
            }
            _ => {
                return Err(Error::Config(
                    "give one of a token, a token file or a device".into(),
                ));
            }
        };
        let name = match self.name {
            Some(name) => {
                check_app_name(&name)
                    .map_err(|e| Error::Config(format!("app name {name:?} {e}")))?;
                Some(name)
            }
            None => program_name(),
        };
        let (mut groups, handlers) = checked_groups(self.groups, &self.offered)?;
        crate::offers::attach(&mut groups, &self.offered)?;
        let (status, _) = watch::channel(Status::Connecting);
        Ok(App {
            settings: Arc::new(Settings {
                endpoint,
                tls,
                name,
                token,
                groups,
                handlers,
                offered: Arc::new(self.offered),
                notifier: crate::offers::Notifier::default(),
                max_concurrent: self.max_concurrent.unwrap_or(DEFAULT_MAX_CONCURRENT).max(1),
                cancel_grace: self.cancel_grace.unwrap_or(DEFAULT_CANCEL_GRACE),
                backoff: self
                    .backoff
                    .unwrap_or((Duration::from_millis(100), Duration::from_secs(5))),
            }),
            status,
        })
    }
}

/// The app's groups as the broker registers them, and the handlers by tool name: each group
/// named once and holding tools, each tool defined well and named once (without case).
fn checked_groups(
    declared: Vec<Declared>,
    offered: &HashMap<String, Offered>,
) -> Result<(Vec<Group>, Handlers)> {
    if declared.is_empty() {
        return Err(Error::Config(
            "an app needs at least one group of tools".into(),
        ));
    }
    let mut groups = Vec::new();
    let mut handlers = HashMap::new();
    let mut group_names = HashSet::new();
    let mut tool_names = HashSet::new();
    for (name, agents, tools) in declared {
        if !is_valid_group_name(&name) {
            return Err(Error::Config(format!(
                "group name {name:?} must be 1 to 64 of [A-Za-z0-9_.-]"
            )));
        }
        if !group_names.insert(name.clone()) {
            return Err(Error::Config(format!("group {name:?} is given twice")));
        }
        if tools.is_empty() && !offered.contains_key(&name) {
            return Err(Error::Config(format!("group {name:?} has no tools")));
        }
        if let Some(agents) = &agents {
            leo_protocol::tool::check_agent_patterns(agents)
                .map_err(|e| Error::Config(format!("group {name:?}: {e}")))?;
        }
        let mut defs = Vec::new();
        for (i, mut tool) in tools.into_iter().enumerate() {
            tool.def
                .check(&format!("$.tools[{i}]"))
                .map_err(|e| Error::Config(format!("group {name:?}: {e}")))?;
            // The broker compares names without case; it sends calls under the exact name.
            if !tool_names.insert(tool.def.name.to_ascii_lowercase()) {
                return Err(Error::Config(format!(
                    "tool {:?} is given twice (names are compared without case)",
                    tool.def.name
                )));
            }
            handlers.insert(
                tool.def.name.clone(),
                (name.clone(), tool.handler, tool.at_once),
            );
            defs.push(tool.def);
        }
        groups.push(Group {
            name,
            tools: defs,
            agents,
            prompts: Vec::new(),
            resources: Vec::new(),
            templates: Vec::new(),
        });
    }
    Ok((groups, handlers))
}

/// The program's file name, when it makes a valid app name.
fn program_name() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let name: String = exe
        .file_name()?
        .to_str()?
        .chars()
        .take(MAX_APP_NAME)
        .collect();
    check_app_name(&name).is_ok().then_some(name)
}

/// An app that serves its tools through the broker. See the crate docs for an example.
pub struct App {
    pub(crate) settings: Arc<Settings>,
    pub(crate) status: watch::Sender<Status>,
}

impl App {
    /// Starts building an app.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Where the app connects.
    pub fn endpoint(&self) -> &Endpoint {
        &self.settings.endpoint
    }

    /// A handle that tells agents a resource changed (`Notifier::resource_updated`), for use
    /// while the app runs.
    pub fn notifier(&self) -> crate::offers::Notifier {
        self.settings.notifier.clone()
    }

    /// Follows the app's status: connecting, serving (with its `client_id`), waiting to retry.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// Serves until a fatal error (see `Error::is_fatal`); reconnects by itself otherwise.
    pub async fn run(self) -> Result<()> {
        self.run_until(std::future::pending()).await
    }

    /// Serves until `stop` resolves, then shuts down: handlers are cancelled and get the
    /// cancel grace to return (their replies are still posted), then the app withdraws its
    /// groups, so the calls still waiting for them end at once (`tool_withdrawn`) rather than
    /// after the broker's resume grace, and the stream closes.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Result<()> {
        let shutdown = CancellationToken::new();
        let serve = crate::session::serve(self.settings.clone(), &self.status, shutdown.clone());
        tokio::pin!(serve);
        let result = tokio::select! {
            result = &mut serve => result,
            () = stop => {
                shutdown.cancel();
                serve.await
            }
        };
        self.status.send_replace(Status::Stopped);
        result
    }
}
