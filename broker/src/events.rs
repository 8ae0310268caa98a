//! The event stream's bus: one global, contiguous `seq`, a bounded replay ring, and a fan-out
//! that never blocks the publisher.
//!
//! Every event is serialized once, in a full and (for requests) a redacted form, when it is
//! published; each stream picks the form it may see. Publishing takes the ring's lock, so seq
//! order, ring order and fan-out order are the same, and a subscriber that reads the ring and
//! subscribes under that lock misses and repeats nothing.
//!
//! **Rule for slow streams:** each stream has a forwarder that takes events off the fan-out as
//! they are published and queues them for the socket, counting their bytes. A stream whose
//! queue would pass `STREAM_BACKLOG_BYTES` (its client reads slower than events arrive) is
//! closed; the client reconnects with `Last-Event-ID` and gets what the ring still holds (its
//! `hello` says `replay_gap: true` when that is not everything). Events are shared between
//! streams, so the broker's memory for all backlogs together is at most one backlog budget, plus
//! the ring, which is bounded by count (`replay_events`) and by `REPLAY_BYTES`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

/// Events the fan-out holds for a forwarder that has not taken them yet. Forwarders never wait
/// on a socket, so this is only reached when the broker is starved of CPU; a forwarder that
/// lags resyncs from the ring.
pub const FANOUT: usize = 1024;
/// Bytes of events a stream may have queued for its socket before it is closed.
pub const STREAM_BACKLOG_BYTES: usize = 8 * 1024 * 1024;
/// Bytes of events the replay ring keeps at most, besides its count limit.
pub const REPLAY_BYTES: usize = 16 * 1024 * 1024;

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
    /// Roughly what the event occupies, for the byte budgets.
    pub fn size(&self) -> usize {
        self.full.len() + self.redacted.as_ref().map_or(0, String::len) + 64
    }

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
    bytes: usize,
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
                bytes: 0,
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
        ring.bytes += event.size();
        ring.events.push_back(event.clone());
        while ring.events.len() > ring.cap || (ring.bytes > REPLAY_BYTES && ring.events.len() > 1) {
            if let Some(old) = ring.events.pop_front() {
                ring.bytes -= old.size();
            }
        }
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
