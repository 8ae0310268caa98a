//! Signing deliveries the Standard Webhooks way: the secret is `whsec_` and the base64 of a
//! random key; each delivery carries `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "id.timestamp.body">`, so the app can check that it comes from this broker, unchanged, and
//! (by the timestamp) recently. Any Standard Webhooks library verifies it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use leo_protocol::webhooks::{SECRET_PREFIX, signed_content};
use sha2::Sha256;

/// Random bytes in a new key (the convention asks for 24 to 64).
pub const KEY_BYTES: usize = 32;

/// A new secret, `whsec_…`.
pub fn new_secret() -> Result<String, getrandom::Error> {
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key)?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
}

/// The signing key of a `whsec_…` secret; `None` for a secret that is not one.
pub fn key_of(secret: &str) -> Option<Vec<u8>> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    (!key.is_empty()).then_some(key)
}

/// The `webhook-signature` value of a delivery.
pub fn signature(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(&signed_content(id, timestamp, body));
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification, signed as it says.
    #[test]
    fn matches_the_conventions_example() {
        let key = key_of("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_or_default();
        let sig = signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn secrets_are_fresh_and_decode() {
        let a = new_secret().unwrap_or_default();
        let b = new_secret().unwrap_or_default();
        assert_ne!(a, b);
        assert_eq!(key_of(&a).map(|k| k.len()), Some(KEY_BYTES));
        assert_eq!(key_of("nope"), None);
    }
}
