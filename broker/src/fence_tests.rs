//! A deposed leader commits nothing anywhere: for each table the cluster shares, a write made
//! by an instance after another took the lease from it is refused and changes nothing.
//!
//! Instance A opens its store (it takes the lease, epoch 1) and writes while it leads; then the
//! lease is taken from it as another instance's take does (`cluster` names `i_b`, the epoch
//! goes up) while A still runs, and every kind of write A then makes through its one database
//! handle is refused.

use leo_protocol::ipc::Message;
use tokio_postgres::Client;

use crate::cluster::tokens::{Entry, Kind};
use crate::config::HistoryConfig;
use crate::history::History;
use crate::store::postgres::lease::Me;
use crate::store::postgres::{Database, Settings, tokens};
use crate::store::{Op, Store, StoredDefinition};
use crate::webhooks::store::{Change, Store as Webhooks, Stored};

fn hook(name: &str) -> Stored {
    Stored {
        name: name.into(),
        url: "http://127.0.0.1:9/".into(),
        group: name.into(),
        tools: Vec::new(),
        agents: None,
        client_id: format!("c_{name}"),
        secret: "whsec_AAAA".into(),
        created_at: "t".into(),
        owner: "operator".into(),
        approvals: false,
    }
}

fn mail(text: &str) -> Op {
    Op::Mail {
        agent: "a".into(),
        message: Message {
            text: text.into(),
            from: "ci".into(),
            at: "t".into(),
        },
    }
}

async fn column(pg: &Client, sql: &str) -> Vec<String> {
    let rows = pg.query(sql, &[]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_commits_nothing_in_any_shared_table() {
    let Some(pg) = leo_testkit::postgres::database().await else {
        return;
    };
    let admin = pg.client().await;
    let a = Database::open(&pg.url).unwrap();
    let (store, _) = {
        let a = a.clone();
        let settings = Settings {
            me: Me {
                id: "i_a".into(),
                url: String::new(),
            },
            key: "k".repeat(64),
            remember: 4,
            heartbeat: std::time::Duration::from_secs(5),
            lease: std::time::Duration::from_secs(15),
        };
        tokio::task::spawn_blocking(move || Store::open_postgres(&a, settings))
            .await
            .unwrap()
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let (hooks, none) = Webhooks::load_cluster(&a, &dir.path().join("webhooks.json"))
        .await
        .unwrap();
    assert!(none.is_empty());
    // While A leads its writes are kept: what follows is refused for the fence alone.
    let before = hook("before");
    let kept = hooks.save(Change::Added(&before), std::slice::from_ref(&before));
    kept.await.unwrap();
    store.send(vec![mail("before")]);
    store.committed().await.unwrap();

    // B takes the lease as `lease::try_take` does; A runs on, not yet told.
    admin
        .execute("UPDATE cluster SET leader = 'i_b', epoch = epoch + 1", &[])
        .await
        .unwrap();

    webhooks_refused(&hooks, &before, &admin).await;
    live_state_refused(&store, &admin).await;
    audit_refused(&a, &admin).await;
    no_token_written(&a, &admin).await;
    store.close().await;
}

async fn webhooks_refused(hooks: &Webhooks, before: &Stored, admin: &Client) {
    let after = hook("after");
    let all = [before.clone(), after.clone()];
    let added = hooks.save(Change::Added(&after), &all).await;
    assert!(added.is_err(), "a deposed leader added a webhook");
    let removed = hooks.save(Change::Removed("before"), &[]).await;
    assert!(removed.is_err(), "a deposed leader removed a webhook");
    let names = column(admin, "SELECT name FROM webhooks ORDER BY name").await;
    assert_eq!(names, ["before"]);
}

/// Registrations, definitions and the live state are the store's batches, fenced by its
/// writer.
async fn live_state_refused(store: &Store, admin: &Client) {
    store.send(vec![
        Op::Registered {
            client_id: "c_1".into(),
            group: "g".into(),
            tools: "[\"t\"]".into(),
            via: None,
        },
        Op::Seen(StoredDefinition {
            name: "t".into(),
            group: "g".into(),
            digest: "sha256:0".into(),
            definition: "{}".into(),
        }),
        mail("after"),
    ]);
    let committed = store.committed().await;
    assert!(
        committed
            .as_ref()
            .is_err_and(|e| e.to_string().contains("another instance")),
        "{committed:?}"
    );
    assert!(
        column(admin, "SELECT client_id FROM registrations")
            .await
            .is_empty()
    );
    assert!(
        column(admin, "SELECT name FROM definitions")
            .await
            .is_empty()
    );
    assert_eq!(column(admin, "SELECT text FROM mail").await, ["before"]);
}

/// The audit trail (and the history, through the same fenced statement: see
/// `history::postgres`'s own test).
async fn audit_refused(a: &Database, admin: &Client) {
    let history = History::open_postgres(a, "i_a".into(), &HistoryConfig::default()).unwrap();
    history.audit(("operator".into(), "operator"), "claim", Some("r_1"), None);
    tokio::task::spawn_blocking(move || history.close())
        .await
        .unwrap();
    assert!(column(admin, "SELECT action FROM audit").await.is_empty());
}

/// Tokens: a broker writes them only to fill a database no instance filled yet; B did (a
/// leader joined the cluster's tokens before it led), so A's fill writes nothing.
async fn no_token_written(a: &Database, admin: &Client) {
    admin
        .execute(
            "INSERT INTO tokens (kind, name, token) VALUES ('operator', '', 'op_b')",
            &[],
        )
        .await
        .unwrap();
    let ours = vec![Entry {
        kind: Kind::Operator,
        name: String::new(),
        token: "op_a".into(),
        can_message: Vec::new(),
    }];
    let filled = a
        .run(move |mut c| async move { tokens::fill(&mut c, &ours).await })
        .await
        .unwrap();
    assert!(!filled);
    assert_eq!(column(admin, "SELECT token FROM tokens").await, ["op_b"]);
}
