//! The random-kill fault test across a cluster: three instances on one PostgreSQL database (a
//! throwaway server of the test's own), 1,000 `tools/call`s from two harnesses (rmcp clients on
//! real `leo-mcp`s on two instances' sockets) to a tool this SDK serves from a third, while
//! instances are SIGKILLed at seeded-random points and started again on their homes, the
//! leader at least once (then a follower takes over before it is back), and PostgreSQL is
//! stopped and started again once.
//!
//! The SDK has one endpoint. The app reaches the cluster through a relay of the test's own (a
//! unix socket, as a load balancer would be): each new connection goes to the instance it went
//! to last, or to the next one that accepts, so when its instance dies the app reconnects to
//! another with its resume key.
//!
//! What must hold is what `kills` checks on one broker: every call ends exactly once within a
//! bound; an answer that is the app's is the app's answer to that very call; every result a
//! history lists reached its harness; a result posted again after a kill is `already_settled`;
//! and the histories of the three instances (each leader writes its own) list each call once.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leo_app::App;
use leo_testkit::agent::{Agent, AgentOpts, wait_for_tools};
use leo_testkit::postgres::Throwaway;
use leo_testkit::rng::Rng;
use leo_testkit::{Broker, cluster};
use serde_json::{Value, json};

use crate::kills::{
    Answered, Ended, Runs, Spans, check, post_again, seed, settled_ids, stream, work,
};
use crate::support::Running;

/// Instances killed (one of them the leader, waited out until a follower leads).
const KILLS: usize = 5;
/// A bound on the whole run: a call that never ends fails the test instead of hanging it.
const WHOLE_RUN: Duration = Duration::from_secs(240);
/// How long a harness whose call was refused at once waits before its next: long enough that
/// a takeover (a poll and the restore for a killed leader; the lease while PostgreSQL restarts)
/// does not use up most of the calls.
const REFUSED: Duration = Duration::from_secs(2);
/// A bound on waiting for a leader after a kill: a killed leader is replaced at a follower's
/// next poll, but one killed with PostgreSQL away is only once its lease (15 s) lapsed; and
/// slack.
const TAKEOVER: Duration = Duration::from_secs(45);

/// A unix socket that forwards each connection to the API socket of an instance: the one it
/// used last if it accepts, else the next that does.
struct Relay {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Relay {
    fn start(targets: Vec<PathBuf>, first: usize) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let current = Arc::new(AtomicUsize::new(first));
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let (targets, current) = (targets.clone(), current.clone());
                tokio::spawn(async move {
                    let start = current.load(Ordering::SeqCst);
                    for k in 0..targets.len() {
                        let i = (start + k) % targets.len();
                        if let Ok(mut out) = tokio::net::UnixStream::connect(&targets[i]).await {
                            current.store(i, Ordering::SeqCst);
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                            return;
                        }
                    }
                });
            }
        });
        Relay { path, _dir: dir }
    }
}

/// What happens at one point of the stream.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL the leader; start it again once a follower leads.
    Leader,
    /// SIGKILL instance `i` (whatever its role); start it again after a short pause.
    Instance(usize),
    /// Stop PostgreSQL at once and start it again.
    Postgres,
}

/// The faults and the number of ended calls each waits for, in order.
fn plan(rng: &mut Rng, instances: usize) -> Vec<(usize, Fault)> {
    let calls = crate::kills::CALLS;
    let forced = rng.below(KILLS as u64) as usize;
    let mut faults: Vec<Fault> = (0..KILLS)
        .map(|k| {
            if k == forced {
                Fault::Leader
            } else {
                Fault::Instance(rng.below(instances as u64) as usize)
            }
        })
        .collect();
    let at = rng.below(KILLS as u64 + 1) as usize;
    faults.insert(at, Fault::Postgres);
    let mut points: Vec<usize> = (0..faults.len())
        .map(|_| calls / 20 + rng.below((calls * 17 / 20) as u64) as usize)
        .collect();
    points.sort_unstable();
    points.into_iter().zip(faults).collect()
}

/// The cluster the killer works on.
struct Cluster {
    nodes: Vec<Option<Broker>>,
    postgres: Throwaway,
}

impl Cluster {
    fn live(&self) -> impl Iterator<Item = &Broker> {
        self.nodes.iter().flatten()
    }

