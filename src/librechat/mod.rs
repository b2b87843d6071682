//! LibreChat's rules for search, as its own data layer applies them
//! (`@librechat/data-schemas` 0.0.71, `librechat-data-provider` 0.8.524):
//! which chat collections feed which index (one table, [`Collection::spec`],
//! so adding an index adds a row here), what a document's Meilisearch
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

mod js;
pub mod markers;
pub(crate) mod projection;
pub mod searchable;
mod text;

use mongodb::bson::Bson;
use serde::{Serialize, Serializer};

use projection::Path;
use projection::PathType::{Parts, Text, TextList};

/// One of the chat collections and the Meilisearch index it feeds: a key
/// into the table ([`Collection::spec`]). Adding one means a variant, its
/// row, its place in [`Collection::ALL`] (the compiler asks for all three)
/// and its exclusion-path setting in [`Rules`]; everything else iterates the
/// table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collection {
    Messages,
    Conversations,
}

/// What LibreChat decides for one chat collection: a row of the table.
struct Spec {
    /// The MongoDB collection.
    name: &'static str,
    /// The Meilisearch index (before `meili.index_prefix`); also what
    /// `--index` accepts.
    index: &'static str,
    /// The Meilisearch primary key, one of `paths`.
    primary_key: &'static str,
    /// The schema paths LibreChat marks `meiliIndex`, in schema order: what
    /// a document's Meilisearch form is built from ([`projection`]; a
    /// message's `content` is sent only when it is `null`, otherwise it
    /// becomes `text`).
    paths: &'static [Path],
    /// Whether `unfinished: true` (a reply still streaming) keeps a
    /// document out of search ([`searchable`]).
    hides_unfinished: bool,
    /// The configured field whose presence keeps a document out of search
    /// (its setting in [`Rules`]).
    exclusion_path: fn(&Rules) -> Option<&str>,
}

/// `messages` (`message.ts`) → index `messages`.
const MESSAGES: Spec = Spec {
    name: "messages",
    index: "messages",
    primary_key: "messageId",
    paths: &[
        Path::new(Text, "messageId"),
        Path::new(Text, "conversationId"),
        Path::new(Text, "user").or(|| Bson::Null),
        Path::new(Text, "sender"),
        Path::new(Text, "text"),
        Path::new(Parts, "content"),
    ],
    hides_unfinished: true,
    exclusion_path: |rules| rules.messages_exclusion_path.as_deref(),
};

/// `conversations` (`convo.ts`) → index `convos`.
const CONVERSATIONS: Spec = Spec {
    name: "conversations",
    index: "convos",
    primary_key: "conversationId",
    paths: &[
        Path::new(Text, "conversationId"),
        Path::new(Text, "title").or(|| Bson::String("New Chat".into())),
        Path::new(Text, "user"),
        Path::new(TextList, "tags").or(|| Bson::Array(Vec::new())),
    ],
    hides_unfinished: false,
    exclusion_path: |rules| rules.conversations_exclusion_path.as_deref(),
};

impl Collection {
    /// Every collection, in the order commands take them.
    pub const ALL: [Collection; 2] = {
        // Irrefutable only while it names every variant: a new one fails
        // to compile here until it is listed below too.
        let (Collection::Messages | Collection::Conversations) = Collection::Messages;
        [Collection::Messages, Collection::Conversations]
    };

    /// This collection's row of the table.
    fn spec(self) -> &'static Spec {
        match self {
            Collection::Messages => &MESSAGES,
            Collection::Conversations => &CONVERSATIONS,
        }
    }

    /// The collection of this MongoDB name.
    pub fn named(name: &str) -> Option<Collection> {
        Collection::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The MongoDB collection name.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The Meilisearch index name (before the configured prefix).
    pub fn index_name(self) -> &'static str {
        self.spec().index
    }

    /// The uid of the index this collection feeds, under `prefix`
    /// (`meili.index_prefix`).
    pub fn index_uid(self, prefix: &str) -> String {
        format!("{prefix}{}", self.index_name())
    }

    /// The Meilisearch primary key.
    pub fn primary_key(self) -> &'static str {
        self.spec().primary_key
    }

    /// The fields a Meilisearch document of this collection may carry.
    pub(crate) fn fields(self) -> impl Iterator<Item = &'static str> {
        self.spec().paths.iter().map(|path| path.name)
    }
}

/// As its MongoDB name.
impl Serialize for Collection {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
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

/// LibreChat's own.
impl Default for Rules {
    fn default() -> Self {
        Rules {
            messages_exclusion_path: Some("subagentTask".into()),
            conversations_exclusion_path: Some("subagentThread".into()),
            schema_version: 1,
        }
    }
}

impl Rules {
    /// The field whose presence keeps a document of `collection` out of search.
    pub fn exclusion_path(&self, collection: Collection) -> Option<&str> {
        (collection.spec().exclusion_path)(self)
    }
}

/// Whether `path` can name the exclusion field: a top-level field name, not
/// empty, not starting with `$`, without `.` or NUL (how MongoDB field
/// names may be written in a filter). The reason when not.
pub(crate) fn check_exclusion_path(path: &str) -> Result<(), &'static str> {
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
