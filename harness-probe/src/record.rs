//! The probe's record file: one JSON object per line, appended by every `serve` process of a
//! run (a harness may start the probe more than once) and by the reference clients and fake model
//! servers, which add what they saw from their side.
//!
//! Each line has `event` and `unix_ms`; lines written by `serve` also carry `session` (one per
//! probe process) and `t_ms` (milliseconds since that process started). Lines from the other side
//! carry `source` (`client` or `model`) instead of `session`. Writers use `O_APPEND` and one
//! `write` per line, so lines from concurrent processes never interleave.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Map, Value};

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The writer one `serve` process uses.
pub struct Log {
    file: Mutex<File>,
    session: String,
    start: Instant,
}

impl Log {
    /// Opens (creating if needed) `path` for appending; `session` names this probe process.
    pub fn open(path: &Path, session: String) -> std::io::Result<Log> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Log {
            file: Mutex::new(file),
            session,
            start: Instant::now(),
        })
    }

    /// Milliseconds since this log was opened.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Appends one event. `fields` must be a JSON object (anything else is stored under `data`).
    /// A failed write is logged and otherwise ignored: the probe keeps serving its client.
    pub fn write(&self, event: &str, fields: Value) {
        let mut line = Map::new();
        line.insert("session".into(), Value::String(self.session.clone()));
        line.insert("t_ms".into(), Value::from(self.elapsed_ms()));
        line.insert("unix_ms".into(), Value::from(unix_ms()));
        line.insert("event".into(), Value::String(event.to_owned()));
        match fields {
            Value::Object(map) => line.extend(map),
            Value::Null => {}
            other => {
                line.insert("data".into(), other);
            }
        }
        let mut text = Value::Object(line).to_string();
        text.push('\n');
        let result = match self.file.lock() {
            Ok(mut file) => file.write_all(text.as_bytes()),
            Err(poisoned) => poisoned.into_inner().write_all(text.as_bytes()),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, event, "could not write a probe record");
        }
    }
}

/// Appends one record from the client or model side (`source` is `client` or `model`) to the
/// record file at `path`. Used by the reference clients; errors are logged and ignored.
pub fn write_side(path: &Path, source: &str, event: &str, fields: Value) {
    let mut line = Map::new();
    line.insert("source".into(), Value::String(source.to_owned()));
    line.insert("unix_ms".into(), Value::from(unix_ms()));
    line.insert("event".into(), Value::String(event.to_owned()));
    if let Value::Object(map) = fields {
        line.extend(map);
    }
    let mut text = Value::Object(line).to_string();
    text.push('\n');
    let result = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = result {
        tracing::warn!(error = %e, event, "could not write a side record");
    }
}

/// One line of a record file, as read back.
#[derive(Debug, Clone, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub t_ms: Option<u64>,
    #[serde(default)]
    pub unix_ms: u64,
    pub event: String,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Record {
    /// A string field.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// An unsigned integer field.
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.fields.get(key).and_then(Value::as_u64)
    }
}

/// Reads a record file. Lines that are not records (a torn last line after a crash, say) are
/// skipped and counted in the second value.
pub fn read(path: &Path) -> std::io::Result<(Vec<Record>, usize)> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let mut records = Vec::new();
    let mut skipped = 0;
    for line in BufReader::new(file).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(&line) {
            Ok(record) => records.push(record),
            Err(_) => skipped += 1,
        }
    }
    Ok((records, skipped))
}

/// The UTC calendar date (`YYYY-MM-DD`) of a Unix time in milliseconds.
pub fn utc_date(unix_ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms);
    let mut stamp = leo_protocol::time::rfc3339(t);
    stamp.truncate(10);
    stamp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(1_795_000_000_000), "2026-11-18");
    }

    #[test]
    fn write_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let log = Log::open(&path, "s1".into()).unwrap();
        log.write("request", serde_json::json!({"method": "tools/list"}));
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{torn\n")
            .unwrap();
        let (records, skipped) = read(&path).unwrap();
        assert_eq!(skipped, 1);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].session.as_deref(), Some("s1"));
        assert_eq!(records[0].str("method"), Some("tools/list"));
    }
}
