//! The audit trail's chain: every entry carries the hash of the one before, so an entry changed,
//! removed or inserted after it was written shows in [`verify`] (`leo audit verify`).
//!
//! An entry's `hash` is SHA-256 over `prev` (the hash of the entry written before it, or
//! [`GENESIS`] for the first) and every field it shows: when, who, with which token, the action,
//! its target and detail, and the instance that wrote it (PostgreSQL). The fields are hashed as
//! one JSON array, so no two entries' fields run together the same way. Entries are chained in
//! the order of `seq`: on SQLite every writer (the broker's and `leo`'s own commands) appends
//! under the file's write lock; on PostgreSQL under a lock on the table, so instances writing
//! at once never fork the chain.
//!
//! Entries written before the chain existed (by a broker older than migration 3 of
//! `state/history.db`, 10 of PostgreSQL's schema) have no hash: they are kept, listed and counted
//! by [`verify`] as written before the chain, but vouched for by nothing. The first entry after
//! them starts the chain from [`GENESIS`] (32 zero bytes). Retention (`history.keep_days`, `history.max_rows`)
//! removes the oldest entries, so the oldest kept entry may name a hash no entry has any more:
//! the chain is checked from it on. Whoever can write the database can also rewrite every hash
//! after an edit; the head's hash [`verify`] reports, kept elsewhere, pins the trail up to it.

use sha2::{Digest, Sha256};

use super::db::AuditRow;
use super::{Error, Log};

/// The `prev` of the chain's first entry.
pub const GENESIS: [u8; 32] = [0; 32];

/// How many entries [`verify`] reads at a time.
const PAGE: u32 = 1000;

/// The hash of `row`, written by `instance` (PostgreSQL) after the entry whose hash is `prev`.
/// Hashes are stored as their 32 bytes (`BLOB`, `BYTEA`), half the size of their hex.
pub fn link(prev: &[u8], instance: Option<&str>, row: &AuditRow) -> Vec<u8> {
    let fields = serde_json::json!([
        hex(prev),
        instance,
        row.at,
        row.at_ms,
        row.principal,
        row.token_kind,
        row.action,
        row.target,
        row.detail,
    ]);
    Sha256::digest(fields.to_string().as_bytes()).to_vec()
}

/// A hash as `leo audit verify` shows it.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One stored entry with its place in the chain, as [`verify`] reads it.
#[derive(Debug, Clone)]
pub struct Chained {
    pub seq: u64,
    pub row: AuditRow,
    pub instance: Option<String>,
    pub prev: Option<Vec<u8>>,
    pub hash: Option<Vec<u8>>,
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every chained entry chains.
    Chains {
        /// Entries checked.
        entries: u64,
        /// Entries before them written before the chain existed (not checked).
        before_chain: u64,
        /// The newest entry's `seq` and hash (hex), when there is one.
        head_seq: Option<u64>,
        head: Option<String>,
        /// Whether the oldest chained entry follows entries retention removed.
        pruned: bool,
    },
    /// Entry `seq` is the first that does not chain.
    Broken {
        seq: u64,
        why: Break,
        /// Entries that chained before it.
        entries: u64,
    },
}

/// Why an entry does not chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Break {
    /// Its fields do not give its hash: it was changed after it was written.
    Changed,
    /// It does not name the hash of the entry before it: an entry between them was removed or
    /// inserted, or the one before had its hash rewritten.
    Unlinked,
    /// It has no hash although entries before it have: hashes were removed.
    Unhashed,
}

impl Break {
    pub fn as_str(self) -> &'static str {
        match self {
            Break::Changed => {
                "its content does not match its hash: it was changed after it was written"
            }
            Break::Unlinked => {
                "it does not name the hash of the entry before it: an entry was removed or \
                 inserted, or the hash of the one before was rewritten"
            }
            Break::Unhashed => "it has no hash, although entries before it have",
        }
    }
}

