//! The result validator on arbitrary bytes: never a panic; accepted content is within the
//! size limit and made of known block types.
#![no_main]

use leo_protocol::content::{Posted, ResultBody, check_content};
use leo_protocol::envelope::parse_json;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = parse_json::<ResultBody>(data)
        && let Ok(Posted::Content(blocks)) = body.into_posted()
    {
        assert!(serde_json::to_vec(&blocks).expect("encodes").len() <= leo_protocol::limits::MAX_RESULT_BYTES);
        assert!(check_content(&blocks).is_ok());
    }
});
