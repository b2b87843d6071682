//! A MongoDB document's Meilisearch form, exactly as LibreChat's own
//! `preprocessObjectForIndex()` (`@librechat/data-schemas`) builds it: the
//! schema paths marked `meiliIndex`, read the way a Mongoose document holds
//! them, `|` in `conversationId` sent as `--`, and a message's `content`
//! parts turned into its `text`.
//!
//! "The way Mongoose holds them": LibreChat loads the document through its
//! model and calls `toJSON()`, so a path's schema type casts the stored
//! value (a `messageId` stored as `7` is sent as `"7"`; a value the cast
//! refuses, such as an object in a `String` path, is left out) and a path's
//! default fills a missing value (a conversation without `title` is sent as
//! `"New Chat"`, without `tags` as `[]`; a message without `user` as `null`,
//! though such a message is never searchable here). When `content` is an
//! array (a single stored part is cast to one), `text` is built from it
//! (`text::text_of_parts`) and `content` is not sent.
//!
//! One difference remains, from what we read rather than what we build:
//! reads project only the parts' `type`, `text`, `think` and `steer`
//! (content also holds tool calls and images), and MongoDB projects a
//! `content` that is `null` or a plain string away entirely, so such a
//! message is sent with its stored `text` — LibreChat would send `content:
//! null` beside it, resp. `text: ""`. LibreChat never stores either.

use mongodb::bson::{Bson, Document};
use serde_json::{Map, Value};

use super::{js, text, Collection};

/// A path's schema type, as far as casting goes.
#[derive(Clone, Copy)]
pub(super) enum PathType {
    /// `String`.
    Text,
    /// `[String]`.
    TextList,
    /// `[Mixed]`: kept as stored (a single value wrapped in an array).
    Parts,
}

/// One schema path marked `meiliIndex`: its name, type and default, as
/// the table lists them ([`super::Spec::paths`]).
#[derive(Clone, Copy)]
pub(crate) struct Path {
    pub(crate) name: &'static str,
    kind: PathType,
    default: Option<fn() -> Bson>,
}

impl Path {
    /// A path of `kind`, without a default.
    pub(super) const fn new(kind: PathType, name: &'static str) -> Path {
        Path {
            name,
            kind,
            default: None,
        }
    }

    /// The path with a schema default.
    pub(super) const fn or(self, default: fn() -> Bson) -> Path {
        Path {
            default: Some(default),
            ..self
        }
    }
}

/// The path LibreChat sends with every `|` as `--`.
const CONVERSATION_ID: &str = "conversationId";

/// What to read of a document to build its Meilisearch form: the paths,
/// with only the parts' fields the text needs (not images or tool calls).
pub(crate) fn read_projection(collection: Collection) -> Document {
    let mut projection = Document::new();
    for path in collection.spec().paths {
        if matches!(path.kind, PathType::Parts) {
            for field in ["type", "text", "think", "steer"] {
                projection.insert(format!("{}.{field}", path.name), 1);
            }
        } else {
            projection.insert(path.name, 1);
        }
    }
    projection
}

/// The value of `path` LibreChat sends for a document loaded through its
/// model: cast to its type, its default when missing, `None` when it is
/// left out; a `conversationId` with every `|` as `--` (`|` is not allowed
/// in a Meilisearch document id, and a conversation's id is its primary
/// key there).
fn sent(doc: &Document, path: &Path) -> Option<Bson> {
    let loaded = match doc.get(path.name) {
        None | Some(Bson::Undefined) => path.default.map(|default| default()),
        Some(value) => match path.kind {
            PathType::Text => js::cast_to_string_path(value),
            PathType::TextList => js::cast_to_string_array_path(value),
            PathType::Parts => Some(match value {
                Bson::Null | Bson::Array(_) => value.clone(),
                single => Bson::Array(vec![single.clone()]),
            }),
        },
    };
    match loaded? {
        Bson::String(id) if path.name == CONVERSATION_ID && id.contains('|') => {
            Some(id.replace('|', "--").into())
        }
        value => Some(value),
    }
}

