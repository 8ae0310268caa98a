//! Who leads: the election's rules, apart from the database that keeps its lease, so that
//! they run in-process against a fake lease under tokio's paused clock (the tests below) and
//! against PostgreSQL in production (`instance::PgLease`, over `store::postgres::lease`).
//!
//! The rules, each written here once:
//! - a follower looks at the lease every [`Timing::poll`], and says it is alive every
//!   [`Timing::heartbeat`] (so `leo cluster status` lists it);
//! - a lease not renewed for [`Timing::lease`] is free (its holder's host vanished, or it is
//!   frozen), and so is one whose holder's process died (its connection to the database
//!   closed: `lease`'s alive lock) and one given up at a clean stop; a follower that finds it
//!   free takes it (the epoch goes up by one) and leads;
//! - the leader renews its lease every heartbeat; a renewal that cannot reach the database is
//!   tried again at the next one (while the database is away nothing is committed anyway:
//!   every write batch is fenced by the epoch), and a renewal that finds another instance
//!   holding the lease ends the leadership: the instance is deposed and stops serving.

use std::fmt::Display;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::store::postgres::lease::{Leader, Look};

/// The election's clock: `cluster.heartbeat_ms`, `cluster.lease_ms` and `cluster.poll_ms`
/// (checked by `config`: the heartbeat is shorter than the lease, the poll no longer than it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How often the leader renews its lease, and a follower says it is alive.
    pub heartbeat: Duration,
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// How often a follower looks at the lease.
    pub poll: Duration,
}

impl Timing {
    /// The intervals `config.yaml` names under `cluster:`.
    pub fn of(config: &crate::config::ClusterConfig) -> Timing {
        Timing {
            heartbeat: Duration::from_millis(config.heartbeat_ms),
            lease: Duration::from_millis(config.lease_ms),
            poll: Duration::from_millis(config.poll_ms),
        }
    }
}

/// Where an instance keeps the lease: the database's `cluster` and `instances` rows in
/// production.
pub(crate) trait Lease {
    type Error: Display;
    /// What taking the lease gives: in production the store, opened under the lease.
    type Taken;
    /// Who leads now (`Free` when nobody holds a fresh lease, its holder's process died, or
    /// this instance holds it); records meanwhile that this instance is alive when `alive`.
    async fn look(&self, alive: bool) -> Result<Look, Self::Error>;
    /// Takes the lease unless another instance holds a fresh one (what leading needs, in a
    /// new epoch), or says who holds it.
    async fn take(&self) -> Result<Result<Self::Taken, Leader>, Self::Error>;
    /// Renews the lease held in `epoch`: `Some(holder)` when another instance took it since.
    async fn renew(&self, epoch: i64) -> Result<Option<String>, Self::Error>;
    /// Gives the lease up (or says a follower left), so that a follower takes over at its
    /// next look.
    async fn release(&self) -> Result<(), Self::Error>;
}

/// What a look found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role<Taken> {
    /// The lease was free and this instance took it.
    Leads(Taken),
    /// Another instance holds the lease.
    Follows(Leader),
}

/// One instance's side of the election (see the module's doc).
pub(crate) struct Elector<L> {
    lease: L,
    timing: Timing,
    /// When this instance last said it is alive, as a follower.
    said_alive: Option<Instant>,
}

impl<L: Lease> Elector<L> {
    pub fn new(lease: L, timing: Timing) -> Elector<L> {
        Elector {
            lease,
            timing,
            said_alive: None,
        }
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// A follower's look: who leads, the lease taken if it is free. Saying it is alive goes
    /// with the first look after each heartbeat.
    pub async fn look(&mut self) -> Result<Role<L::Taken>, L::Error> {
        let alive = self
            .said_alive
            .is_none_or(|t| t.elapsed() >= self.timing.heartbeat);
        let look = self.lease.look(alive).await?;
        if alive {
            self.said_alive = Some(Instant::now());
        }
        match look {
            Look::Held(leader) => Ok(Role::Follows(leader)),
            Look::Free => Ok(match self.lease.take().await? {
                Ok(taken) => Role::Leads(taken),
                Err(leader) => Role::Follows(leader),
            }),
        }
    }

    /// Holds the lease taken in `epoch`, renewing it every heartbeat, until a renewal finds
    /// that another instance took it: resolves then with who holds it. A renewal that fails
    /// is logged once and tried again at the next heartbeat.
    pub async fn hold(&self, epoch: i64) -> String {
        let mut failing = false;
        loop {
            tokio::time::sleep(self.timing.heartbeat).await;
            match self.lease.renew(epoch).await {
                Ok(None) => {
                    failing = false;
                    crate::metrics::global().lease_renewed();
                }
                Ok(Some(holder)) => return holder,
                Err(e) => {
                    if !failing {
                        warn!(error = %e, "cannot renew the lease; trying again at the next heartbeat");
                    }
                    failing = true;
                }
            }
        }
    }

    /// Gives the lease up, or says this follower left.
    pub async fn release(&self) -> Result<(), L::Error> {
        self.lease.release().await
    }
}

#[cfg(test)]
mod tests {
    //! The election against a lease kept in memory, with the database's rules (`lease.rs`'s
    //! SQL): a lease is fresh for `Timing::lease` after its last renewal, and taking it
    //! bumps the epoch. Time is tokio's paused clock: a test of minutes runs in milliseconds.

