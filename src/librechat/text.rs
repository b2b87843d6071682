//! A message's searchable text from its `content` parts, as LibreChat's
//! `parseTextParts(content, false, { includeSteer: true })`
//! (`librechat-data-provider`) builds it for search: what LibreChat's own
//! save hook sends as `text`, so the documents we send equal its own.
//!
//! The parts are walked in order; a part without a (truthy) `type` is
//! skipped. A `text` part contributes its `text` when that is a string, else
//! `text.value` (older LibreChat), else nothing; a `steer` part (mid-run user
//! speech) its `steer` string; a `think` part (reasoning) its `think`
//! string; every other type nothing. Each piece is appended with one space
//! before it only when the text so far and the piece are both non-empty and
//! neither the text's last character nor the piece's first is a space.
//!
//! A `text.value` that is not a string joins as JavaScript would join it
//! (`result += value`): `5` as `"5"`, `true` as `"true"`, and — since only
//! strings and arrays have a length — with a space before it only when it is
//! a non-empty array.

use mongodb::bson::{Bson, Document};

use super::js;

/// The text of `parts` (a message's `content` array).
pub(crate) fn text_of_parts(parts: &[Bson]) -> String {
    let mut text = String::new();
    for part in parts {
        let Some(part) = part.as_document() else {
            continue; // `part?.type` of a string, number or array: undefined.
        };
        if !part.get("type").is_some_and(js::is_truthy) {
            continue;
        }
        match part.get_str("type") {
            Ok("text") => append(&mut text, &text_piece(part)),
            Ok(field @ ("steer" | "think")) => append(&mut text, &string_or_empty(part, field)),
            _ => {}
        }
    }
    text
}

/// `(typeof part.text === "string" ? part.text : part.text?.value) || ""`.
fn text_piece(part: &Document) -> Bson {
    let value = match part.get("text") {
        Some(text @ Bson::String(_)) => Some(text.clone()),
        Some(Bson::Document(inner)) => inner.get("value").cloned(),
        _ => None,
    };
    value
        .filter(js::is_truthy)
        .unwrap_or_else(|| Bson::String(String::new()))
}

/// `typeof part[field] === "string" ? part[field] : ""`.
fn string_or_empty(part: &Document, field: &str) -> Bson {
    match part.get(field) {
        Some(text @ Bson::String(_)) => text.clone(),
        _ => Bson::String(String::new()),
    }
}

/// LibreChat's `append`: a space between two non-empty pieces unless one
/// side already has it, then `result += piece`.
fn append(text: &mut String, piece: &Bson) {
    let (has_length, starts_with_space) = match piece {
        Bson::String(s) => (!s.is_empty(), s.starts_with(' ')),
        Bson::Array(items) => (
            !items.is_empty(),
            matches!(items.first(), Some(Bson::String(s)) if s == " "),
        ),
        _ => (false, false),
    };
    if !text.is_empty() && has_length && !text.ends_with(' ') && !starts_with_space {
        text.push(' ');
    }
    text.push_str(&js::to_js_string(piece));
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{bson, doc};

    fn text(parts: Bson) -> String {
        match parts {
            Bson::Array(parts) => text_of_parts(&parts),
            other => panic!("not an array: {other:?}"),
        }
    }

    #[test]
    fn text_think_and_steer_parts_join_in_order() {
        let parts = bson!([
            { "type": "think", "think": "Let me see." },
            { "type": "text", "text": "The answer" },
            { "type": "steer", "steer": "shorter please" },
            { "type": "text", "text": { "value": "is 42." } },
        ]);
        assert_eq!(text(parts), "Let me see. The answer shorter please is 42.");
    }

    #[test]
    fn a_space_is_added_only_between_two_non_empty_pieces_without_one() {
        // Trailing space on the text so far: no second space.
        assert_eq!(
            text(bson!([{ "type": "text", "text": "a " }, { "type": "text", "text": "b" }])),
            "a b"
        );
        // Leading space on the piece: none added.
        assert_eq!(
            text(bson!([{ "type": "text", "text": "a" }, { "type": "steer", "steer": " b" }])),
            "a b"
        );
        // Both: both kept, nothing added.
        assert_eq!(
            text(bson!([{ "type": "text", "text": "a " }, { "type": "think", "think": " b" }])),
            "a  b"
        );
        // Empty pieces add nothing, not even a space.
        assert_eq!(
            text(bson!([
                { "type": "text", "text": "" },
                { "type": "text", "text": "a" },
                { "type": "text", "text": "" },
                { "type": "text", "text": "b" },
            ])),
            "a b"
        );
        // Nothing before the first piece.
        assert_eq!(text(bson!([{ "type": "text", "text": " a" }])), " a");
        // A newline is not a space.
        assert_eq!(
            text(bson!([{ "type": "text", "text": "a\n" }, { "type": "text", "text": "b" }])),
            "a\n b"
        );
    }

    #[test]
    fn parts_without_a_type_or_of_other_types_add_nothing() {
        let parts = bson!([
            { "text": "no type" },
            { "type": "", "text": "empty type" },
            { "type": Bson::Null, "text": "null type" },
            "a bare string",
            5,
            Bson::Null,
            [ { "type": "text", "text": "nested" } ],
            { "type": "tool_call", "tool_call": { "name": "x" }, "text": "tool" },
            { "type": "image_url", "image_url": { "url": "u" } },
            { "type": "error", "error": "boom", "text": "err" },
            { "type": "text_delta", "text": "delta" },
            { "type": "TEXT", "text": "case" },
            { "type": "text", "text": "kept" },
        ]);
        assert_eq!(text(parts), "kept");
    }

    #[test]
    fn values_of_the_wrong_kind_read_as_javascript_reads_them() {
        // A think or steer that is not a string: nothing.
        assert_eq!(
            text(bson!([
                { "type": "think", "think": 5 },
                { "type": "steer", "steer": { "text": "x" } },
                { "type": "steer" },
            ])),
            ""
        );
        // `text` neither a string nor an object: nothing.
        assert_eq!(
            text(bson!([{ "type": "text", "text": 7 }, { "type": "text", "text": ["x"] }])),
            ""
        );
        // `text.value` that is not a string joins as `result += value`:
        // no space before a number or boolean (they have no length), one
        // before a non-empty array; falsy values are "".
        assert_eq!(
            text(bson!([
                { "type": "text", "text": "a" },
                { "type": "text", "text": { "value": 5 } },
                { "type": "text", "text": { "value": true } },
                { "type": "text", "text": { "value": [1, 2] } },
                { "type": "text", "text": { "value": { "x": 1 } } },
                { "type": "text", "text": { "value": 0 } },
                { "type": "text", "text": { "value": false } },
                { "type": "text", "text": { "value": Bson::Null } },
                { "type": "text", "text": {} },
            ])),
            "a5true 1,2[object Object]"
        );
        assert_eq!(text(bson!([])), "");
        let _ = doc! {};
    }
}
