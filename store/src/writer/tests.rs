//! The one writer's policy against a backend that only records what it is asked and answers
//! as it is told, under tokio's paused clock. The real backends are tested on real files and a
//! real PostgreSQL (`crate::tests`, the broker's outage and fence tests).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::mpsc::UnboundedSender;

use super::*;
use crate::postgres::PgError;

/// How the fake answers one commit.
enum Answer {
    Away,
    Fenced,
    Data(usize),
    Failed,
}

#[derive(Default)]
struct Seen {
    /// What each commit wrote: the ids of its changes.
    commits: Vec<Vec<String>>,
    /// How the next commits are answered, in order; then they succeed.
    answers: VecDeque<Answer>,
    ticks: usize,
    /// `Some(clean)` once closed.
    closed: Option<bool>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Seen>>);

impl Fake {
    fn answering(answers: impl IntoIterator<Item = Answer>) -> Fake {
        let fake = Fake::default();
        fake.0.lock().unwrap().answers.extend(answers);
        fake
    }

    fn commits(&self) -> Vec<Vec<String>> {
        self.0.lock().unwrap().commits.clone()
    }

    fn closed(&self) -> Option<bool> {
        self.0.lock().unwrap().closed
    }
}

fn error() -> DbError {
    PgError::Stopped.into()
}

const EVERY: Duration = Duration::from_secs(60);

impl Backend for Fake {
    async fn commit(&mut self, ops: &[Op]) -> Result<usize, Refused> {
        let mut seen = self.0.lock().unwrap();
        match seen.answers.pop_front() {
            Some(Answer::Away) => Err(Refused::Away(error())),
            Some(Answer::Fenced) => Err(Refused::Fenced(error())),
            Some(Answer::Data(op)) => Err(Refused::Data { op, error: error() }),
            Some(Answer::Failed) => Err(Refused::Failed(error())),
            None => {
                seen.commits.push(ops.iter().map(id).collect());
                Ok(ops.len())
            }
        }
    }

    fn every(&self) -> Duration {
        EVERY
    }

    async fn tick(&mut self) -> Result<(), DbError> {
        self.0.lock().unwrap().ticks += 1;
        Ok(())
    }

    async fn close(self, clean: bool) {
        self.0.lock().unwrap().closed = Some(clean);
    }
}

/// The id of a test's change: a delivered outcome nobody waits for.
fn id(op: &Op) -> String {
    match op {
        Op::Delivered { id } => id.clone(),
        other => other.name().into(),
    }
}

fn change(id: &str) -> Op {
    Op::Delivered { id: id.into() }
}

struct Running {
    tx: UnboundedSender<Job>,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(fake: &Fake) -> Running {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Shared {
            available: Arc::new(AtomicBool::new(true)),
            deposed: tokio_util::sync::CancellationToken::new(),
        };
        let task = tokio::spawn(Writer::new(fake.clone(), shared.clone()).run(rx));
        Running { tx, shared, task }
    }

    fn send(&self, ids: &[&str]) {
        let ops = ids.iter().map(|id| change(id)).collect();
        self.tx.send(Job::Ops(ops)).unwrap();
    }

    async fn ask(&self, job: fn(Waiter) -> Job) -> Result<(), Error> {
        let (done, answer) = oneshot::channel();
        self.tx.send(job(done)).unwrap();
        answer.await.unwrap()
    }

    async fn committed(&self) -> Result<(), Error> {
        self.ask(Job::Sync).await
    }

    fn available(&self) -> bool {
        self.shared.available.load(Ordering::Relaxed)
    }
}

