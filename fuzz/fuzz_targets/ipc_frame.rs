//! The sidecar IPC frame decoders (`SidecarFrame`, `BrokerLine`) on arbitrary bytes: never a
//! panic, and every frame they accept encodes back to one they accept again.
#![no_main]

use leo_protocol::envelope::parse_json;
use leo_protocol::ipc::{BrokerLine, SidecarFrame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = parse_json::<SidecarFrame>(data) {
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