/// The Meilisearch document LibreChat would send for `doc`.
pub fn to_meili(collection: Collection, doc: &Document) -> Map<String, Value> {
    let mut out = Map::new();
    let mut parts = None;
    for path in collection.spec().paths {
        let Some(value) = sent(doc, path) else {
            continue;
        };
        match (path.kind, value) {
            (PathType::Parts, Bson::Array(items)) => parts = Some(items),
            (_, value) => {
                out.insert(path.name.to_string(), to_json(&value));
            }
        }
    }
    if let Some(parts) = parts {
        out.insert("text".into(), Value::String(text::text_of_parts(&parts)));
    }
    out
}

/// The Meilisearch primary-key value of a document, as sent: its cast
/// primary key (a `conversationId` with `|` as `--`), when it has one.
pub fn meili_id(collection: Collection, doc: &Document) -> Option<String> {
    let is_key = |path: &&Path| path.name == collection.primary_key();
    let path = collection.spec().paths.iter().find(is_key);
    let path = path.expect("the primary key is a path of the collection");
    match sent(doc, path)? {
        Bson::String(id) => Some(id),
        _ => None,
    }
}

/// The primary-key values a document of `collection` may store when its
/// Meilisearch id is `meili_id`: the id itself and, for a `conversationId`
/// with `--`, the spelling with `|` ([`sent`]'s `|` as `--` cannot be
/// undone: a stored `--` and a stored `|` are sent alike).
pub(crate) fn stored_ids(collection: Collection, meili_id: &str) -> Vec<String> {
    let mut ids = vec![meili_id.to_string()];
    if collection.primary_key() == CONVERSATION_ID && meili_id.contains("--") {
        ids.push(meili_id.replace("--", "|"));
    }
    ids
}