    use std::sync::{Arc, Mutex};

    use super::*;

    /// The database's rows: who leads, in which epoch, renewed when.
    #[derive(Default)]
    struct Rows {
        leader: Option<String>,
        epoch: i64,
        renewed: Option<Instant>,
        /// Instances whose connection is cut: every statement of theirs fails.
        cut: Vec<String>,
        /// Instances whose process died: their connections closed, their alive lock with them.
        dead: Vec<String>,
        /// Who renewed, once per renewal.
        renewals: Vec<String>,
    }

    struct FakeLease {
        me: String,
        rows: Arc<Mutex<Rows>>,
        lease: Duration,
    }

    impl FakeLease {
        fn rows(&self) -> Result<std::sync::MutexGuard<'_, Rows>, String> {
            let rows = self.rows.lock().unwrap();
            if rows.cut.contains(&self.me) {
                return Err(format!("{} cannot reach the database", self.me));
            }
            Ok(rows)
        }

        fn held(&self, rows: &Rows) -> Option<Leader> {
            let fresh = rows.renewed.is_some_and(|t| t.elapsed() < self.lease);
            match &rows.leader {
                Some(id) if fresh && *id != self.me && !rows.dead.contains(id) => Some(Leader {
                    id: id.clone(),
                    url: None,
                }),
                _ => None,
            }
        }
    }

    impl Lease for FakeLease {
        type Error = String;
        /// The epoch taken.
        type Taken = i64;

        async fn look(&self, _alive: bool) -> Result<Look, String> {
            let rows = self.rows()?;
            Ok(self.held(&rows).map_or(Look::Free, Look::Held))
        }

        async fn take(&self) -> Result<Result<i64, Leader>, String> {
            let mut rows = self.rows()?;
            if let Some(leader) = self.held(&rows) {
                return Ok(Err(leader));
            }
            rows.epoch += 1;
            rows.leader = Some(self.me.clone());
            rows.renewed = Some(Instant::now());
            Ok(Ok(rows.epoch))
        }

        async fn renew(&self, epoch: i64) -> Result<Option<String>, String> {
            let mut rows = self.rows()?;
            if rows.leader.as_deref() != Some(&self.me) || rows.epoch != epoch {
                return Ok(Some(rows.leader.clone().unwrap_or_else(|| "(none)".into())));
            }
            rows.renewed = Some(Instant::now());
            rows.renewals.push(self.me.clone());
            Ok(None)
        }

        async fn release(&self) -> Result<(), String> {
            let mut rows = self.rows()?;
            if rows.leader.as_deref() == Some(&self.me) {
                rows.leader = None;
            }
            Ok(())
        }
    }

    const TIMING: Timing = Timing {
        heartbeat: Duration::from_secs(5),
        lease: Duration::from_secs(15),
        poll: Duration::from_secs(1),
    };

    fn elector(rows: &Arc<Mutex<Rows>>, me: &str) -> Elector<FakeLease> {
        let lease = FakeLease {
            me: me.into(),
            rows: rows.clone(),
            lease: TIMING.lease,
        };
        Elector::new(lease, TIMING)
    }

    /// Looks every poll until this elector leads: its epoch, and how long it followed.
    async fn follow_until_leading(e: &mut Elector<FakeLease>) -> (i64, Duration) {
        let started = Instant::now();
        loop {
            if let Ok(Role::Leads(epoch)) = e.look().await {
                return (epoch, started.elapsed());
            }
            assert!(
                started.elapsed() < 10 * TIMING.lease,
                "never took the lease"
            );
            tokio::time::sleep(e.timing().poll).await;
        }
    }

