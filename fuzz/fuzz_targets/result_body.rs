//! The result validator on arbitrary bytes: never a panic; accepted content is within the
//! size limit and made of known block types.
#![no_main]

use leo_protocol::content::{Posted, ResultBody, content_size};
use leo_protocol::envelope::parse_json;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = parse_json::<ResultBody>(data)
        && let Ok(Posted::Content(blocks)) = body.into_posted()
    {
        assert!(content_size(&blocks) <= leo_protocol::limits::MAX_RESULT_BYTES);
        for block in &blocks {
            let parsed: serde_json::Value =
                serde_json::from_str(block.get()).expect("a block is JSON");
            let kind = parsed["type"].as_str().expect("a block has a string type");
            assert!(["text", "image", "audio", "resource_link", "resource"].contains(&kind));
            // Accepted media is strict base64: whole quads, padding only at the end. Other
            // block types may carry an extra `data` field; MCP lets unknown fields through.
            if (kind == "image" || kind == "audio")
                && let Some(data) = parsed["data"].as_str()
            {
                assert!(
                    data.len() % 4 == 0 && !data.trim_end_matches('=').contains('='),
                    "{data}"
                );
            }
        }
    }
});
