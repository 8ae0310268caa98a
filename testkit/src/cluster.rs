//! Several instances on one PostgreSQL database, each with its own `LEO_HOME` and port: the
//! first started leads, the others follow it (see `docs/cluster.md`).

use std::path::Path;
use std::time::Duration;

use crate::{Broker, Http, WAIT};

/// Copies what makes instances one broker to their clients: the config and the token files
/// (never the instance id, the databases or the sockets).
pub fn copy_home(from: &Path, to: &Path) {
    std::fs::copy(from.join("config.yaml"), to.join("config.yaml")).unwrap();
    std::fs::create_dir_all(to.join("state")).unwrap();
    for entry in std::fs::read_dir(from.join("state")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".token") {
            std::fs::copy(entry.path(), to.join("state").join(&name)).unwrap();
        }
    }
}

/// `n` instances with `config` (which names the database): the first leads (it started
/// alone), the others follow it.
pub async fn start(config: &str, n: usize) -> Vec<Broker> {
    let first = Broker::start_with(config).await;
    // A broker serves before it has joined: the others start once the first leads, or one of
    // them could take the lease first on a loaded machine.
    let id = instance_id(first.home());
    let deadline = tokio::time::Instant::now() + WAIT;
    while leader(&first.http()).await.as_ref() != Some(&id) {
        assert!(tokio::time::Instant::now() < deadline, "{}", first.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut all = vec![];
    for _ in 1..n {
        let home = tempfile::tempdir().unwrap();
        copy_home(first.home(), home.path());
        all.push(Broker::start_in(home).await);
    }
    for b in &all {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !b.stderr().contains("forwarding to it") {
            assert!(tokio::time::Instant::now() < deadline, "{}", b.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    all.insert(0, first);
    all
}

/// The id an instance goes by in the cluster (from its `state/instance-id`).
pub fn instance_id(home: &Path) -> String {
    let id = std::fs::read_to_string(home.join("state/instance-id")).unwrap();
    format!("i_{}", &id.trim()[..16])
}

/// The instances `http`'s instance reports in its status; `None` while it does not answer,
/// or closes the connection mid-answer (as an instance taking the lead does).
async fn instances(http: &Http) -> Option<Vec<serde_json::Value>> {
    let reply = http.try_get("/api/v1/status").await?;
    if reply.status != 200 {
        return None;
    }
    reply.body["data"]["instances"].as_array().cloned()
}

/// The id of the instance `http` (a running instance) says leads, if one does.
pub async fn leader(http: &Http) -> Option<String> {
    let all = instances(http).await?;
    let leader = all.iter().find(|i| i["role"] == "leader")?;
    leader["id"].as_str().map(str::to_owned)
}

/// The role (`leader`, `follower`, `gone`) `http`'s instance says instance `id` has.
pub async fn role_of(http: &Http, id: &str) -> Option<String> {
    let all = instances(http).await?;
    let found = all.iter().find(|i| i["id"] == id)?;
    found["role"].as_str().map(str::to_owned)
}