    /// The first instance leading, its lease renewed by a task of its own (abort it to kill
    /// the instance), which ends with the holder that deposed it.
    async fn leading(mut e: Elector<FakeLease>) -> (i64, tokio::task::JoinHandle<String>) {
        let Ok(Role::Leads(epoch)) = e.look().await else {
            panic!("the first instance leads");
        };
        (epoch, tokio::spawn(async move { e.hold(epoch).await }))
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_instance_leads_and_the_next_follows_it() {
        let rows = Arc::default();
        assert_eq!(elector(&rows, "a").look().await, Ok(Role::Leads(1)));
        let Ok(Role::Follows(leader)) = elector(&rows, "b").look().await else {
            panic!("b follows");
        };
        assert_eq!(leader.id, "a");
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_renews_keeps_its_lease_however_long_it_leads() {
        let rows = Arc::default();
        let (_, a) = leading(elector(&rows, "a")).await;
        let mut b = elector(&rows, "b");
        let started = Instant::now();
        while started.elapsed() < 10 * TIMING.lease {
            assert!(
                matches!(b.look().await, Ok(Role::Follows(ref l)) if l.id == "a"),
                "b took the lease of a leader that renews it"
            );
            tokio::time::sleep(TIMING.poll).await;
        }
        let renewals = rows.lock().unwrap().renewals.len();
        let heartbeats = (10 * TIMING.lease).as_secs() / TIMING.heartbeat.as_secs();
        assert!(
            renewals as u64 >= heartbeats - 1,
            "{renewals} renewals in {heartbeats} heartbeats"
        );
        assert!(!a.is_finished(), "the leader still leads");
    }

    #[tokio::test(start_paused = true)]
    async fn a_frozen_leader_is_replaced_once_its_lease_lapses_and_not_before() {
        let rows = Arc::default();
        let (epoch, a) = leading(elector(&rows, "a")).await;
        // Frozen between two renewals: its connection, and its alive lock, stay.
        tokio::time::sleep(TIMING.heartbeat * 3 + Duration::from_millis(1_700)).await;
        a.abort();
        let mut b = elector(&rows, "b");
        let (taken, after) = follow_until_leading(&mut b).await;
        assert_eq!(taken, epoch + 1, "the epoch goes up with each take");
        assert!(
            after >= TIMING.lease - TIMING.heartbeat && after <= TIMING.lease + TIMING.poll,
            "taken over {after:?} after the kill"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_killed_leader_is_replaced_at_the_next_poll_not_after_its_lease() {
        let rows: Arc<Mutex<Rows>> = Arc::default();
        let (epoch, a) = leading(elector(&rows, "a")).await;
        let mut b = elector(&rows, "b");
        assert!(matches!(b.look().await, Ok(Role::Follows(_))));
        // Killed just after a renewal: its lease has all its length to run.
        tokio::time::sleep(TIMING.heartbeat + Duration::from_millis(1)).await;
        a.abort();
        rows.lock().unwrap().dead.push("a".into());
        let (taken, after) = follow_until_leading(&mut b).await;
        assert_eq!(taken, epoch + 1);
        assert!(after <= TIMING.poll, "taken over {after:?} after the kill");
    }

    #[tokio::test(start_paused = true)]
    async fn a_clean_release_hands_over_at_the_next_poll() {
        let rows = Arc::default();
        let (_, a) = leading(elector(&rows, "a")).await;
        tokio::time::sleep(TIMING.heartbeat * 2).await;
        a.abort();
        elector(&rows, "a").release().await.unwrap();
        let mut b = elector(&rows, "b");
        let (_, after) = follow_until_leading(&mut b).await;
        assert!(
            after <= TIMING.poll,
            "taken over {after:?} after the release"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_cut_off_past_its_lease_is_deposed_when_it_reaches_the_database() {
        let rows: Arc<Mutex<Rows>> = Arc::default();
        let (epoch, a) = leading(elector(&rows, "a")).await;
        rows.lock().unwrap().cut.push("a".into());
        let mut b = elector(&rows, "b");
        let (b_epoch, after) = follow_until_leading(&mut b).await;
        assert!(after <= TIMING.lease + TIMING.poll, "{after:?}");
        assert_eq!(b_epoch, epoch + 1);
        // Cut off, the old leader cannot know yet: it keeps trying to renew.
        tokio::time::sleep(TIMING.heartbeat * 4).await;
        assert!(!a.is_finished(), "a renewal that fails is not a deposition");
        rows.lock().unwrap().cut.clear();
        let deposed = tokio::time::timeout(TIMING.heartbeat + TIMING.poll, a).await;
        let holder = deposed.expect("deposed at its next renewal").unwrap();
        assert_eq!(holder, "b", "told who leads");
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_followers_one_takes_over_and_the_other_follows_it() {
        let rows = Arc::default();
        let (_, a) = leading(elector(&rows, "a")).await;
        a.abort();
        let (mut b, mut c) = (elector(&rows, "b"), elector(&rows, "c"));
        let (leader, follower) = loop {
            tokio::time::sleep(TIMING.poll).await;
            match (b.look().await.unwrap(), c.look().await.unwrap()) {
                (Role::Leads(_), Role::Follows(l)) => break ("b", l),
                (Role::Follows(l), Role::Leads(_)) => break ("c", l),
                (Role::Follows(_), Role::Follows(_)) => {}
                both => panic!("both lead: {both:?}"),
            }
        };
        assert_eq!(follower.id, leader, "the other follows the new leader");
    }
}
