//! The OAuth endpoints' parameter parsing on arbitrary bytes (`broker/src/oauth/parse.rs`,
//! compiled here alone): the query or form of `/oauth/authorize` and `/oauth/token`, the
//! redirect URI rules, the PKCE verifier's form and a metadata document's `client_id` URL.
//! Never a panic, and the rules agree with each other:
//! - a parsed query names each parameter once, and parses again to the same map;
//! - a redirect URI that matches a registered good one is itself good, and makes a valid
//!   `Location` header once the answer's query is added (the authorization endpoint sends the
//!   browser there);
//! - a `client_id` URL good without private fetches is good with them, and is `https`;
//! - a well-formed verifier is 43 to 128 characters.
#![no_main]

#[allow(dead_code)]
#[path = "../../broker/src/oauth/parse.rs"]
mod parse;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = parse::params(data) {
        let again = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(p.iter())
            .finish();
        let reparsed = parse::params(again.as_bytes()).expect("a serialized map parses");
        assert_eq!(reparsed, p);
        for (name, value) in &p {
            match name.as_str() {
                "redirect_uri" => redirect(value),
                "client_id" => client_id(value),
                "code_verifier" | "code_challenge" => {
                    if parse::verifier_is_well_formed(value) {
                        assert!((43..=128).contains(&value.len()));
                    }
                }
                _ => {}
            }
        }
    }
    // The input as text: a registered and a presented redirect URI, one a line.
    if let Ok(text) = std::str::from_utf8(data) {
        let mut lines = text.splitn(2, '\n');
        if let (Some(registered), Some(presented)) = (lines.next(), lines.next()) {
            if parse::check_redirect_uri(registered).is_ok()
                && parse::redirect_matches(registered, presented)
            {
                redirect(presented);
            }
        }
        client_id(text);
    }
});

/// A presented redirect URI: when it matches a registered good one (itself, if good), the
/// browser can be sent there.
fn redirect(uri: &str) {
    if parse::check_redirect_uri(uri).is_err() {
        assert!(!parse::redirect_matches("http://127.0.0.1:1/cb", uri));
        return;
    }
    assert!(parse::redirect_matches(uri, uri));
    let location = format!("{uri}?code=x&state=y");
    assert!(
        http::HeaderValue::from_str(&location).is_ok(),
        "{location:?} is no Location header"
    );
}

fn client_id(url: &str) {
    if parse::check_url(url, false).is_ok() {
        assert!(url.starts_with("https://"));
        assert!(parse::check_url(url, true).is_ok());
    }
}
