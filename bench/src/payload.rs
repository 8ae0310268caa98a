//! The tools and their payloads: 100 B of text, 64 KiB of text, a 256 KiB image.
//!
//! Mirrored byte for byte by `bench/python/server.py`; keep the two in step.

use serde_json::{Value, json};

/// One tool of the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payload {
    /// The tool's name, the same on every system.
    pub tool: &'static str,
    /// How the payload is named in the report.
    pub label: &'static str,
    kind: Kind,
    size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Image,
}

/// Every payload, smallest first.
pub const PAYLOADS: [Payload; 3] = [
    Payload {
        tool: "echo_small",
        label: "100 B text",
        kind: Kind::Text,
        size: 100,
    },
    Payload {
        tool: "echo_64k",
        label: "64 KiB text",
        kind: Kind::Text,
        size: 64 * 1024,
    },
    Payload {
        tool: "image_256k",
        label: "256 KiB image",
        kind: Kind::Image,
        size: 256 * 1024,
    },
];

/// The arguments every call sends.
pub fn arguments() -> serde_json::Map<String, Value> {
    let mut map = serde_json::Map::new();
    map.insert("text".into(), Value::String("hello".into()));
    map
}

/// The tools' input schema (what Leo's schema subset and the Python SDK both accept).
pub fn input_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}})
}

impl Payload {
    /// The payload whose tool is `name`.
    pub fn by_tool(name: &str) -> Option<Payload> {
        PAYLOADS.iter().copied().find(|p| p.tool == name)
    }

    /// What the tool says about itself.
    pub fn description(&self) -> String {
        format!("Answers with {}.", self.label)
    }

    /// The result's `content`: one MCP content block, as JSON.
    pub fn content(&self) -> Value {
        match self.kind {
            Kind::Text => json!([{"type": "text", "text": text(self.size)}]),
            Kind::Image => json!([{
                "type": "image",
                "data": leo_app::content::base64(&image_bytes(self.size)),
                "mimeType": "image/png",
            }]),
        }
    }
}

const TEXT_PATTERN: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 ";

/// `size` bytes of ASCII text (no JSON escapes).
pub fn text(size: usize) -> String {
    TEXT_PATTERN
        .iter()
        .cycle()
        .take(size)
        .map(|&b| b as char)
        .collect()
}

/// `size` bytes of image data: `(i * 131 + 7) mod 256`.
pub fn image_bytes(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i.wrapping_mul(131) + 7) as u8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_exact() {
        assert_eq!(text(100).len(), 100);
        assert_eq!(image_bytes(256 * 1024).len(), 256 * 1024);
    }
}
