//! The chat collections in MongoDB (`messages`, `conversations`): the
//! queries and writes that LibreChat's rules (`crate::librechat`: what is
//! searchable, the projection, the markers) turn into. Every query and write
//! of these collections is in this module (their change stream is
//! `follow::stream`'s), one kind per file:
//!
//! - [`counts`](mod@counts): the plan's counts, the backlog gauge's count, LibreChat's
//!   own progress counts;
//! - [`reads`]: documents read by `_id` page or scan — the backlog, every
//!   indexable document, id pages, expired and excluded documents;
//! - [`read_back`]: documents in hand read again by `_id` — the
//!   acknowledgement's read-back, follow mode's flush-time flag check;
//! - [`writes`]: every write of LibreChat's markers, version-exact;
//! - [`error`]: why an operation failed, from the driver's errors.
//!
//! This file holds what they share: the server's clock, what is read to
//! judge a document, and the backlog's filters. Queries use the server's
//! clock (`hello.localTime`) for expiry, never `$$NOW`, and page by `_id`
//! range instead of holding a cursor or sending long `$in` lists. Every flag
//! write goes through [`writes`], checks the lease's `Guard` first and never
//! touches `updatedAt`.

use futures::TryStreamExt;
use mongodb::action::Find;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::{Collection as MongoCollection, Database};
use serde::de::DeserializeOwned;

use crate::lease::clock;
use crate::librechat::markers::{self, SCHEMA_VERSION, VERSION_TOKEN};
use crate::librechat::searchable;
use crate::librechat::{projection, Rules};

pub use crate::librechat::projection::{meili_id, to_meili};

mod counts;
mod error;
mod read_back;
mod reads;
mod writes;

pub(crate) use counts::{
    count_pending_cleanup, estimated_count, librechat_progress, LibreChatProgress,
};
pub use counts::{count_unflagged, counts, Counts};
pub(crate) use error::failed;
pub(crate) use error::MongoError;
pub use read_back::{id_key, read_states, ReadBack};
pub(crate) use read_back::{processed_among, read_documents};
pub use reads::{backlog_index, next_expiry, raw_id, read_unindexed_page};
pub(crate) use reads::{
    collections_with_pre_images, expired_page, indexable_ids_page, indexable_meili_ids_among,
    parse, pending_cleanup_page, read_indexable_page, Scan, SCAN_ROUND_TRIP_DOCS,
};
pub(crate) use writes::{
    clear_flags, clear_flags_of_unindexable, mark_excluded_removed, mark_removed, reset_flags_batch,
};
pub use writes::{set_flags_if_unchanged, DocVersion, STATEMENTS_PER_COMMAND};

use error::mongo_err;

/// The flag LibreChat keeps on each document: true = Meilisearch has it.
pub use crate::librechat::markers::FLAG;

/// The field whose exact value identifies a document's version: LibreChat
/// (mongoose timestamps) rewrites it with every save.
const VERSION_FIELD: &str = "updatedAt";

/// `maxTimeMS` of every read: long enough for any read of ours at millions
/// of documents, so that a server's own default limit does not end one —
/// DocumentDB-based servers (Azure Cosmos DB for MongoDB vCore, FerretDB 2)
/// end a statement after 10 s unless the command names its own limit, and an
/// `_id`-ordered read there sorts what it reads, so reopening a scan of
/// millions of documents can pass 10 s while our own acknowledgements load
/// the server (a run would fail with code 50). MongoDB itself applies no
/// limit unless given one.
pub const READ_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

pub use crate::librechat::Collection;

/// The collection as `Document`s. (Pages are read as raw BSON: see
/// [`reads`].)
fn handle(db: &Database, collection: Collection) -> MongoCollection<Document> {
    db.collection(collection.name())
}

/// Every document `find` returns, read within [`READ_TIME_LIMIT`] (`what`
/// names the read in an error).
async fn read_all<T: DeserializeOwned + Send + Sync>(
    find: Find<'_, T>,
    what: &str,
) -> Result<Vec<T>, MongoError> {
    let cursor = find
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err(what))?;
    cursor.try_collect().await.map_err(mongo_err(what))
}

/// `filter` narrowed to the `_id`s after `after` (every `_id` without one).
fn after_id(mut filter: Document, after: Option<&Bson>) -> Document {
    if let Some(after) = after {
        filter.insert("_id", doc! { "$gt": after.clone() });
    }
    filter
}

/// The server's current time (`hello.localTime`, [`clock::server_now`]).
pub async fn server_time(db: &Database) -> Result<DateTime, MongoError> {
    clock::server_now(db).await.map_err(mongo_err("hello"))
}

/// `projection` plus what is read of a document to judge it: the fields
/// its searchability depends on, its flag and schema version.
fn judging(mut projection: Document, rules: &Rules, collection: Collection) -> Document {
    let fields = [FLAG, SCHEMA_VERSION].into_iter();
    for field in fields.chain(searchable::read_fields(rules, collection)) {
        projection.insert(field, 1);
    }
    projection
}

