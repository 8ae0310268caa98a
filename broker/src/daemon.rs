//! What `leo broker` runs: [`prepare`] loads and checks `LEO_HOME`, then [`run`] serves the
//! bound listeners (`server::bind`) as a single broker on `state/leo.db`, or as an instance of
//! the cluster of the PostgreSQL database that `store.url` (or `LEO_STORE_URL`) names.
//!
//! Why a module above `server` and `cluster`: the choice between the two is made once, here,
//! so that `server` (one core on its listeners) never imports the cluster, and the cluster
//! runs `server`'s core for each term it leads.

use std::future::Future;
use std::sync::Arc;

use crate::agent_tokens::AgentKeys;
use crate::cluster;
use crate::config::Config;
use crate::error::{BrokerError, Result};
use crate::home::Home;
use crate::server::{Base, Listeners, Term};
use crate::state_file::EverRegistered;
use crate::tokens::{TokenBook, Tokens, load_or_create};

/// Everything `run` needs, loaded and checked: what every core shares, and where the live
/// state is (consumed by `run`).
pub struct Prepared {
    pub base: Base,
    live: Live,
}

/// Where the live state is.
enum Live {
    /// `state/leo.db`, opened, with what it held at start: the one core's term.
    Single(Term),
    /// The PostgreSQL cluster this instance joins (its store is opened when it leads).
    Cluster(cluster::Joining),
}

/// Loads config, state and tokens from `home`, creating what first start creates.
pub fn prepare(home: Home) -> Result<Prepared> {
    let lock = crate::home::lock(&home)?;
    crate::home::prepare(&home)?;
    let config = Config::load(&home.config())?;
    let ever = EverRegistered::load(&home.client_tools())?;
    config
        .check_deny_tools(ever.names())
        .map_err(|message| BrokerError::Config {
            path: home.config(),
            message,
        })?;
    let url = config.store.postgres_url(&home.config())?;
    let tls = load_tls(&home, &config)?;
    let (tokens, agent_keys, live) = match url {
        None => {
            let tokens = TokenBook::of_files(Tokens::load(&home, &config)?);
            let agent_token: Arc<str> = load_or_create(&home.agent_token())?.into();
            let keys = AgentKeys::new(agent_token, home.agents());
            (
                tokens,
                keys,
                Live::Single(open_single(&home, &config, ever)?),
            )
        }
        Some(url) => {
            let joining = cluster::Joining::prepare(&home, &config, url, ever)?;
            let book = joining.tokens.book.clone();
            let keys = AgentKeys::cluster(book.clone(), home.agents());
            (book, keys, Live::Cluster(joining))
        }
    };
    let base = Base {
        mcp: None,
        home,
        lock,
        config: Arc::new(config),
        tokens,
        agent_keys,
        tls,
    };
    Ok(Prepared { base, live })
}

/// The single broker's term: `state/leo.db` opened now, and `state/webhooks.json`.
fn open_single(home: &Home, config: &Config, ever: EverRegistered) -> Result<Term> {
    let webhooks = crate::webhooks::store::Store::load(&home.webhooks())?;
    let path = home.database();
    let (store, restored) = crate::store::Store::open(
        &path,
        config.store.synchronous,
        config.client_tools.remember_settled,
    )
    .map_err(|e| BrokerError::Database {
        path,
        source: e.into(),
    })?;
    Ok(Term {
        store,
        restored,
        ever: Some(ever),
        webhooks,
        leading: None,
    })
}

/// `web.tls`, read and checked now, so a bad pair stops the start with the key at fault.
fn load_tls(home: &Home, config: &Config) -> Result<Option<crate::http::ServerTls>> {
    let Some(tls) = &config.web.tls else {
        return Ok(None);
    };
    let (cert, key) = tls.resolved(&home.root);
    crate::http::ServerTls::load(crate::http::TlsFiles { cert, key })
        .map(Some)
        .map_err(|e| BrokerError::Config {
            path: home.config(),
            message: leo_protocol::chain::error_chain(&e),
        })
}

/// Serves until `stop` resolves, then shuts down in order. With PostgreSQL, this instance
/// joins the database's cluster: it leads, or forwards to the leader until it takes the lease
/// (see `cluster`).
pub async fn run(p: Prepared, listeners: Listeners, stop: impl Future<Output = ()>) -> Result<()> {
    crate::telemetry::start(p.base.config.telemetry.otlp_endpoint.as_deref());
    match p.live {
        Live::Single(term) => {
            let stop = std::pin::pin!(stop);
            crate::server::serve(&p.base, term, listeners, stop)
                .await
                .map(drop)
        }
        Live::Cluster(joining) => cluster::run(p.base, joining, listeners, stop).await,
    }
}
