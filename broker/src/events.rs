//! The event stream's bus: one global, contiguous `seq`, a bounded replay ring, and a fan-out
//! that never blocks the publisher.
//!
//! Every event is serialized once, in a full and (for requests) a redacted form, when it is
//! published; each stream picks the form it may see. Publishing takes the ring's lock, so seq
//! order, ring order and fan-out order are the same, and a subscriber that reads the ring and
//! subscribes under that lock misses and repeats nothing.
//!
//! **Rule for slow streams:** the fan-out holds `FANOUT` events per stream. A stream that falls
//! further behind resyncs from the ring; if the ring no longer holds what it missed, the stream
//! is closed, and the client reconnects with `Last-Event-ID` (its `hello` then says
//! `replay_gap: true`). Memory per stream is therefore bounded whatever the client does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

/// Events the fan-out holds for a stream that has not read them yet.
pub const FANOUT: usize = 1024;

/// One published event.
#[derive(Debug)]
pub struct Event {
    pub seq: u64,
    pub kind: &'static str,
    /// JSON for provider streams.
    pub full: String,
    /// JSON for other streams, when it differs.
    pub redacted: Option<String>,
}

impl Event {
    /// The data a stream may see.
    pub fn data(&self, provider: bool) -> &str {
        match (&self.redacted, provider) {
            (Some(r), false) => r,
            _ => &self.full,
        }
    }
}

#[derive(Debug)]
struct Ring {
    seq: u64,
    events: VecDeque<Arc<Event>>,
    cap: usize,
}

/// What a new stream starts from.
pub struct Subscription {
    /// The last seq assigned when the stream opened.
    pub seq: u64,
    /// Events after `Last-Event-ID`, oldest first.
    pub replay: Vec<Arc<Event>>,
    /// True when some events after `Last-Event-ID` are no longer held.
    pub gap: bool,
    pub rx: broadcast::Receiver<Arc<Event>>,
}

#[derive(Debug)]
pub struct EventBus {
    ring: Mutex<Ring>,
    tx: broadcast::Sender<Arc<Event>>,
}

impl EventBus {
    pub fn new(replay_events: usize) -> EventBus {
        let (tx, _) = broadcast::channel(FANOUT);
        EventBus {
            ring: Mutex::new(Ring {
                seq: 0,
                events: VecDeque::with_capacity(replay_events.min(65_536)),
                cap: replay_events.max(1),
            }),
            tx,
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // A panic while holding the ring cannot leave it inconsistent (every mutation is a
        // single push or pop), so a poisoned lock is still safe to use.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Assigns the next seq and fans the event out. Returns its seq.
    pub fn publish(&self, kind: &'static str, full: String, redacted: Option<String>) -> u64 {
        let mut ring = self.ring();
        ring.seq += 1;
        let event = Arc::new(Event {
            seq: ring.seq,
            kind,
            full,
            redacted,
        });
        if ring.events.len() == ring.cap {
            ring.events.pop_front();
        }
        ring.events.push_back(event.clone());
        // No receivers is fine: nobody is listening.
        let _ = self.tx.send(event);
        ring.seq
    }

    /// Opens a stream that resumes after `last_event_id`, if given.
    pub fn subscribe(&self, last_event_id: Option<u64>) -> Subscription {
        let ring = self.ring();
        let rx = self.tx.subscribe();
        let (replay, gap) = match last_event_id {
            None => (Vec::new(), false),
            Some(last) => match ring_since(&ring, last) {
                Ok(events) => (events, false),
                Err(held) => (held, true),
            },
        };
        Subscription {
            seq: ring.seq,
            replay,
            gap,
            rx,
        }
    }

    /// Every held event after `last`, or `None` if some of them are gone.
    pub fn since(&self, last: u64) -> Option<Vec<Arc<Event>>> {
        ring_since(&self.ring(), last).ok()
    }

    pub fn seq(&self) -> u64 {
        self.ring().seq
    }
}

/// `Ok(events after last)`, or `Err(what is held)` when the ring lost some of them.
fn ring_since(ring: &Ring, last: u64) -> Result<Vec<Arc<Event>>, Vec<Arc<Event>>> {
    let last = last.min(ring.seq);
    let held: Vec<Arc<Event>> = ring
        .events
        .iter()
        .filter(|e| e.seq > last)
        .cloned()
        .collect();
    let complete = match held.first() {
        Some(first) => first.seq == last + 1,
        None => last == ring.seq,
    };
    if complete { Ok(held) } else { Err(held) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_is_contiguous_and_gaps_are_reported() {
        let bus = EventBus::new(3);
        for i in 0..5 {
            bus.publish("x", format!("{i}"), None);
        }
        let sub = bus.subscribe(Some(3));
        assert!(!sub.gap);
        assert_eq!(sub.replay.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5]);
        let sub = bus.subscribe(Some(1));
        assert!(sub.gap);
        assert_eq!(
            sub.replay.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        let sub = bus.subscribe(Some(5));
        assert!(!sub.gap && sub.replay.is_empty());
        assert!(bus.since(2).is_some());
        assert!(bus.since(1).is_none());
    }
}
