//! Replays the fuzz seed corpus and every committed crash input (`fuzz/regressions/`) through
//! the same checks as the fuzz targets, so they run on every `cargo test`, fuzzer or not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use leo_protocol::content::{Posted, ResultBody, content_size};
use leo_protocol::envelope::parse_json;
use leo_protocol::ipc::{BrokerLine, SidecarFrame, check_session_id};

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if !name.to_string_lossy().starts_with('.') {
                out.push(std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn schema_check_inputs() {
    let all = inputs("schema_check");
    assert!(!all.is_empty(), "the seed corpus is missing");
    for data in all {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&data) {
            let _ = leo_protocol::schema::check_input_schema(&value);
            if let Ok(mut def) = serde_json::from_value::<leo_protocol::tool::ToolDef>(value) {
                let _ = def.check("$.tools[0]");
            }
        }
    }
}

#[test]
fn ipc_frame_inputs() {
    let all = inputs("ipc_frame");
    assert!(!all.is_empty(), "the seed corpus is missing");
    let mut sessions_refused = 0;
    for data in all {
        if let Ok(frame) = parse_json::<SidecarFrame>(&data) {
            if let SidecarFrame::Hello { session, .. } = &frame {
                match check_session_id(session) {
                    Ok(()) => assert!(leo_protocol::names::is_storable(session)),
                    Err(_) => sessions_refused += 1,
                }
            }
            let again = serde_json::to_vec(&frame).unwrap();
            assert_eq!(parse_json::<SidecarFrame>(&again).ok(), Some(frame));
        }
        if let Ok(line) = BrokerLine::<Vec<serde_json::Value>>::parse(&data) {
            let again = match &line {
                BrokerLine::Result(frame) => serde_json::to_vec(frame),
                BrokerLine::Frame(frame) => serde_json::to_vec(frame),
            }
            .expect("a decoded frame encodes");
            assert_eq!(BrokerLine::parse(&again).ok(), Some(line));
        }
    }
    // The seed with U+0000 in its session id reaches the check, and is refused by it.
    assert!(sessions_refused >= 1, "no seed drives the session id check");
}

#[test]
fn result_body_inputs() {
    // Regressions: content nested past what leo-mcp reads, and base64 of a wrong length or
    // padding; each was accepted once.
    let all = inputs("result_body");
    assert!(!all.is_empty(), "the seed corpus is missing");
    for data in all {
        if let Ok(body) = parse_json::<ResultBody>(&data)
            && let Ok(Posted::Content(blocks)) = body.into_posted()
        {
            assert!(content_size(&blocks) <= leo_protocol::limits::MAX_RESULT_BYTES);
            for block in &blocks {
                let parsed: serde_json::Value = serde_json::from_str(block.get()).unwrap();
                let kind = parsed["type"].as_str().unwrap();
                assert!(["text", "image", "audio", "resource_link", "resource"].contains(&kind));
                // Accepted media is strict base64: whole quads, padding only at the end.
                // Other block types may carry an extra `data` field, passed through.
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
    }
}
