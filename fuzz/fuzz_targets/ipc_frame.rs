//! The sidecar IPC frame decoder on arbitrary bytes: never a panic, and every frame it accepts
//! encodes back to one it accepts again.
#![no_main]

use leo_protocol::envelope::parse_json;
use leo_protocol::ipc::{BrokerFrame, SidecarFrame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = parse_json::<SidecarFrame>(data) {
        let again = serde_json::to_vec(&frame).expect("a decoded frame encodes");
        assert_eq!(parse_json::<SidecarFrame>(&again).ok(), Some(frame));
    }
    if let Ok(frame) = parse_json::<BrokerFrame>(data) {
        let again = serde_json::to_vec(&frame).expect("a decoded frame encodes");
        assert_eq!(parse_json::<BrokerFrame>(&again).ok(), Some(frame));
    }
});
