//! The results table, with the machine and the date.

use std::fmt::Write as _;

pub struct Report {
    command: String,
    sections: Vec<(String, Vec<[String; 3]>)>,
}

impl Report {
    /// A report of a run started as `command`.
    pub fn new(command: String) -> Report {
        Report {
            command,
            sections: Vec::new(),
        }
    }

    /// Starts a section of rows `(what, value, note)`.
    pub fn section(&mut self, title: &str) {
        self.sections.push((title.to_owned(), Vec::new()));
    }

    pub fn row(&mut self, what: &str, value: String, note: &str) {
        eprintln!("  {what}: {value} {note}");
        if let Some((_, rows)) = self.sections.last_mut() {
            rows.push([what.to_owned(), value, note.to_owned()]);
        }
    }

    pub fn markdown(&self) -> String {
        let mut out = String::from("# Benchmark results\n\n");
        let _ = writeln!(out, "- date: {}", leo_date());
        let _ = writeln!(out, "- machine: {}", machine());
        let _ = writeln!(out, "- command: `{}`", self.command);
        let _ = writeln!(
            out,
            "- how to run: `bench/run.sh` (see `bench/README.md`); nothing here is asserted\n"
        );
        for (title, rows) in &self.sections {
            let _ = writeln!(out, "## {title}\n");
            let _ = writeln!(out, "| measure | value | note |\n|---|---|---|");
            for [a, b, c] in rows {
                let _ = writeln!(out, "| {a} | {b} | {c} |");
            }
            out.push('\n');
        }
        out
    }
}

fn leo_date() -> String {
    std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map(|k| format!("{} GiB", k / 1024 / 1024))
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem}")
}

/// Percentile of sorted microsecond samples.
#[allow(dead_code)]
pub fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
