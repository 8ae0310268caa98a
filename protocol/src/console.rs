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
