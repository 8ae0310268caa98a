//! The sidecar IPC frame decoders (`SidecarFrame`, `BrokerLine`) on arbitrary bytes: never a
//! panic, and every frame they accept encodes back to one they accept again. A `hello` whose
//! session id passes the broker's check (`check_session_id`) holds only text every store can
//! keep (no U+0000, which PostgreSQL's `text` refuses).
#![no_main]

use leo_protocol::envelope::parse_json;
use leo_protocol::ipc::{BrokerLine, SidecarFrame, check_session_id};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = parse_json::<SidecarFrame>(data) {
        if let SidecarFrame::Hello { session, .. } = &frame
            && check_session_id(session).is_ok()
        {
            assert!(leo_protocol::names::is_storable(session), "{session:?}");
        }
        let again = serde_json::to_vec(&frame).expect("a decoded frame encodes");
        assert_eq!(parse_json::<SidecarFrame>(&again).ok(), Some(frame));
    }
    if let Ok(line) = BrokerLine::<Vec<serde_json::Value>>::parse(data) {
        let again = match &line {
            BrokerLine::Result(frame) => serde_json::to_vec(frame),
            BrokerLine::Frame(frame) => serde_json::to_vec(frame),
        }
        .expect("a decoded frame encodes");
        assert_eq!(BrokerLine::parse(&again).ok(), Some(line));
    }
});