    /// Waits until every running instance names the same leader; returns its index.
    async fn settled(&self) -> usize {
        let deadline = tokio::time::Instant::now() + TAKEOVER;
        loop {
            let mut seen = Vec::new();
            for b in self.live() {
                seen.push(cluster::leader(&b.http()).await);
            }
            if let Some(Some(id)) = seen.first()
                && seen.iter().all(|s| s.as_ref() == Some(id))
                && let Some(i) = self.index_of(id)
            {
                return i;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no one leader: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|b| {
            b.as_ref()
                .is_some_and(|b| cluster::instance_id(b.home()) == id)
        })
    }

    /// Kills instance `i`; starts it again after `pause`, or once another instance leads.
    async fn kill(&mut self, i: usize, pause: Option<Duration>) {
        let home = self.nodes[i].take().unwrap().kill_keep_home().await;
        match pause {
            Some(pause) => tokio::time::sleep(pause).await,
            None => {
                let leader = self.settled().await;
                assert_ne!(leader, i, "a killed instance leads");
                eprintln!("instance {leader} took over from {i}");
            }
        }
        self.nodes[i] = Some(Broker::start_in(home).await);
    }

    async fn apply(&mut self, fault: Fault, rng: &mut Rng) {
        match fault {
            Fault::Leader => {
                let leader = self.settled().await;
                eprintln!("killing the leader, instance {leader}");
                self.kill(leader, None).await;
            }
            Fault::Instance(i) => {
                eprintln!("killing instance {i}");
                let pause = Duration::from_millis(rng.below(300));
                self.kill(i, Some(pause)).await;
            }
            Fault::Postgres => {
                eprintln!("restarting PostgreSQL");
                self.postgres.stop();
                tokio::time::sleep(Duration::from_millis(rng.below(500))).await;
                self.postgres.start_again().await;
            }
        }
    }
}

/// Applies the faults of [`plan`] at their points of the stream; after each, once one leader
/// serves, posts again a result the cluster accepted before it and expects `already_settled`.
async fn killer(
    mut cluster: Cluster,
    mut rng: Rng,
    done: Arc<AtomicUsize>,
    answered: Answered,
    client_id: String,
) -> (Cluster, usize) {
    let mut reposted = 0;
    for (point, fault) in plan(&mut rng, cluster.nodes.len()) {
        while done.load(Ordering::SeqCst) < point {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(30))).await;
        let leader = cluster.settled().await;
        let http = cluster.nodes[leader].as_ref().unwrap().http();
        let settled = settled_ids(&http, &answered).await;
        cluster.apply(fault, &mut rng).await;
        cluster.settled().await;
        let any = cluster.live().nth(rng.below(2) as usize).unwrap().http();
        for id in settled.iter().take(2) {
            post_again(&any, id, &client_id).await;
            reposted += 1;
        }
    }
    (cluster, reposted)
}

/// Every call in the cluster's history (the database's table `history`, which every
/// instance writes), shaped as the history API lists it.
async fn history_of(db: &leo_testkit::postgres::Database) -> Vec<Value> {
    let parse = |s: Option<String>| {
        s.and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    };
    db.client()
        .await
        .query("SELECT id, outcome, arguments, result FROM history", &[])
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            json!({
                "id": r.get::<_, String>(0),
                "outcome": r.get::<_, String>(1),
                "arguments": parse(r.get(2)),
                "result": parse(r.get(3)),
            })
        })
        .collect()
}

/// Checks that no call ended `cancelled`: the calls of an agent whose follower was killed wait
/// for its `leo-mcp` to come back, and the calls parked for an app whose instance was killed
/// wait for it to resume; both end with their answers.
fn none_cancelled(ended: &[Ended]) {
    for (n, e) in ended.iter().enumerate() {
        let Ended::Error(text) = e else { continue };
        assert!(!text.starts_with("cancelled"), "call {n}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_calls_through_random_kills_of_a_cluster_and_its_database_each_end_once() {
    let rng = Rng::new(seed());
    let started = std::time::Instant::now();
    let Some(postgres) = Throwaway::start().await else {
        return;
    };
    let db = postgres.database().await;
    let config = format!("{}history:\n  store_content: true\n", db.config());
    let nodes = cluster::start(&config, 3).await;
    let sockets = nodes
        .iter()
        .map(|b| leo_protocol::home::Home::new(b.home()).api_socket())
        .collect();
    // The app enters through instance 2 (a follower), the harnesses through 0 (the leader)
    // and 1 (a follower).
    let relay = Relay::start(sockets, 2);
    let runs = Runs::default();
    let app = App::builder()
        .home(nodes[2].home())
        .socket(&relay.path)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .group("g", [work(runs.clone())])
        .build()
        .unwrap();
    let mut app = Running::start(app).await;
    let client_id = app.serving().await;
    let mut agents = Vec::new();
    for (node, name) in [(&nodes[0], "claude"), (&nodes[1], "opencode")] {
        let agent = Agent::start(node.home(), AgentOpts::native(name)).await;
        wait_for_tools(&agent, |names| names == ["work"]).await;
        agents.push(agent);
    }
    let agents = Arc::new(agents);
    let done = Arc::new(AtomicUsize::new(0));
    let cluster = Cluster {
        nodes: nodes.into_iter().map(Some).collect(),
        postgres,
    };
    let run = async {
        let answered = Answered::default();
        let killing = tokio::spawn(killer(
            cluster,
            rng,
            done.clone(),
            answered.clone(),
            client_id.clone(),
        ));
        let ended = stream(
            agents.clone(),
            done.clone(),
            answered,
            REFUSED,
            Spans::default(),
        )
        .await;
        (ended, killing.await.unwrap())
    };
    let (ended, (cluster, reposted)) = tokio::time::timeout(WHOLE_RUN, run)
        .await
        .expect("the stream did not end: a call hangs");
    assert_eq!(
        app.serving().await,
        client_id,
        "the app resumed as the same client every time"
    );
    app.stop().await.unwrap();
    // The cluster's history, once every instance has stopped and written all it had.
    let Cluster { nodes, postgres } = cluster;
    for node in nodes.into_iter().flatten() {
        let (_, _home) = node.stop_keep_home().await;
    }
    let rows = history_of(&db).await;
    eprintln!("the history lists {} calls", rows.len());
    drop(db);
    drop(postgres);
    none_cancelled(&ended);
    check(
        &ended,
        &rows,
        &runs.lock().unwrap(),
        &["no_client", "store_unavailable", "cancelled"],
    );
    eprintln!(
        "{} calls, {KILLS} kills and a PostgreSQL restart, {reposted} results posted again: {:.1?}",
        crate::kills::CALLS,
        started.elapsed()
    );
}