/// What a pass reads of each document: its Meilisearch form's sources, its
/// version (`updatedAt`, LibreChat's version token) and what
/// [`judging`] it takes.
pub fn sync_projection(rules: &Rules, collection: Collection) -> Document {
    let mut projection = doc! { "_id": 1, VERSION_FIELD: 1, VERSION_TOKEN: 1 };
    projection.extend(projection::read_projection(collection));
    judging(projection, rules, collection)
}

/// What is read of a document to judge it again and act on it without
/// its Meilisearch form: its `_id`, version, primary key and what
/// [`judging`] it takes (a read-back, the expiry sweep).
fn state_projection(rules: &Rules, collection: Collection) -> Document {
    let projection =
        doc! { "_id": 1, VERSION_FIELD: 1, VERSION_TOKEN: 1, collection.primary_key(): 1 };
    judging(projection, rules, collection)
}

/// Searchable documents that are not processed (not flagged at the current
/// schema version): what indexing sends.
pub fn unindexed_filter(rules: &Rules, collection: Collection, now: DateTime) -> Document {
    unindexed_filter_in(rules, collection, now, Backlog::Any)
}

/// Which unprocessed documents a filtered read of the backlog selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backlog {
    /// Every unprocessed one: unflagged, or flagged at another schema
    /// version ([`markers::unprocessed_filter`]).
    Any,
    /// The unflagged ones ([`markers::unflagged_filter`]): all of them when
    /// the plan counted no searchable document flagged at another schema
    /// version. LibreChat's index `{_meiliIndex, isTemporary, expiredAt}`
    /// then serves the read from the backlog's own entries, where [`Any`]'s
    /// second branch makes DocumentDB fetch every flagged document.
    ///
    /// [`Any`]: Backlog::Any
    Unflagged,
}

impl Backlog {
    /// The filter for what the plan counted: `flagged` searchable
    /// documents, `indexed` of them at the current schema version. A
    /// document flagged at another version after the count (an older
    /// LibreChat's hook) waits for the next run, like any write behind the
    /// reader.
    pub(crate) fn of(counts: &Counts) -> Backlog {
        if counts.flagged > counts.indexed {
            Backlog::Any
        } else {
            Backlog::Unflagged
        }
    }
}

/// [`unindexed_filter`], or the part of it `backlog` selects.
pub fn unindexed_filter_in(
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    backlog: Backlog,
) -> Document {
    let markers = match backlog {
        Backlog::Any => markers::unprocessed_filter(rules),
        Backlog::Unflagged => markers::unflagged_filter(),
    };
    doc! { "$and": [markers, searchable::filter(rules, collection, now)] }
}

/// Whether `doc` matches [`unindexed_filter`] at `now`, decided in Rust.
/// `doc` must carry what [`judging`] reads.
pub fn is_unindexed(rules: &Rules, collection: Collection, doc: &Document, now: DateTime) -> bool {
    !markers::is_processed(rules, doc) && searchable::is_searchable(rules, collection, doc, now)
}

/// A count in a server's answer (a `$sum`, an `update`'s `n`): Int32,
/// Int64 or (on some servers) a whole Double.
pub(super) fn count_field(row: &Document, field: &str) -> Result<u64, MongoError> {
    let n = match row.get(field) {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(n)) if n.fract() == 0.0 => *n as i64,
        other => {
            let detail = format!("unexpected {field} in the answer: {other:?}");
            return Err(MongoError::new("count", detail));
        }
    };
    Ok(n.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_is_read_narrow_only_when_no_document_is_flagged_at_another_version() {
        let counts = |flagged, indexed| Counts {
            indexable: 100,
            indexed,
            unindexed: 100 - indexed,
            flagged,
        };
        assert_eq!(Backlog::of(&counts(90, 90)), Backlog::Unflagged);
        assert_eq!(Backlog::of(&counts(0, 0)), Backlog::Unflagged);
        assert_eq!(
            Backlog::of(&counts(91, 90)),
            Backlog::Any,
            "one document flagged at another schema version"
        );
        assert_eq!(Backlog::of(&counts(90, 0)), Backlog::Any, "a schema bump");
    }

    #[test]
    fn unindexed_in_rust_means_unprocessed_and_searchable() {
        let rules = Rules::default();
        let now = DateTime::from_millis(1_000);
        let m = Collection::Messages;
        let unindexed = |d: Document| is_unindexed(&rules, m, &d, now);
        assert!(unindexed(doc! { "_id": 1, "user": "u" }));
        assert!(unindexed(doc! { "_id": 1, "user": "u", FLAG: false }));
        assert!(
            unindexed(doc! { "_id": 1, "user": "u", FLAG: true }),
            "an older schema version"
        );
        assert!(!unindexed(
            doc! { "_id": 1, "user": "u", FLAG: true, SCHEMA_VERSION: 1 }
        ));
        assert!(!unindexed(
            doc! { "_id": 1, "user": "u", FLAG: [true], SCHEMA_VERSION: 1 }
        ));
        assert!(!unindexed(doc! { "_id": 1, "user": "" }));
        assert!(!unindexed(
            doc! { "_id": 1, "user": "u", "unfinished": true }
        ));
        assert!(!unindexed(
            doc! { "_id": 1, "user": "u", "subagentTask": {} }
        ));
    }
}
