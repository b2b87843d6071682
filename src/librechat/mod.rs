//! LibreChat's rules for search, as its own data layer applies them
//! (`@librechat/data-schemas` 0.0.71, `librechat-data-provider` 0.8.524):
//! which chat collections feed which index, what a document's Meilisearch
//! form is ([`projection`]), which documents are searchable ([`searchable`])
//! and how a document is marked once it is indexed or removed
//! ([`markers`]). Pure rules, no I/O: `mongo` turns them into queries and
//! writes, the engine into work.
//!
//! They live in one place so that `once`, `run` (follow mode too),
//! `reindex`, `verify` and the drift repair cannot disagree, and so that an
//! index we build is the one LibreChat's own save hooks would build, and
//! LibreChat's own progress check (`getSyncProgress()`) agrees with ours.
//! How to follow a newer LibreChat: docs/design.md §3.6.

pub mod js;
pub mod markers;
pub mod projection;
pub mod searchable;
pub mod text;

use serde::Serialize;

/// One of the two chat collections and the Meilisearch index it feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Collection {
    Messages,
    Conversations,
}

impl Collection {
    pub const ALL: [Collection; 2] = [Collection::Messages, Collection::Conversations];

    /// The MongoDB collection name.
    pub fn name(self) -> &'static str {
        match self {
            Collection::Messages => "messages",
            Collection::Conversations => "conversations",
        }
    }

    /// The Meilisearch index name (before the configured prefix).
    pub fn index_name(self) -> &'static str {
        match self {
            Collection::Messages => "messages",
            Collection::Conversations => "convos",
        }
    }

    /// The Meilisearch primary key.
    pub fn primary_key(self) -> &'static str {
        match self {
            Collection::Messages => "messageId",
            Collection::Conversations => "conversationId",
        }
    }

    /// The fields a Meilisearch document of this collection may carry: the
    /// schema paths LibreChat marks `meiliIndex` (a message's `content` is
    /// sent only when it is `null`; otherwise it becomes `text`).
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            Collection::Messages => &[
                "messageId",
                "conversationId",
                "user",
                "sender",
                "text",
                "content",
            ],
            Collection::Conversations => &["conversationId", "title", "user", "tags"],
        }
    }
}

/// What is LibreChat-specific and may be configured, with LibreChat's
/// values as defaults (`sync.messages_exclusion_path`,
/// `sync.conversations_exclusion_path`, `sync.schema_version`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// A message carrying this field is never searchable (LibreChat:
    /// `subagentTask`, the transcripts of subagent runs). `None`: no such field.
    pub messages_exclusion_path: Option<String>,
    /// Likewise for conversations (LibreChat: `subagentThread`).
    pub conversations_exclusion_path: Option<String>,
    /// The projection's version: a document counts as indexed only with
    /// `_meiliIndexSchemaVersion` equal to it, so raising it re-sends every
    /// document (LibreChat: 1).
    pub schema_version: i32,
}

/// LibreChat's exclusion path of messages.
pub const DEFAULT_MESSAGES_EXCLUSION_PATH: &str = "subagentTask";
/// LibreChat's exclusion path of conversations.
pub const DEFAULT_CONVERSATIONS_EXCLUSION_PATH: &str = "subagentThread";
/// LibreChat's schema version of the projection.
pub const DEFAULT_SCHEMA_VERSION: i32 = 1;

impl Default for Rules {
    fn default() -> Self {
        Rules {
            messages_exclusion_path: Some(DEFAULT_MESSAGES_EXCLUSION_PATH.into()),
            conversations_exclusion_path: Some(DEFAULT_CONVERSATIONS_EXCLUSION_PATH.into()),
            schema_version: DEFAULT_SCHEMA_VERSION,
        }
    }
}

impl Rules {
    /// The field whose presence keeps a document of `collection` out of search.
    pub fn exclusion_path(&self, collection: Collection) -> Option<&str> {
        match collection {
            Collection::Messages => self.messages_exclusion_path.as_deref(),
            Collection::Conversations => self.conversations_exclusion_path.as_deref(),
        }
    }
}

/// Whether `path` can name the exclusion field: a top-level field name, not
/// empty, not starting with `$`, without `.` or NUL (how MongoDB field
/// names may be written in a filter). The reason when not.
pub fn check_exclusion_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        Err("must not be empty")
    } else if path.starts_with('$') {
        Err("must not start with `$`")
    } else if path.contains('.') {
        Err("must be a top-level field name (no `.`)")
    } else if path.contains('\0') {
        Err("must not contain NUL")
    } else {
        Ok(())
    }
}
