//! The input_schema subset check on arbitrary JSON: it must never panic, and a schema it
//! accepts must be one the argument validator can at least be asked about (depth-bounded).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = leo_protocol::schema::check_input_schema(&value);
        if let Ok(mut def) = serde_json::from_value::<leo_protocol::tool::ToolDef>(value) {
            let _ = def.check("$.tools[0]");
        }
    }
});
