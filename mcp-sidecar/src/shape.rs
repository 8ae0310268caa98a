//! A call's result, shaped for the harness that reads it.
//!
//! MCP lets a result carry both `content` and `structuredContent`, and harnesses differ in what
//! they hand the model (measured per harness in `testdata/harnesscaps.json`, `features`).
//! `leo-mcp` sends every harness the whole result, and adds only what a measured harness would
//! otherwise lose:
//!
//! - a harness that gives the model only the content blocks (opencode) gets one more text
//!   block with the `structuredContent` JSON, unless a text block already holds exactly it;
//! - a harness that drops image blocks (opencode) gets a text block saying how many images the
//!   result had, so the model knows something is missing instead of reading a result that
//!   seems complete.
//!
//! A harness that keeps only `structuredContent` (Claude Code, codex) needs nothing: the
//! structured data is complete on its own by the registration's `output_schema`, and the app's
//! text blocks are what it loses (documented for app authors). Unknown harnesses get the
//! result as it is. Tool errors are never changed.

use leo_protocol::harness::{Features, StructuredSeen};
use rmcp::model::{CallToolResult, ContentBlock};

/// `result` as the harness with `features` should get it.
pub fn for_harness(mut result: CallToolResult, features: Option<&Features>) -> CallToolResult {
    let Some(f) = features else {
        return result;
    };
    if result.is_error == Some(true) {
        return result;
    }
    if f.structured_result == Some(StructuredSeen::ContentOnly)
        && let Some(structured) = &result.structured_content
    {
        let json = structured.to_string();
        let present = result
            .content
            .iter()
            .any(|b| b.as_text().is_some_and(|t| t.text == json));
        if !present {
            result.content.push(ContentBlock::text(json));
        }
    }
    if f.images == Some(false) {
        let mimes: Vec<&str> = result
            .content
            .iter()
            .filter_map(|b| b.as_image().map(|i| i.mime_type.as_str()))
            .collect();
        if !mimes.is_empty() {
            let note = format!(
                "[this result has {} image(s) ({}) that this harness does not show to the model]",
                mimes.len(),
                mimes.join(", ")
            );
            result.content.push(ContentBlock::text(note));
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn features(structured: StructuredSeen, images: bool) -> Features {
        serde_json::from_value(json!({
            "version_seen": "1", "date": "2026-12-03", "how": "test",
            "protocol_version": null, "protocol_version_with_discover": null,
            "tries_discover": false, "subscriptions_listen": false, "elicitation": [],
            "elicitation_answer": null, "tasks": false, "progress_token": true,
            "structured_result": structured, "images": images,
            "tool_timeout_setting": "t", "progress_resets_timeout": null,
            "cancels_on_timeout": null
        }))
        .unwrap()
    }

    fn texts(r: &CallToolResult) -> Vec<String> {
        r.content
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.clone()))
            .collect()
    }

    fn record() -> CallToolResult {
        let mut r = CallToolResult::success(vec![
            ContentBlock::text("record 7"),
            ContentBlock::image("AAAA", "image/png"),
        ]);
        r.structured_content = Some(json!({"build": 7}));
        r
    }

    #[test]
    fn a_content_only_harness_gets_the_structured_json_and_an_image_note() {
        let f = features(StructuredSeen::ContentOnly, false);
        let r = for_harness(record(), Some(&f));
        assert_eq!(
            texts(&r),
            [
                "record 7",
                r#"{"build":7}"#,
                "[this result has 1 image(s) (image/png) that this harness does not show to the model]"
            ]
        );
        assert_eq!(r.structured_content, Some(json!({"build": 7})));
        // Already there (the app sent no content, so the JSON block exists): not twice.
        let mut only = CallToolResult::success(vec![ContentBlock::text(r#"{"build":7}"#)]);
        only.structured_content = Some(json!({"build": 7}));
        assert_eq!(texts(&for_harness(only, Some(&f))).len(), 1);
    }

    #[test]
    fn structured_only_unknown_harnesses_and_errors_are_left_alone() {
        let f = features(StructuredSeen::StructuredOnly, true);
        assert_eq!(for_harness(record(), Some(&f)), record());
        assert_eq!(for_harness(record(), None), record());
        let f = features(StructuredSeen::ContentOnly, false);
        let mut err = record();
        err.is_error = Some(true);
        assert_eq!(for_harness(err.clone(), Some(&f)), err);
    }
}
