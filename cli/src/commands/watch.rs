//! `--watch [--interval SECS]`, shared by `leo status` and `leo requests`: ask again every
//! interval until Ctrl-C.
//!
//! On a terminal each text answer replaces the last (the screen is cleared); elsewhere answers
//! are appended under a time line, so a log or a pipe keeps the history. With `--json` each
//! answer is one JSON object on one line, never cleared. A broker that goes away is not the
//! end: the terminal shows `broker not running (retrying)`; a text pipe gets that line once
//! per outage (and any other trouble once while it lasts); `--json` gets the same on stderr,
//! so stdout stays one snapshot per line. The output resumes when the broker is back.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde::Serialize;

use super::api::GetError;
use super::style::Style;
use crate::error::CliError;

/// Clears the screen and puts the cursor at the top.
const CLEAR: &str = "\x1b[H\x1b[2J";

#[derive(Debug, Clone, clap::Args)]
pub struct WatchArgs {
    /// Keep asking until Ctrl-C; redraws on a terminal, appends otherwise.
    #[arg(long)]
    pub watch: bool,
    /// Seconds between two answers with --watch (0.1 to 3600).
    #[arg(
        long,
        value_name = "SECS",
        default_value = "1",
        value_parser = parse_interval,
        requires = "watch"
    )]
    pub interval: Duration,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    super::clock::parse_secs(text, 0.1, 3600.0)
}

/// How one answer is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Text,
    /// Indented, for a person reading `--json`.
    JsonPretty,
    /// One line, for `--json --watch`.
    JsonLine,
}

impl Form {
    /// `value` as this form of JSON, with its final newline.
    pub fn encode<T: Serialize>(self, value: &T) -> anyhow::Result<String> {
        let mut text = match self {
            Form::JsonLine => serde_json::to_string(value)?,
            _ => serde_json::to_string_pretty(value)?,
        };
        text.push('\n');
        Ok(text)
    }
}

/// `1s`, `0.25s`, `2m00s`.
fn human_interval(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        super::clock::human(d.as_secs())
    } else {
        format!("{}s", (d.as_secs_f64() * 1000.0).round() / 1000.0)
    }
}

/// Prints what `answer` makes once, or every `interval` with `--watch`.
pub fn run(
    title: &str,
    json: bool,
    args: &WatchArgs,
    style: &Style,
    mut answer: impl FnMut(Form) -> crate::error::Result<String>,
) -> crate::error::Result {
    let mut out = std::io::stdout().lock();
    if !args.watch {
        let text = answer(if json { Form::JsonPretty } else { Form::Text })?;
        out.write_all(text.as_bytes())?;
        return Ok(out.flush()?);
    }
    let form = if json { Form::JsonLine } else { Form::Text };
    let terminal = std::io::stdout().is_terminal();
    // What was last said about trouble, so a pipe hears each new trouble once.
    let mut said: Option<String> = None;
    loop {
        let frame = match answer(form) {
            Ok(text) => {
                said = None;
                Some(text)
            }
            Err(e) => {
                let trouble = match &e {
                    CliError::Broker(GetError::Unreachable(u)) if u.not_running() => {
                        "broker not running (retrying)".to_owned()
                    }
                    e => format!("{} (retrying)", e.message().unwrap_or_default()),
                };
                if terminal && form == Form::Text {
                    Some(format!("{trouble}\n"))
                } else {
                    if said.as_ref() != Some(&trouble) {
                        if json {
                            eprintln!("leo: {trouble}");
                        } else {
                            writeln!(out, "{trouble}")?;
                        }
                        said = Some(trouble);
                    }
                    None
                }
            }
        };
        if let Some(text) = frame {
            if form == Form::Text {
                let every = human_interval(args.interval);
                let now = leo_protocol::time::now();
                let clock = now.get(11..19).unwrap_or_default();
                let stop = if terminal { " · Ctrl-C to stop" } else { "" };
                let header = style.dim(&format!("{title} · every {every} · {clock} UTC{stop}"));
                let clear = if terminal { CLEAR } else { "" };
                let gap = if terminal { "" } else { "\n" };
                write!(out, "{clear}{header}\n\n{text}{gap}")?;
            } else {
                out.write_all(text.as_bytes())?;
            }
            out.flush()?;
        }
        std::thread::sleep(args.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_bounded_seconds() {
        assert_eq!(parse_interval("0.2"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_interval("1"), Ok(Duration::from_secs(1)));
        assert_eq!(human_interval(Duration::from_millis(250)), "0.25s");
        assert_eq!(human_interval(Duration::from_secs(90)), "1m30s");
        for bad in ["0", "0.05", "-1", "NaN", "inf", "1h", "", "3601"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
