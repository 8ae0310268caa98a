//! Console logins: a session is a random cookie value that maps to a CSRF token and an expiry.
//!
//! Sessions live in memory only: a broker restart logs everyone out, which is the safe side.
//! The cookie is `leo_session=<32 random bytes as hex>; HttpOnly; SameSite=Strict; Path=/`,
//! without `Secure` when the console is served over plain HTTP on loopback (a `Secure` cookie
//! would never be sent back), and with it when the TCP listener has `web.tls`, where every
//! console page is HTTPS and the cookie must never travel in clear. The expiry is absolute, counted from the login
//! (`console.session_ttl_s`, 12 h by default); the cookie's `Max-Age` says the same.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::{HeaderMap, header};
use leo_protocol::ErrorCode;
use subtle::ConstantTimeEq;
use tokio::sync::watch;
// Tokio's clock, which is the system's monotonic clock but can be paused in tests.
use tokio::time::Instant;

use crate::refusal::Refusal;

/// The cookie's name.
pub const COOKIE: &str = "leo_session";
/// The header every state-changing console request carries, with the session's CSRF token.
pub const CSRF_HEADER: &str = "x-leo-csrf";
/// Logins kept at once; the oldest goes first. Only the operator can log in, so this bounds
/// memory against a script that logs in in a loop, not against strangers.
const MAX_SESSIONS: usize = 64;

/// One login.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    /// Sent in the page, echoed in `X-Leo-Csrf`.
    pub csrf: String,
    pub expires: Instant,
    /// Who logged in: `operator`, or `device:NAME` for a paired device that
    /// `auth.consent_devices` lets decide OAuth consents (and nothing else).
    pub who: String,
}

impl Session {
    /// True when `presented` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(presented.as_bytes()))
    }

    /// A paired device's login, which opens the consent pages only.
    pub fn is_device(&self) -> bool {
        self.who != "operator"
    }

    /// Whole seconds left.
    pub fn expires_in_s(&self) -> u64 {
        self.expires
            .saturating_duration_since(Instant::now())
            .as_secs()
    }
}

/// Every live login.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    /// The console is served over HTTPS only (`web.tls`): the cookie is `Secure`.
    secure: bool,
    map: Mutex<HashMap<String, Session>>,
    /// Bumped at each logout, so open console streams end with their login.
    logouts: watch::Sender<u64>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            secure: false,
            map: Mutex::new(HashMap::new()),
            logouts: watch::channel(0).0,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // Every operation is one insert, lookup or removal: a poisoned map is still whole.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new login of `who` (`operator`, `device:NAME`).
    pub fn create(&self, who: &str) -> Result<Session, Refusal> {
        let random = || {
            crate::tokens::generate()
                .map_err(|_| Refusal::new(ErrorCode::Internal, "no randomness for a session"))
        };
        let session = Session {
            id: random()?,
            csrf: random()?,
            expires: Instant::now() + self.ttl,
            who: who.to_owned(),
        };
        let mut map = self.map();
        let now = Instant::now();
        map.retain(|_, s| s.expires > now);
        while map.len() >= MAX_SESSIONS {
            let Some(oldest) = map.values().min_by_key(|s| s.expires).map(|s| s.id.clone()) else {
                break;
            };
            map.remove(&oldest);
        }
        map.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    /// The live session `id` names; an expired one is forgotten.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.map();
        match map.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// The live session of a request's cookie.
    pub fn of(&self, headers: &HeaderMap) -> Option<Session> {
        self.get(cookie(headers)?)
    }

    /// Logs `id` out.
    pub fn remove(&self, id: &str) {
        if self.map().remove(id).is_some() {
            self.logouts.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes at every logout.
    pub fn watch_logouts(&self) -> watch::Receiver<u64> {
        self.logouts.subscribe()
    }
}

/// The value of the `leo_session` cookie, from any `Cookie` header.
pub fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
}

impl Sessions {
    /// The same sessions, their cookie `Secure` when `https` (the TCP listener has `web.tls`).
    pub fn over_https(mut self, https: bool) -> Sessions {
        self.secure = https;
        self
    }

    /// The `Set-Cookie` value for a new login.
    pub fn set_cookie(&self, session: &Session) -> String {
        self.cookie_with(&session.id, self.ttl.as_secs())
    }

    /// The `Set-Cookie` value that deletes the cookie.
    pub fn clear_cookie(&self) -> String {
        self.cookie_with("", 0)
    }

    fn cookie_with(&self, value: &str, max_age: u64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "a=1; leo_sessionx=2".parse().unwrap());
        assert_eq!(cookie(&h), None);
        h.append(
            header::COOKIE,
            "b=3;  leo_session=abc ; c=4".parse().unwrap(),
        );
        assert_eq!(cookie(&h), Some("abc"));
    }

    #[test]
    fn the_cookie_is_secure_over_https_only() {
        let plain = Sessions::new(Duration::from_secs(60));
        let one = plain.create("operator").unwrap();
        let set = plain.set_cookie(&one);
        assert_eq!(
            set,
            format!(
                "leo_session={}; HttpOnly; SameSite=Strict; Path=/; Max-Age=60",
                one.id
            )
        );
        let https = Sessions::new(Duration::from_secs(60)).over_https(true);
        assert!(https.set_cookie(&one).ends_with("; Max-Age=60; Secure"));
        assert_eq!(
            https.clear_cookie(),
            "leo_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0; Secure"
        );
    }

    #[test]
    fn sessions_expire_and_are_bounded() {
        let s = Sessions::new(Duration::from_secs(60));
        let one = s.create("operator").unwrap();
        assert_eq!(one.id.len(), 64);
        assert!(s.get(&one.id).is_some());
        assert!(one.csrf_matches(&one.csrf) && !one.csrf_matches("x"));
        s.remove(&one.id);
        assert!(s.get(&one.id).is_none());
        for _ in 0..MAX_SESSIONS + 5 {
            s.create("operator").unwrap();
        }
        assert_eq!(s.map().len(), MAX_SESSIONS);
        let gone = Sessions::new(Duration::ZERO);
        let old = gone.create("operator").unwrap();
        assert!(gone.get(&old.id).is_none(), "expired");
    }

    #[tokio::test(start_paused = true)]
    async fn a_login_lasts_its_ttl_to_the_millisecond_and_is_then_forgotten() {
        let s = Sessions::new(Duration::from_secs(2));
        let one = s.create("operator").unwrap();
        assert_eq!(one.expires_in_s(), 2);
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert_eq!(s.get(&one.id).map(|s| s.expires_in_s()), Some(0));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(s.get(&one.id).is_none(), "expired");
        assert!(s.map().is_empty(), "and forgotten");
        // A later login starts its own period.
        let two = s.create("operator").unwrap();
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert!(s.get(&two.id).is_some());
    }
}
