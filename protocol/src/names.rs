//! The identifiers every part passes around, each its own type so one cannot be handed where
//! another is wanted: an agent's name (`AgentName`), a provider stream's client id (`ClientId`)
//! and a call's request id (`RequestId`).
//!
//! **The name rule is written once, here:** 1 to 64 of `[A-Za-z0-9_.-]` (`is_name`). It names
//! agents, groups, API clients, devices and webhooks, and bounds error codes. An `AgentName` is
//! checked when it is made (`AgentName::parse`, `TryFrom`, serde, `FromStr` for clap), at the
//! edge where a name comes in, so nothing behind the edge holds an unchecked one.
//!
//! **The text rule is written once, here too:** a string the broker keeps holds no U+0000
//! (NUL) (`storable`). PostgreSQL's `text` cannot hold that character (SQLite can), so a
//! string with it would be kept on one store and refused by the other; it is refused where it
//! comes in, with the JSON path or parameter at fault, never met by the store's writer. Names
//! obey it by construction; free text an edge takes as given (a session id, a query filter)
//! is checked with `storable`; free text inside JSON the broker stores as JSON text (a call's
//! arguments, a result's content) needs no rule, since JSON writes U+0000 as `\u0000`.
//!
//! Client and request ids are made by the broker (`c_…`, `r_…`) and obey no rule of their own
//! (an unknown one is refused as unknown, not as malformed); their types only keep them apart.
//! All three read and write as plain JSON strings.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

/// The longest name.
pub const MAX_NAME: usize = 64;

/// The one name rule: 1 to `MAX_NAME` of `[A-Za-z0-9_.-]`.
pub fn is_name(text: &str) -> bool {
    is_name_within(text, MAX_NAME)
}

/// The name rule with another bound: 1 to `max` of `[A-Za-z0-9_.-]`.
pub fn is_name_within(text: &str, max: usize) -> bool {
    !text.is_empty()
        && text.len() <= max
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A name that breaks the rule. Callers add what they name and where it was (`at $.agent: …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to 64 of [A-Za-z0-9_.-]")]
pub struct NameError;

/// The one text rule: no U+0000 (NUL), which PostgreSQL's `text` cannot hold.
pub fn is_storable(text: &str) -> bool {
    !text.contains('\0')
}

/// Text that breaks the text rule. Callers add what it is and where it was (`at $.session: …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must not contain U+0000 (NUL)")]
pub struct NulError;

/// Checks `text` against the text rule.
pub fn storable(text: &str) -> Result<(), NulError> {
    if is_storable(text) {
        Ok(())
    } else {
        Err(NulError)
    }
}

/// An agent's name, checked.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentName(String);

impl AgentName {
    /// Checks `text` against the name rule.
    pub fn parse(text: &str) -> Result<AgentName, NameError> {
        AgentName::try_from(text.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AgentName {
    type Error = NameError;

    fn try_from(text: String) -> Result<AgentName, NameError> {
        if is_name(&text) {
            Ok(AgentName(text))
        } else {
            Err(NameError)
        }
    }
}

impl std::str::FromStr for AgentName {
    type Err = NameError;

    fn from_str(text: &str) -> Result<AgentName, NameError> {
        AgentName::parse(text)
    }
}

impl From<AgentName> for String {
    fn from(name: AgentName) -> String {
        name.0
    }
}

/// An id's (or a name's) text, borrowed as `&str`, shown as itself (`{:?}` quotes it, as it
/// does a string, so messages read as they did when these were strings) and compared with
/// strings.
macro_rules! reads_as_str {
    ($t:ty) => {
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl Deref for $t {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $t {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $t {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$t> for String {
            fn eq(&self, other: &$t) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$t> for str {
            fn eq(&self, other: &$t) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$t> for &str {
            fn eq(&self, other: &$t) -> bool {
                *self == other.0
            }
        }
    };
}

/// An id the broker made, kept apart from other ids by its type; any text reads as one.
macro_rules! id_type {
    ($(#[$doc:meta])* $t:ident) => {
        $(#[$doc])*
        #[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $t(String);

        impl $t {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $t {
            fn from(text: String) -> $t {
                $t(text)
            }
        }

        impl From<&str> for $t {
            fn from(text: &str) -> $t {
                $t(text.to_owned())
            }
        }

        impl From<$t> for String {
            fn from(id: $t) -> String {
                id.0
            }
        }

        reads_as_str!($t);
    };
}

reads_as_str!(AgentName);

id_type!(
    /// A provider stream's client id, such as `c_5d1e…`, given by `client.hello`.
    ClientId
);

id_type!(
    /// A call's request id, such as `r_0f3c…`.
    RequestId
);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_name_rule() {
        for good in ["a", "rocket", "A-b_c.9", &"x".repeat(64)] {
            assert!(is_name(good), "{good}");
            assert_eq!(AgentName::parse(good).unwrap().as_str(), good);
        }
        for bad in ["", "no spaces", "a/b", "é", "a#s", "%2F", &"x".repeat(65)] {
            assert!(!is_name(bad), "{bad}");
            assert_eq!(AgentName::parse(bad), Err(NameError));
        }
        assert!(is_name_within("abc", 3) && !is_name_within("abcd", 3));
    }

    #[test]
    fn the_text_rule_refuses_nul_and_names_obey_it() {
        assert_eq!(storable("any text, even \u{1} or \u{fffd}"), Ok(()));
        for bad in ["\0", "nul\0sess", "end\0"] {
            assert_eq!(storable(bad), Err(NulError), "{bad:?}");
            assert!(!is_name(bad), "{bad:?}");
        }
        assert_eq!(NulError.to_string(), "must not contain U+0000 (NUL)");
    }

    #[test]
    fn names_and_ids_are_json_strings_and_a_bad_name_does_not_read() {
        let name: AgentName = serde_json::from_str(r#""rocket""#).unwrap();
        assert_eq!(serde_json::to_string(&name).unwrap(), r#""rocket""#);
        let err = serde_json::from_str::<AgentName>(r#""no spaces""#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("must be 1 to 64 of [A-Za-z0-9_.-]")
        );
        let id: RequestId = serde_json::from_str(r#""r_1""#).unwrap();
        assert_eq!(id, "r_1");
        assert_eq!(
            serde_json::to_string(&ClientId::from("c_1")).unwrap(),
            r#""c_1""#
        );
        assert_eq!("no spaces".parse::<AgentName>(), Err(NameError));
        // Shown as the text it holds, quoted as a string is.
        assert_eq!(format!("{name:?} {name}"), r#""rocket" rocket"#);
        assert_eq!(format!("{id:?}"), r#""r_1""#);
    }
}
