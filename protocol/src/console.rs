//! Bodies of the web console's JSON routes (`/console/…`) and of the operator's cancel route.
//!
//! The console's page is served by the broker; these are the only shapes it posts. The login
//! form is plain `application/x-www-form-urlencoded` (`token=…`) and has no type here.

use serde::{Deserialize, Serialize};

/// The console's group and its one tool.
pub const CONSOLE_GROUP: &str = "console";
pub const ASK_HUMAN: &str = "ask_human";

/// `POST /console/ask-human`: switch the built-in `ask_human` tool on or off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskHumanBody {
    pub on: bool,
}

/// What `POST /console/ask-human` answers: the switch as it now stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskHumanState {
    pub on: bool,
}

/// `POST /console/requests/{id}/answer`: the operator's answer to an `ask_human` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    pub text: String,
}

/// `POST …/requests/{id}/cancel` (console and API): no fields; an absent body is `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {}

/// `GET /console/session`: the login the cookie names is valid for this long yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSession {
    pub expires_in_s: u64,
}

/// `POST /logout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggedOut {
    pub logged_out: bool,
}

/// Minutes the console's chart of calls covers: the last hour.
pub const CHART_MINUTES: usize = 60;

/// `GET /console/history`: the last ended calls for the console's panel (an
/// [`EndedList`](crate::history::EndedList) without contents), and the calls of the last hour
/// per minute for its chart, both read from the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleHistory {
    pub calls: Vec<crate::history::EndedRequest>,
    pub next_before: Option<u64>,
    /// The calls that ended in each of the last [`CHART_MINUTES`] minutes, oldest first; the
    /// last is the minute under way.
    pub per_minute: Vec<MinuteCalls>,
}

/// The calls that ended in one minute, by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinuteCalls {
    /// The minute's start, RFC 3339 in UTC.
    pub at: String,
    pub result: u64,
    pub error: u64,
    pub timeout: u64,
    pub cancelled: u64,
    pub no_client: u64,
}

impl MinuteCalls {
    /// The count of `outcome`'s calls, to add to.
    pub fn of(&mut self, outcome: crate::history::CallOutcome) -> &mut u64 {
        use crate::history::CallOutcome;
        match outcome {
            CallOutcome::Result => &mut self.result,
            CallOutcome::Error => &mut self.error,
            CallOutcome::Timeout => &mut self.timeout,
            CallOutcome::Cancelled => &mut self.cancelled,
            CallOutcome::NoClient => &mut self.no_client,
        }
    }
}