#[tokio::test(start_paused = true)]
async fn changes_nobody_waits_for_share_the_next_commit_or_go_alone_after_the_linger() {
    let fake = Fake::default();
    let w = Running::start(&fake);
    w.send(&["a"]);
    tokio::time::sleep(LINGER / 2).await;
    assert!(fake.commits().is_empty(), "a lingering change waits");
    w.send(&["b"]);
    w.committed().await.unwrap();
    assert_eq!(fake.commits(), [["a", "b"]], "one commit for both");

    w.send(&["c"]);
    tokio::time::sleep(LINGER + Duration::from_millis(1)).await;
    assert_eq!(
        fake.commits(),
        [vec!["a", "b"], vec!["c"]],
        "alone after LINGER"
    );
    // A waiter with nothing pending costs no commit.
    w.committed().await.unwrap();
    assert_eq!(fake.commits().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn after_a_failed_commit_nothing_more_is_written_nor_acknowledged() {
    let fake = Fake::answering([Answer::Failed]);
    let w = Running::start(&fake);
    w.send(&["a"]);
    let (first, second) = tokio::join!(w.committed(), w.committed());
    assert!(matches!(first, Err(Error::Database(_))), "{first:?}");
    assert!(second.is_err(), "every waiter of the batch");
    w.send(&["b"]);
    let later = w.committed().await;
    assert!(matches!(later, Err(Error::AfterFailure(_))), "{later:?}");
    assert!(
        fake.commits().is_empty(),
        "nothing after the failure is written"
    );
    assert!(w.available(), "a refusal is not an outage");
    assert!(w.ask(Job::Close).await.is_err());
    assert_eq!(fake.closed(), Some(false), "not a clean close");
}

#[tokio::test(start_paused = true)]
async fn an_outage_holds_the_changes_and_writes_them_first_once_the_database_is_back() {
    let fake = Fake::answering([Answer::Away, Answer::Away]);
    let w = Running::start(&fake);
    w.send(&["a"]);
    let refused = w.committed().await;
    assert!(matches!(refused, Err(Error::Unavailable(_))), "{refused:?}");
    assert!(!w.available());
    // The first retry finds it away still, the second writes what was held.
    tokio::time::sleep(RETRY + Duration::from_millis(1)).await;
    assert!(!w.available() && fake.commits().is_empty());
    tokio::time::sleep(RETRY).await;
    assert!(w.available());
    assert_eq!(fake.commits(), [["a"]]);
    w.send(&["b"]);
    w.committed().await.unwrap();
    assert_eq!(
        fake.commits(),
        [vec!["a"], vec!["b"]],
        "the gate stayed open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_change_the_database_cannot_hold_is_dropped_and_the_rest_written() {
    let fake = Fake::answering([Answer::Data(1)]);
    let w = Running::start(&fake);
    w.send(&["a", "bad", "c"]);
    let refused = w.committed().await;
    assert!(matches!(refused, Err(Error::Database(_))), "{refused:?}");
    assert_eq!(fake.commits(), [["a", "c"]]);
    w.send(&["d"]);
    w.committed().await.unwrap();
    assert_eq!(fake.commits(), [vec!["a", "c"], vec!["d"]]);
}

#[tokio::test(start_paused = true)]
async fn the_fence_shuts_the_gate_as_deposed() {
    let fake = Fake::answering([Answer::Fenced]);
    let w = Running::start(&fake);
    w.send(&["a"]);
    assert!(matches!(w.committed().await, Err(Error::Database(_))));
    assert!(w.shared.deposed.is_cancelled());
    w.send(&["b"]);
    assert!(matches!(w.committed().await, Err(Error::AfterFailure(_))));
    assert!(fake.commits().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_close_writes_what_lingers_then_closes_then_answers() {
    let fake = Fake::default();
    let w = Running::start(&fake);
    w.send(&["a"]);
    w.ask(Job::Close).await.unwrap();
    assert_eq!(fake.commits(), [["a"]]);
    assert_eq!(fake.closed(), Some(true), "closed before the answer");
    w.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_upkeep_runs_every_period_between_jobs() {
    let fake = Fake::default();
    let w = Running::start(&fake);
    for n in 0..4 {
        tokio::time::sleep(EVERY / 2 + Duration::from_millis(1)).await;
        w.send(&[&n.to_string()]);
        w.committed().await.unwrap();
    }
    assert_eq!(fake.0.lock().unwrap().ticks, 2);
    drop(w.tx);
    w.task.await.unwrap();
    assert_eq!(fake.closed(), Some(false), "dropped, not closed");
}