/// BSON → JSON as the Meilisearch client serializes a loaded document's
/// value: after the casts only strings, `null` and lists of those remain,
/// but a kept part may hold anything.
fn to_json(value: &Bson) -> Value {
    match value {
        Bson::ObjectId(id) => Value::String(id.to_hex()),
        Bson::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Bson::Document(d) => {
            Value::Object(d.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
        other => other.clone().into_relaxed_extjson(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, oid::ObjectId};
    use serde_json::json;

    fn shaped(collection: Collection, doc: Document) -> Value {
        Value::Object(to_meili(collection, &doc))
    }

    #[test]
    fn a_conversation_id_s_pipes_are_sent_as_dashes_and_looked_up_both_ways() {
        let convo = doc! { "conversationId": "a|b", "user": "u" };
        assert_eq!(
            meili_id(Collection::Conversations, &convo).as_deref(),
            Some("a--b")
        );
        assert_eq!(
            stored_ids(Collection::Conversations, "a--b"),
            ["a--b", "a|b"]
        );
        assert_eq!(stored_ids(Collection::Conversations, "ab"), ["ab"]);
        // A message's Meilisearch id is its messageId, as stored.
        assert_eq!(stored_ids(Collection::Messages, "m--1"), ["m--1"]);
    }

    #[test]
    fn a_message_s_content_becomes_its_text_and_is_not_sent() {
        let doc = doc! {
            "_id": 1, "messageId": "m1", "conversationId": "a|b|c", "user": "u", "sender": "GPT",
            "text": "stale", "content": [
                { "type": "think", "think": "hm" },
                { "type": "text", "text": "hello" },
                { "type": "image_url", "image_url": "x" },
                { "type": "text", "text": { "value": "world" } },
            ],
            "isTemporary": false, "model": "x",
        };
        assert_eq!(
            shaped(Collection::Messages, doc),
            json!({"messageId": "m1", "conversationId": "a--b--c", "user": "u", "sender": "GPT", "text": "hm hello world"})
        );
        // An empty array still replaces the text.
        let doc = doc! { "messageId": "m", "user": "u", "text": "x", "content": [] };
        assert_eq!(
            shaped(Collection::Messages, doc),
            json!({"messageId": "m", "user": "u", "text": ""})
        );
        // A single stored part is cast to an array of one.
        let doc =
            doc! { "messageId": "m", "user": "u", "content": { "type": "text", "text": "one" } };
        assert_eq!(
            shaped(Collection::Messages, doc),
            json!({"messageId": "m", "user": "u", "text": "one"})
        );
        // A null content is sent as such, the text kept.
        let doc = doc! { "messageId": "m", "user": "u", "text": "x", "content": Bson::Null };
        assert_eq!(
            shaped(Collection::Messages, doc),
            json!({"messageId": "m", "user": "u", "text": "x", "content": null})
        );
    }

    #[test]
    fn values_are_cast_as_the_schema_paths_cast_them() {
        let user = ObjectId::parse_str("64b7f0000000000000000001").unwrap();
        let doc = doc! { "messageId": 7, "conversationId": 8_i64, "user": user, "sender": Bson::Null, "text": 12.5 };
        assert_eq!(
            shaped(Collection::Messages, doc),
            json!({"messageId": "7", "conversationId": "8", "user": "64b7f0000000000000000001", "sender": null, "text": "12.5"})
        );
        // Casts that fail leave the path out; a missing user is null.
        let doc = doc! { "messageId": "m9", "text": ["x"], "sender": { "a": 1 } };
        assert_eq!(
            shaped(Collection::Messages, doc),
            json!({"messageId": "m9", "user": null})
        );
    }

    #[test]
    fn a_conversation_gets_the_schema_s_defaults() {
        let doc = doc! { "_id": 1, "conversationId": "x|y|z", "user": "u", "model": "gpt" };
        assert_eq!(
            shaped(Collection::Conversations, doc),
            json!({"conversationId": "x--y--z", "title": "New Chat", "user": "u", "tags": []})
        );
        let doc =
            doc! { "conversationId": "c2", "user": "u", "title": Bson::Null, "tags": Bson::Null };
        assert_eq!(
            shaped(Collection::Conversations, doc),
            json!({"conversationId": "c2", "title": null, "user": "u", "tags": null})
        );
        let doc =
            doc! { "conversationId": "c3", "user": "u", "title": 5, "tags": ["a", 3, Bson::Null] };
        assert_eq!(
            shaped(Collection::Conversations, doc),
            json!({"conversationId": "c3", "title": "5", "user": "u", "tags": ["a", "3", null]})
        );
        let doc = doc! { "conversationId": "c4", "user": "u", "tags": "solo" };
        assert_eq!(
            shaped(Collection::Conversations, doc),
            json!({"conversationId": "c4", "title": "New Chat", "user": "u", "tags": ["solo"]})
        );
    }

    #[test]
    fn meili_ids_are_the_cast_primary_keys() {
        assert_eq!(
            meili_id(Collection::Conversations, &doc! { "conversationId": "x|y" }).as_deref(),
            Some("x--y")
        );
        assert_eq!(
            meili_id(Collection::Messages, &doc! { "messageId": 42_i64 }).as_deref(),
            Some("42")
        );
        assert_eq!(meili_id(Collection::Messages, &doc! {}), None);
        assert_eq!(
            meili_id(Collection::Messages, &doc! { "messageId": Bson::Null }),
            None
        );
        assert_eq!(
            meili_id(Collection::Messages, &doc! { "messageId": ["a"] }),
            None
        );
    }

    #[test]
    fn reads_project_only_what_the_form_needs() {
        let projection = read_projection(Collection::Messages);
        for field in [
            "messageId",
            "conversationId",
            "user",
            "sender",
            "text",
            "content.type",
            "content.text",
            "content.think",
            "content.steer",
        ] {
            assert!(projection.contains_key(field), "{field}");
        }
        assert!(!projection.contains_key("content"));
    }
}