/// Walks the whole trail, oldest first, and reports the first entry that does not chain.
pub fn verify(log: &mut impl Log) -> Result<Verdict, Error> {
    let mut walk = Walk::default();
    let mut after = 0;
    loop {
        let page = log.audit_chain(after, PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for entry in &page {
            if let Some(broken) = walk.step(entry) {
                return Ok(broken);
            }
        }
        if page.len() < PAGE as usize {
            break;
        }
    }
    Ok(Verdict::Chains {
        entries: walk.chained,
        before_chain: walk.before_chain,
        head_seq: walk.head.as_ref().map(|h| h.0),
        head: walk.head.map(|h| hex(&h.1)),
        pruned: walk.pruned,
    })
}

/// Where [`verify`] is in the trail.
#[derive(Default)]
struct Walk {
    before_chain: u64,
    chained: u64,
    /// The last chained entry's `seq` and hash.
    head: Option<(u64, Vec<u8>)>,
    pruned: bool,
}

impl Walk {
    fn step(&mut self, e: &Chained) -> Option<Verdict> {
        let broken = |why| Verdict::Broken {
            seq: e.seq,
            why,
            entries: self.chained,
        };
        let (Some(prev), Some(hash)) = (&e.prev, &e.hash) else {
            if self.head.is_none() && self.chained == 0 {
                self.before_chain += 1;
                return None;
            }
            return Some(broken(Break::Unhashed));
        };
        match &self.head {
            Some((_, last)) if last != prev => return Some(broken(Break::Unlinked)),
            Some(_) => {}
            // The first chained entry: after unhashed entries it starts the chain (retention
            // removes the oldest first, so none of the chain was removed before them).
            None if prev[..] == GENESIS => {}
            None if self.before_chain > 0 => return Some(broken(Break::Unlinked)),
            None => self.pruned = true,
        }
        if link(prev, e.instance.as_deref(), &e.row) != *hash {
            return Some(broken(Break::Changed));
        }
        self.chained += 1;
        self.head = Some((e.seq, hash.clone()));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, prev: Option<&[u8]>, action: &str) -> Chained {
        let row = AuditRow {
            action: action.into(),
            ..AuditRow::default()
        };
        let hash = prev.map(|p| link(p, None, &row));
        Chained {
            seq,
            row,
            instance: None,
            prev: prev.map(<[u8]>::to_vec),
            hash,
        }
    }

    fn walk(entries: &[Chained]) -> Option<Verdict> {
        let mut w = Walk::default();
        entries.iter().find_map(|e| w.step(e))
    }

    fn chain(n: u64) -> Vec<Chained> {
        let mut prev = GENESIS.to_vec();
        (1..=n)
            .map(|seq| {
                let e = entry(seq, Some(&prev), &format!("a{seq}"));
                prev = e.hash.clone().unwrap();
                e
            })
            .collect()
    }

    fn why(v: Option<Verdict>) -> Option<(u64, Break)> {
        match v {
            Some(Verdict::Broken { seq, why, .. }) => Some((seq, why)),
            _ => None,
        }
    }

    #[test]
    fn a_chain_with_entries_before_it_chains() {
        let mut all = vec![entry(1, None, "old"), entry(2, None, "old")];
        let mut rest = chain(3);
        for (n, e) in rest.iter_mut().enumerate() {
            e.seq = 3 + n as u64;
        }
        all.extend(rest);
        assert_eq!(walk(&all), None);
    }

    #[test]
    fn each_kind_of_tampering_names_its_entry() {
        let mut edited = chain(4);
        edited[1].row.detail = Some("edited".into());
        assert_eq!(why(walk(&edited)), Some((2, Break::Changed)));

        let mut removed = chain(4);
        removed.remove(2);
        assert_eq!(why(walk(&removed)), Some((4, Break::Unlinked)));

        let mut rehashed = chain(4);
        rehashed[1].row.detail = Some("edited".into());
        rehashed[1].hash = Some(link(&GENESIS, None, &rehashed[0].row));
        assert_eq!(why(walk(&rehashed)), Some((2, Break::Changed)));

        let mut unhashed = chain(4);
        unhashed[2].hash = None;
        assert_eq!(why(walk(&unhashed)), Some((3, Break::Unhashed)));

        // Entries before the chain, then one that does not start it.
        let mut cut = vec![entry(1, None, "old")];
        cut.extend(chain(3).into_iter().skip(1));
        assert_eq!(why(walk(&cut)), Some((2, Break::Unlinked)));
    }

    #[test]
    fn a_pruned_start_is_checked_from_the_oldest_kept_entry() {
        let pruned: Vec<_> = chain(5).into_iter().skip(2).collect();
        let mut w = Walk::default();
        assert!(pruned.iter().all(|e| w.step(e).is_none()));
        assert!(w.pruned);
        assert_eq!(w.chained, 3);
    }

    #[test]
    fn the_hash_covers_every_field() {
        let base = AuditRow {
            at: "t".into(),
            at_ms: 1,
            principal: "p".into(),
            token_kind: "k".into(),
            action: "a".into(),
            target: Some("x".into()),
            detail: None,
        };
        let h = link(&GENESIS, None, &base);
        let changes: [fn(&mut AuditRow); 7] = [
            |r| r.at.push('1'),
            |r| r.at_ms += 1,
            |r| r.principal.push('1'),
            |r| r.token_kind.push('1'),
            |r| r.action.push('1'),
            |r| r.target = None,
            |r| r.detail = Some(String::new()),
        ];
        for change in changes {
            let mut r = base.clone();
            change(&mut r);
            assert_ne!(link(&GENESIS, None, &r), h, "{r:?}");
        }
        assert_ne!(link(&GENESIS, Some("i_a"), &base), h);
        assert_ne!(link(&[1; 32], None, &base), h);
    }
}
