//! The chat collections in MongoDB (`messages`, `conversations`): the
//! queries and writes that LibreChat's rules (`crate::librechat`: what is
//! searchable, the projection, the markers) turn into — the counts the plan
//! needs, paging by `_id`, and every write of the markers.
//!
//! Queries use the server's clock (`hello.localTime`) for expiry, never
//! `$$NOW`, and page by `_id` range instead of holding a cursor or sending
//! long `$in` lists. Every flag write goes through the few functions at the
//! end of this file, checks the lease [`Guard`] first and never touches
//! `updatedAt`.
//!
//! A document is marked indexed only for an exact version
//! ([`set_flags_if_unchanged`]): one update statement per document,
//! matching its `_id`, the exact `updatedAt` value and LibreChat version
//! token that were read, and the retention branch it was read in (see
//! docs/design.md, "Version-exact acknowledgement"). The statements of many documents travel in one raw
//! `update` command (every MongoDB version has it; the driver's `bulk_write`
//! needs 8.0). Per-document filters never use `$or`: some servers then scan
//! the collection for every statement.

use std::collections::HashSet;

use futures::TryStreamExt;
use mongodb::bson::{doc, rawdoc, Bson, DateTime, Document, RawArrayBuf, RawDocumentBuf};
use mongodb::error::ErrorKind;
use mongodb::{Collection as MongoCollection, Database};
use serde::Serialize;

use crate::flag_retry::{self, Attempt};
use crate::lease::Guard;
use crate::librechat::markers::{self, ProgressFilters, SCHEMA_VERSION, VERSION_TOKEN};
use crate::librechat::searchable::{self, Retention};
use crate::librechat::{projection, Rules};

pub use crate::librechat::projection::{meili_id, to_meili};

pub mod error;

pub use error::MongoError;

/// The flag LibreChat keeps on each document: true = Meilisearch has it.
pub use crate::librechat::markers::FLAG;

/// The field whose exact value identifies a document's version: LibreChat
/// (mongoose timestamps) rewrites it with every save.
pub const VERSION_FIELD: &str = "updatedAt";

/// Update statements per `update` command (well under the 100,000 a command
/// may hold and the 16 MiB a message may weigh).
pub const STATEMENTS_PER_COMMAND: usize = 1_000;

/// `maxTimeMS` of every read: long enough for any read of ours at millions
/// of documents, so that a server's own default limit does not end one —
/// DocumentDB-based servers (Azure Cosmos DB for MongoDB vCore, FerretDB 2)
/// end a statement after 10 s unless the command names its own limit, and an
/// `_id`-ordered read there sorts what it reads: ~3–4 s to reopen a scan of
/// 1M messages on an idle 2-core machine, over 10 s while our own
/// acknowledgements load it (seen: a run failing with code 50 on the reopen
/// after the server dropped the scan's idle cursor). MongoDB itself applies
/// no limit unless given one.
pub const READ_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// A flag write's attempt, classified for [`flag_retry::with_retries`].
fn attempt_err(what: &str) -> impl FnOnce(mongodb::error::Error) -> Attempt + '_ {
    move |e| {
        let transient = flag_retry::is_transient(&e);
        let error = mongo_err(what)(e);
        if transient {
            Attempt::Transient(error)
        } else {
            Attempt::Final(error)
        }
    }
}

fn mongo_err(what: &str) -> impl FnOnce(mongodb::error::Error) -> MongoError + '_ {
    move |e| match *e.kind {
        ErrorKind::ServerSelection { .. }
        | ErrorKind::Io(_)
        | ErrorKind::ConnectionPoolCleared { .. } => {
            MongoError::Unreachable(format!("{what}: {}", short(&e)))
        }
        _ => MongoError::Failed {
            what: what.to_string(),
            detail: short(&e),
        },
    }
}

/// A driver error as ours (`what` names the operation that failed).
pub(crate) fn failed(what: &str, error: &mongodb::error::Error) -> MongoError {
    mongo_err(what)(error.clone())
}

/// The error's message without the topology dump server-selection errors carry.
fn short(e: &mongodb::error::Error) -> String {
    let text = e.kind.to_string();
    text.split(", Topology:")
        .next()
        .unwrap_or(&text)
        .to_string()
}

pub use crate::librechat::Collection;

/// How the chat collections are read.
trait Handles {
    fn read_projection(self) -> Document;
    fn raw_handle(self, db: &Database) -> MongoCollection<RawDocumentBuf>;
    fn handle(self, db: &Database) -> MongoCollection<Document>;
}

impl Handles for Collection {
    /// What to read from MongoDB to build the Meilisearch document, plus
    /// its version (`updatedAt`, LibreChat's version token).
    fn read_projection(self) -> Document {
        let mut projection = doc! { "_id": 1, VERSION_FIELD: 1, VERSION_TOKEN: 1 };
        projection.extend(projection::read_projection(self));
        projection
    }

    /// The collection read as raw BSON: a page of 10,000 documents kept
    /// raw takes about their wire size, parsed into `Document`s several
    /// times that (an ordered map and a `String` per field).
    fn raw_handle(self, db: &Database) -> MongoCollection<RawDocumentBuf> {
        db.collection(self.name())
    }

    fn handle(self, db: &Database) -> MongoCollection<Document> {
        db.collection::<Document>(self.name())
    }
}

/// The server's current time (`hello.localTime`: a BSON date on MongoDB,
/// Int64 milliseconds on DocumentDB-based servers).
pub async fn server_time(db: &Database) -> Result<DateTime, MongoError> {
    let hello = db
        .run_command(doc! { "hello": 1 })
        .await
        .map_err(mongo_err("hello"))?;
    match hello.get("localTime") {
        Some(Bson::DateTime(t)) => Ok(*t),
        Some(Bson::Int64(ms)) => Ok(DateTime::from_millis(*ms)),
        Some(Bson::Int32(ms)) => Ok(DateTime::from_millis(i64::from(*ms))),
        Some(Bson::Double(ms)) => Ok(DateTime::from_millis(*ms as i64)),
        _ => Err(MongoError::Failed {
            what: "hello".into(),
            detail: "the answer has no localTime".into(),
        }),
    }
}

/// What to read of a document besides its projection to judge it: the
/// fields its searchability depends on, its flag and schema version.
pub fn judging_fields(rules: &Rules, collection: Collection) -> Document {
    let mut projection = doc! { FLAG: 1, SCHEMA_VERSION: 1 };
    for field in searchable::read_fields(rules, collection) {
        projection.insert(field, 1);
    }
    projection
}

/// What a pass reads of each document: its Meilisearch form's sources, its
/// version and [`judging_fields`].
pub fn sync_projection(rules: &Rules, collection: Collection) -> Document {
    let mut projection = collection.read_projection();
    projection.extend(judging_fields(rules, collection));
    projection
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
    /// second branch makes DocumentDB fetch every flagged document (at 1M,
    /// 7–9 s for the one page of a 1% backlog, against 2.5–3.6 s).
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
    pub fn of(counts: &Counts) -> Backlog {
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
/// `doc` must carry [`judging_fields`].
pub fn is_unindexed(rules: &Rules, collection: Collection, doc: &Document, now: DateTime) -> bool {
    !markers::is_processed(rules, doc) && searchable::is_searchable(rules, collection, doc, now)
}

/// The counts the plan needs. `indexed + unindexed = indexable` always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Documents that belong in Meilisearch (searchable).
    pub indexable: u64,
    /// Of those, processed: flagged at the current schema version.
    pub indexed: u64,
    /// Of those, not processed: what indexing sends.
    pub unindexed: u64,
    /// Of the searchable ones, flagged whatever their schema version: what
    /// Meilisearch should hold (a document indexed under an older schema
    /// version is there, and is sent again).
    pub flagged: u64,
}

/// Counts the indexable documents at `now` and, of those, the flagged ones,
/// in ONE aggregation (the same `$match` + `$group` a `count_documents`
/// runs, with one more sum). Two count queries over complementary filters
/// would not partition while flags change under them — LibreChat's plugin
/// sets flags, and an acknowledgement keeps being applied after the owner
/// that sent it stopped — since a document flipped between the two queries
/// is counted in neither (or in both). One pass classifies each document
/// once, so `unindexed = indexable − indexed` holds by construction and
/// `indexable` does not depend on the flags.
pub async fn counts(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
) -> Result<Counts, MongoError> {
    let is_flagged = doc! { "$eq": [ format!("${FLAG}"), true ] };
    let at_version = doc! { "$eq": [ format!("${SCHEMA_VERSION}"), rules.schema_version ] };
    let flagged = doc! { "$cond": [ is_flagged.clone(), 1, 0 ] };
    let processed = doc! { "$cond": [ { "$and": [is_flagged, at_version] }, 1, 0 ] };
    let pipeline = [
        doc! { "$match": searchable::filter(rules, collection, now) },
        doc! { "$group": {
            "_id": Bson::Null,
            "indexable": { "$sum": 1 },
            "indexed": { "$sum": processed },
            "flagged": { "$sum": flagged },
        } },
    ];
    let row = collection
        .handle(db)
        .aggregate(pipeline)
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("count"))?
        .try_next()
        .await
        .map_err(mongo_err("count"))?;
    // No row: nothing matched.
    let Some(row) = row else {
        return Ok(Counts::default());
    };
    let indexable = count_field(&row, "indexable")?;
    let flagged = count_field(&row, "flagged")?.min(indexable);
    let indexed = count_field(&row, "indexed")?.min(flagged);
    Ok(Counts {
        indexable,
        indexed,
        unindexed: indexable - indexed,
        flagged,
    })
}

/// How many searchable documents are unflagged at `now`: one count over
/// the narrow backlog filter ([`Backlog::Unflagged`]), named to LibreChat's
/// sync index when it holds every document ([`backlog_index`]), so the
/// server reads only the backlog's own entries — where [`counts`] reads
/// every indexable document. For the backlog gauge, which every replica
/// refreshes after every run: it needs no partition, so it need not pay for
/// one. Not the whole unprocessed condition: its other branch (flagged at
/// another schema version) reads every flagged document on MongoDB and
/// DocumentDB alike (at 1M messages on DocumentDB, 7.1 s against 1.3 s), on
/// every replica after every run; the plan counts those documents, and a run
/// sends them.
pub async fn count_unflagged(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
) -> Result<u64, MongoError> {
    let filter = unindexed_filter_in(rules, collection, now, Backlog::Unflagged);
    let handle = collection.handle(db);
    let mut count = handle.count_documents(filter).max_time(READ_TIME_LIMIT);
    if let Some(name) = backlog_index(db, collection).await? {
        count = count.hint(mongodb::options::Hint::Name(name));
    }
    count
        .await
        .map_err(mongo_err("count the unflagged documents"))
}

/// A `$sum` result: Int32, Int64 or (on some servers) a whole Double.
fn count_field(row: &Document, field: &str) -> Result<u64, MongoError> {
    let n = match row.get(field) {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(n)) if n.fract() == 0.0 => *n as i64,
        other => {
            return Err(MongoError::Failed {
                what: "count".into(),
                detail: format!("unexpected {field} in the answer: {other:?}"),
            })
        }
    };
    Ok(n.max(0) as u64)
}

/// The next page (by ascending `_id`, after `after`) of unindexed indexable
/// documents at server time `now` (those `backlog` selects), projected to
/// the fields Meilisearch needs.
pub async fn read_unindexed_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    backlog: Backlog,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    let mut projection = collection.read_projection();
    projection.extend(judging_fields(rules, collection));
    let hint = match backlog {
        Backlog::Unflagged => backlog_index(db, collection).await?,
        // The other branch (flagged at another schema version) would walk
        // every flagged entry of that index: left to the server's planner.
        Backlog::Any => None,
    };
    let filter = unindexed_filter_in(rules, collection, now, backlog);
    read_page(db, collection, filter, after, limit, projection, hint).await
}

/// MongoDB's error code for a collection (or database) that does not exist.
const NAMESPACE_NOT_FOUND: i32 = 26;

/// The key of LibreChat's index for its own backlog query (its models
/// create it on both collections): `{ _meiliIndex: 1, isTemporary: 1,
/// expiredAt: 1 }`.
const BACKLOG_INDEX_KEY: [&str; 3] = [FLAG, "isTemporary", "expiredAt"];

/// The name of LibreChat's backlog index on `collection` ([`BACKLOG_INDEX_KEY`],
/// ascending), when it is there and holds every document: not partial, not
/// sparse, no collation (a partial or sparse one leaves documents out, and
/// one with a collation answers comparisons by other rules).
///
/// [`read_unindexed_page`] names it as the hint of a narrow backlog read
/// (`Backlog::Unflagged`, at most a few pages: `reconcile::sync`): the
/// unflagged entries are the backlog plus the unsearchable documents, while
/// a planner may prefer another index — DocumentDB ANDs a bitmap of the
/// whole of an index led by `user` with it (1M messages, a 1% backlog: 1.6–1.8 s a page,
/// 1.2 s hinted) and MongoDB may walk the `_id` index for the sort.
/// [`count_unflagged`] names it for the same reason. An index dropped
/// between this look and the read fails that read (the hint names nothing),
/// and the next run reads without it.
pub async fn backlog_index(
    db: &Database,
    collection: Collection,
) -> Result<Option<String>, MongoError> {
    let handle = collection.handle(db);
    let listed: mongodb::error::Result<Vec<mongodb::IndexModel>> =
        async { handle.list_indexes().await?.try_collect().await }.await;
    let indexes = match listed {
        Ok(indexes) => indexes,
        // MongoDB (and DocumentDB) answer NamespaceNotFound for a collection
        // that does not exist: it has no index, and nothing to read.
        Err(error) if command_code(&error) == Some(NAMESPACE_NOT_FOUND) => return Ok(None),
        Err(error) => return Err(mongo_err("list indexes")(error)),
    };
    // Key values come back as whichever number type created the index.
    let ascending = |value: &Bson| {
        matches!(value, Bson::Int32(1) | Bson::Int64(1)) || value.as_f64() == Some(1.0)
    };
    Ok(indexes.into_iter().find_map(|index| {
        let key_matches = index.keys.len() == BACKLOG_INDEX_KEY.len()
            && index
                .keys
                .iter()
                .zip(BACKLOG_INDEX_KEY)
                .all(|((field, value), expected)| field == expected && ascending(value));
        let options = index.options?;
        let whole = options.partial_filter_expression.is_none()
            && options.sparse != Some(true)
            && options.collation.is_none();
        (key_matches && whole).then_some(options.name).flatten()
    }))
}

/// The next page of every indexable document at server time `now`, whatever
/// its flag, projected like [`read_unindexed_page`] plus the flag. What a
/// forced reindex builds from and what an exact comparison reads.
pub async fn read_indexable_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    let mut projection = collection.read_projection();
    projection.extend(judging_fields(rules, collection));
    read_page(
        db,
        collection,
        searchable::filter(rules, collection, now),
        after,
        limit,
        projection,
        None,
    )
    .await
}

/// Documents a [`Scan`] fetches per round trip. The driver reads a reply
/// into a buffer and copies its payload out before freeing the buffer, so a
/// reply costs twice its size for a moment, beside the page being handed out:
/// at a page's 10,000 documents a round trip (~6 MB of LibreChat messages)
/// each `getMore` held ~12 MB for a moment, and a 100k `once` peaked 3.7 MiB
/// higher than with a thousand. A thousand keeps a reply near 0.6 MB, and
/// the scan read no slower (200k: 6.2 s of reading).
pub const SCAN_ROUND_TRIP_DOCS: usize = 1_000;

/// A plain scan of ALL documents in `_id` order, with no filter: what a pass
/// reads when most of the collection is unindexed. The unindexed filter
/// sorted by `_id` costs some servers (DocumentDB-based ones) time
/// proportional to the whole collection on every page; there any
/// `_id`-sorted query sorts what it reads when it opens, so one cursor
/// sorts once. Projected like [`read_unindexed_page`],
/// so the caller keeps what [`is_unindexed`] (or
/// `searchable::is_searchable`) accepts.
///
/// Read through one batched cursor (`_id > last`, sorted by `_id`), handed
/// out in pages: a cursor's `getMore`s cost about half as much as as many
/// `_id`-range queries (secantusdb: 5.5 s against 11.2 s for 52,000
/// documents). A cursor that fails (it timed out while the reader waited on a
/// slow pipeline, the server stepped down) is reopened once per `next_page` after
/// the last `_id` handed out, so nothing is skipped or read twice.
pub struct Scan {
    handle: MongoCollection<RawDocumentBuf>,
    projection: Document,
    batch_size: u32,
    cursor: Option<mongodb::Cursor<RawDocumentBuf>>,
    after: Option<Bson>,
    ended: bool,
}

impl Scan {
    /// A scan of `collection` handed out in parts of up to `page_size`, fetched
    /// [`SCAN_ROUND_TRIP_DOCS`] documents a round trip (fewer when a page
    /// is smaller).
    pub fn new(db: &Database, rules: &Rules, collection: Collection, page_size: usize) -> Scan {
        let batch_size = page_size.clamp(1, SCAN_ROUND_TRIP_DOCS);
        let mut projection = collection.read_projection();
        projection.extend(judging_fields(rules, collection));
        Scan {
            handle: collection.raw_handle(db),
            projection,
            batch_size: u32::try_from(batch_size.max(1)).unwrap_or(u32::MAX),
            cursor: None,
            after: None,
            ended: false,
        }
    }

    /// The next (up to) `limit` documents; fewer only at the end.
    pub async fn next_page(&mut self, limit: usize) -> Result<Vec<RawDocumentBuf>, MongoError> {
        let mut page = Vec::with_capacity(limit.min(10_000));
        let mut reopened = false;
        while page.len() < limit && !self.ended {
            if self.cursor.is_none() {
                let cursor = open_scan(
                    &self.handle,
                    &self.projection,
                    self.batch_size,
                    self.after.as_ref(),
                )
                .await?;
                self.cursor = Some(cursor);
            }
            let cursor = self.cursor.as_mut().expect("opened above");
            match cursor.try_next().await {
                Ok(Some(doc)) => {
                    self.after = raw_id(&doc);
                    page.push(doc);
                }
                Ok(None) => {
                    self.ended = true;
                    self.cursor = None;
                }
                Err(e) if !reopened => {
                    tracing::debug!(error = %short(&e), "scan cursor failed: reopening it after the last _id read");
                    reopened = true;
                    self.cursor = None;
                }
                Err(e) => return Err(mongo_err("read")(e)),
            }
        }
        Ok(page)
    }
}

/// The cursor of a [`Scan`], from just after `after`. (A free function: the
/// scan's cursor is not `Sync`, so no `&Scan` may be held across an await.)
async fn open_scan(
    handle: &MongoCollection<RawDocumentBuf>,
    projection: &Document,
    batch_size: u32,
    after: Option<&Bson>,
) -> Result<mongodb::Cursor<RawDocumentBuf>, MongoError> {
    let filter = match after {
        Some(after) => doc! { "_id": { "$gt": after.clone() } },
        None => doc! {},
    };
    handle
        .find(filter)
        .sort(doc! { "_id": 1 })
        .projection(projection.clone())
        .batch_size(batch_size)
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("read"))
}

/// A document of a raw page, parsed: one at a time, while it is shaped.
pub fn parse(raw: &RawDocumentBuf) -> Result<Document, MongoError> {
    raw.to_document().map_err(|e| MongoError::Failed {
        what: "read".into(),
        detail: format!("a document MongoDB returned is not valid BSON: {e}"),
    })
}

/// The `_id` of a raw document (where the next page starts).
pub fn raw_id(raw: &RawDocumentBuf) -> Option<Bson> {
    raw.get("_id")
        .ok()
        .flatten()
        .and_then(|id| Bson::try_from(id).ok())
}

async fn read_page(
    db: &Database,
    collection: Collection,
    mut filter: Document,
    after: Option<&Bson>,
    limit: usize,
    projection: Document,
    hint: Option<String>,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    if let Some(after) = after {
        filter.insert("_id", doc! { "$gt": after.clone() });
    }
    let handle = collection.raw_handle(db);
    let mut find = handle
        .find(filter)
        .sort(doc! { "_id": 1 })
        .limit(limit as i64)
        .projection(projection)
        .max_time(READ_TIME_LIMIT);
    if let Some(name) = hint {
        find = find.hint(mongodb::options::Hint::Name(name));
    }
    find.await
        .map_err(mongo_err("read"))?
        .try_collect()
        .await
        .map_err(mongo_err("read"))
}

/// One indexable document's identity, for comparing id sets.
#[derive(Clone, Debug)]
pub struct IdEntry {
    pub mongo_id: Bson,
    /// The Meilisearch primary-key value, when the document has one.
    pub meili_id: Option<String>,
    pub flagged: bool,
}

/// One page of [`indexable_ids_page`].
#[derive(Debug)]
pub struct IdsPage {
    /// The indexable documents of the page.
    pub entries: Vec<IdEntry>,
    /// The last `_id` read (indexable or not): where the next page starts.
    pub after: Option<Bson>,
    /// Whether the collection ends with this page.
    pub last: bool,
}

/// The next `_id` range page (by ascending `_id`, after `after`, `limit`
/// documents read) with the ids of its indexable documents at server time
/// `now`. Read as a plain range and filtered in Rust (`is_searchable`):
/// the indexable filter sorted by `_id` costs some servers (DocumentDB-based
/// ones) time proportional to the whole collection on every page.
pub async fn indexable_ids_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<IdsPage, MongoError> {
    let pk = collection.primary_key();
    let mut projection = doc! { "_id": 1, pk: 1 };
    projection.extend(judging_fields(rules, collection));
    let docs = read_page(db, collection, doc! {}, after, limit, projection, None).await?;
    let last = docs.len() < limit;
    let after = docs.last().and_then(raw_id);
    let mut entries = Vec::new();
    for raw in &docs {
        let d = parse(raw)?;
        if searchable::is_searchable(rules, collection, &d, now) {
            entries.push(IdEntry {
                mongo_id: d.get("_id").cloned().unwrap_or(Bson::Null),
                meili_id: meili_id(collection, &d),
                flagged: markers::is_flagged(&d),
            });
        }
    }
    Ok(IdsPage {
        entries,
        after,
        last,
    })
}

/// The chat collections that keep change-stream pre-images
/// (`changeStreamPreAndPostImages` on, MongoDB 6.0+): their deletes can name
/// the deleted document (`listCollections`).
pub async fn collections_with_pre_images(db: &Database) -> Result<Vec<Collection>, MongoError> {
    let names: Vec<&str> = Collection::ALL.iter().map(|c| c.name()).collect();
    let reply = db
        .run_command(doc! { "listCollections": 1, "filter": { "name": { "$in": names } } })
        .await
        .map_err(|e| failed("listCollections", &e))?;
    let batch = reply
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .cloned()
        .unwrap_or_default();
    Ok(batch
        .iter()
        .filter_map(Bson::as_document)
        .filter(|info| {
            info.get_document("options")
                .and_then(|o| o.get_document("changeStreamPreAndPostImages"))
                .and_then(|p| p.get_bool("enabled"))
                .unwrap_or(false)
        })
        .filter_map(|info| {
            let name = info.get_str("name").ok()?;
            Collection::ALL.into_iter().find(|c| c.name() == name)
        })
        .collect())
}

/// The collection's document count from its metadata (cheap; may be off
/// by a little): what a comparison uses to size its memory.
pub async fn estimated_count(db: &Database, collection: Collection) -> Result<u64, MongoError> {
    collection
        .handle(db)
        .estimated_document_count()
        .await
        .map_err(mongo_err("estimate the document count"))
}

/// Of the given Meilisearch ids, those that an indexable document of the
/// collection has now (server time `now`), found by primary key. A
/// conversation's Meilisearch id has `--` where its `conversationId` may
/// have `|`, so both spellings are looked up.
pub async fn indexable_meili_ids_among(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    meili_ids: &[String],
    now: DateTime,
) -> Result<HashSet<String>, MongoError> {
    let pk = collection.primary_key();
    let mut projection = doc! { pk: 1 };
    projection.extend(judging_fields(rules, collection));
    let mut claimed = HashSet::new();
    for chunk in meili_ids.chunks(IDS_PER_QUERY) {
        let mut values: Vec<Bson> = chunk.iter().map(|id| Bson::String(id.clone())).collect();
        if collection == Collection::Conversations {
            values.extend(
                chunk
                    .iter()
                    .filter(|id| id.contains("--"))
                    .map(|id| Bson::String(id.replace("--", "|"))),
            );
        }
        let found: Vec<Document> = collection
            .handle(db)
            .find(doc! { pk: { "$in": values } })
            .projection(projection.clone())
            .max_time(READ_TIME_LIMIT)
            .await
            .map_err(mongo_err("read by primary key"))?
            .try_collect()
            .await
            .map_err(mongo_err("read by primary key"))?;
        claimed.extend(
            found
                .iter()
                .filter(|d| searchable::is_searchable(rules, collection, d, now))
                .filter_map(|d| meili_id(collection, d)),
        );
    }
    Ok(claimed)
}

/// One version of one document: its `_id`, and the exact values of
/// `updatedAt` and of LibreChat's version token `_meiliIndexVersion` read
/// with it (`None`: it had none).
#[derive(Clone, Debug, PartialEq)]
pub struct DocVersion {
    pub id: Bson,
    pub updated_at: Option<Bson>,
    pub token: Option<Bson>,
}

impl DocVersion {
    /// The version of a document as read (it must have been read with its
    /// `_id`, `updatedAt` and `_meiliIndexVersion`).
    pub fn of(doc: &Document) -> DocVersion {
        DocVersion {
            id: doc.get("_id").cloned().unwrap_or(Bson::Null),
            updated_at: doc.get(VERSION_FIELD).cloned(),
            token: doc.get(VERSION_TOKEN).cloned(),
        }
    }

    /// The filter that matches this document only while it still has this
    /// version: `_id`, `updatedAt` and `_meiliIndexVersion` equal to the
    /// values read. A missing value must stay missing and a `null` be
    /// matched by type (`updatedAt: null` would also match a document whose
    /// `updatedAt` was since removed).
    fn filter(&self) -> Document {
        let exactly = |value: &Option<Bson>| match value {
            None => Bson::Document(doc! { "$exists": false }),
            Some(Bson::Null) => Bson::Document(doc! { "$type": "null" }),
            Some(value) => Bson::Document(doc! { "$eq": value.clone() }),
        };
        doc! {
            "_id": self.id.clone(),
            VERSION_FIELD: exactly(&self.updated_at),
            VERSION_TOKEN: exactly(&self.token),
        }
    }
}

/// What a batch of update statements did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Updated {
    /// Statements whose filter matched a document.
    pub matched: u64,
    /// Documents actually changed.
    pub modified: u64,
}

/// Marks indexed (LibreChat's markers at the current schema version,
/// [`markers::indexed`]) each document that still has the version given and
/// is still searchable in the retention branch it was read in, at server
/// time `now`: one statement per document, filter `_id`, the exact
/// `updatedAt` and version token read, and the branch's conditions
/// (`searchable::branch_filter`, no `$or`). Returns how many statements
/// matched: fewer than `versions.len()` means some document was changed,
/// deleted or made unsearchable since it was read (those keep the markers
/// the application gave them). Fenced by the guard before each command.
pub async fn set_flags_if_unchanged(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    versions: &[(DocVersion, Retention)],
    now: DateTime,
    guard: &Guard,
) -> Result<Updated, MongoError> {
    let update = markers::indexed(rules);
    let statements = versions
        .iter()
        .map(|(version, branch)| {
            let mut filter = version.filter();
            filter.extend(searchable::branch_filter(rules, collection, *branch, now));
            statement(doc! { "q": filter, "u": update.clone() })
        })
        .collect::<Result<_, _>>()?;
    update_each(db, collection, statements, "set flags", guard).await
}

/// `_id`s per `$in` list: a few round trips more for a micro-batch, and no
/// list long enough to cost more than it saves (on some servers the cost of
/// matching an `$in` list grows faster than its length).
const IDS_PER_QUERY: usize = 100;

/// Which of the given documents are processed now (flagged at the current
/// schema version; their `_id`s): queries by `_id` list, the markers in the
/// filter. Follow mode asks this just before it sends a micro-batch, to
/// leave out the versions LibreChat's save hook has indexed meanwhile.
pub async fn processed_among(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    ids: &[Bson],
) -> Result<Vec<Bson>, MongoError> {
    let found = find_by_id_lists(
        db,
        collection,
        ids,
        markers::processed_filter(rules),
        doc! { "_id": 1 },
        "read flags",
    )
    .await?;
    Ok(found
        .into_iter()
        .filter_map(|mut doc| doc.remove("_id"))
        .collect())
}

/// The documents of `ids` that also match `filter`, by `_id` lists of at
/// most [`IDS_PER_QUERY`].
async fn find_by_id_lists(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    filter: Document,
    projection: Document,
    what: &'static str,
) -> Result<Vec<Document>, MongoError> {
    let mut found = Vec::new();
    for chunk in ids.chunks(IDS_PER_QUERY) {
        let mut query = doc! { "_id": { "$in": chunk } };
        query.extend(filter.clone());
        let page: Vec<Document> = collection
            .handle(db)
            .find(query)
            .projection(projection.clone())
            .max_time(READ_TIME_LIMIT)
            .await
            .map_err(mongo_err(what))?
            .try_collect()
            .await
            .map_err(mongo_err(what))?;
        found.extend(page);
    }
    Ok(found)
}

/// Clears the flag of the given documents (those that have it set): one
/// statement per `_id`, whatever the version — always safe, it only makes
/// indexing send the document again. Returns how many were cleared.
pub async fn clear_flags(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    guard: &Guard,
) -> Result<u64, MongoError> {
    let statements = ids
        .iter()
        .map(|id| {
            statement(doc! { "q": { "_id": id.clone(), FLAG: true }, "u": markers::unindexed() })
        })
        .collect::<Result<_, _>>()?;
    Ok(
        update_each(db, collection, statements, "clear flags", guard)
            .await?
            .modified,
    )
}

/// Marks removed (LibreChat's cleanup markers, [`markers::removed`]) each
/// of the given versions that is still the document's version: documents
/// found not searchable and deleted from Meilisearch. Version-exact, so a
/// document saved (and perhaps indexed by LibreChat's hook) since it was
/// judged keeps its markers. Returns how many were marked.
pub async fn mark_removed(
    db: &Database,
    collection: Collection,
    versions: &[DocVersion],
    guard: &Guard,
) -> Result<u64, MongoError> {
    let statements = versions
        .iter()
        .map(|version| statement(doc! { "q": version.filter(), "u": markers::removed() }))
        .collect::<Result<_, _>>()?;
    Ok(
        update_each(db, collection, statements, "mark removed", guard)
            .await?
            .matched,
    )
}

/// One statement of an `update` command, as the bytes it is sent as: a
/// statement held as a `Document` costs an ordered map and a string per
/// field, several KiB for a version-exact one, and up to
/// `sync.ack_writers` commands of 1,000 are built at once per collection.
fn statement(statement: Document) -> Result<RawDocumentBuf, MongoError> {
    RawDocumentBuf::from_document(&statement).map_err(|e| MongoError::Failed {
        what: "build an update statement".into(),
        detail: e.to_string(),
    })
}

/// Runs update statements as raw `update` commands of at most
/// [`STATEMENTS_PER_COMMAND`] statements (unordered), checking the guard
/// before each command. A write error or write-concern error in a reply is
/// an error: no flag write is silently lost.
///
/// A command the server stops for taking too long (code 50,
/// `MaxTimeMSExpired`: DocumentDB-based servers end every statement after
/// 10 s, and with LibreChat's ~20 indexes on a collection one document's
/// update can cost it several milliseconds on a busy machine) is split in
/// halves, each sent again — the statements are idempotent, and each
/// `matched` still counts every statement of the command once. One
/// statement alone that takes too long is a transient failure, retried.
async fn update_each(
    db: &Database,
    collection: Collection,
    statements: Vec<RawDocumentBuf>,
    what: &str,
    guard: &Guard,
) -> Result<Updated, MongoError> {
    let mut total = Updated::default();
    let mut rest: &[RawDocumentBuf] = &statements;
    let mut pending: std::collections::VecDeque<&[RawDocumentBuf]> =
        std::collections::VecDeque::new();
    loop {
        let chunk = match pending.pop_front() {
            Some(chunk) => chunk,
            None if rest.is_empty() => return Ok(total),
            None => {
                let (chunk, more) = rest.split_at(rest.len().min(COMMAND_SIZE.current()));
                rest = more;
                chunk
            }
        };
        let single = chunk.len() == 1;
        let mut updates = RawArrayBuf::new();
        for statement in chunk {
            updates.push(statement.clone());
        }
        let command = rawdoc! { "update": collection.name(), "updates": updates, "ordered": false };
        let started = std::time::Instant::now();
        let sent = flag_retry::with_retries(what, guard, || async {
            let reply = match db.run_raw_command(command.clone()).await {
                Ok(reply) => reply,
                Err(error) if took_too_long(&error) && !single => return Ok(None),
                Err(error) => return Err(attempt_err(what)(error)),
            };
            match update_reply(&reply, what) {
                Err(Attempt::Final(_)) if reply_took_too_long(&reply) => {
                    if single {
                        Err(Attempt::Transient(MongoError::Failed {
                            what: what.to_string(),
                            detail: "one statement took longer than the server allows".into(),
                        }))
                    } else {
                        Ok(None)
                    }
                }
                other => other.map(Some),
            }
        })
        .await?;
        match sent {
            Some(updated) => {
                COMMAND_SIZE.observe(chunk.len(), started.elapsed());
                total.matched += updated.matched;
                total.modified += updated.modified;
            }
            None => {
                tracing::debug!(statements = chunk.len(), %what,
                    "the server stopped an update command for taking too long: sending it in halves");
                COMMAND_SIZE.stopped(chunk.len());
                let (first, second) = chunk.split_at(chunk.len() / 2);
                pending.push_front(second);
                pending.push_front(first);
            }
        }
    }
}

/// Statements per `update` command, adapted to how long the server takes:
/// at most [`STATEMENTS_PER_COMMAND`], halved when a command took longer
/// than [`SLOW_COMMAND`] or was stopped for taking too long, doubled again
/// after one well under it. So a server whose statement limit a command of
/// 1,000 updates would break (DocumentDB's 10 s, with LibreChat's indexes
/// on a busy machine) gets commands it can finish, without paying the limit
/// for each of them. One per process: every collection's writes go to the
/// same server.
struct CommandSize(std::sync::atomic::AtomicUsize);

/// A command taking longer than this makes the next ones smaller.
const SLOW_COMMAND: std::time::Duration = std::time::Duration::from_secs(3);

static COMMAND_SIZE: CommandSize =
    CommandSize(std::sync::atomic::AtomicUsize::new(STATEMENTS_PER_COMMAND));

impl CommandSize {
    fn current(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed).max(1)
    }

    fn observe(&self, size: usize, took: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        if took > SLOW_COMMAND {
            self.0.fetch_min((size / 2).max(1), Relaxed);
        } else if took < SLOW_COMMAND / 4 && size >= self.current() {
            let grown = (size * 2).min(STATEMENTS_PER_COMMAND);
            let _ = self
                .0
                .fetch_update(Relaxed, Relaxed, |now| (now < grown).then_some(grown));
        }
    }

    fn stopped(&self, size: usize) {
        self.0
            .fetch_min((size / 2).max(1), std::sync::atomic::Ordering::Relaxed);
    }
}

/// The code of a command error (`None` for any other kind of error).
fn command_code(error: &mongodb::error::Error) -> Option<i32> {
    match &*error.kind {
        ErrorKind::Command(command) => Some(command.code),
        _ => None,
    }
}

/// MongoDB's `MaxTimeMSExpired`: the server stopped the operation for
/// taking longer than it allows.
const MAX_TIME_EXPIRED: i32 = 50;

fn took_too_long(error: &mongodb::error::Error) -> bool {
    command_code(error) == Some(MAX_TIME_EXPIRED)
}

/// Whether an `update` reply's write errors say the server stopped it for
/// taking too long.
fn reply_took_too_long(reply: &Document) -> bool {
    reply.get_array("writeErrors").is_ok_and(|errors| {
        errors.iter().filter_map(Bson::as_document).any(|e| {
            matches!(e.get("code"), Some(Bson::Int32(code)) if *code == MAX_TIME_EXPIRED)
                || matches!(e.get("code"), Some(Bson::Int64(code)) if *code == i64::from(MAX_TIME_EXPIRED))
        })
    })
}

/// The counts of an `update` command's reply, or its first write error (not
/// worth another attempt), or its write-concern error (applied, unconfirmed:
/// sent again, which is harmless).
fn update_reply(reply: &Document, what: &str) -> Result<Updated, Attempt> {
    let failed = |detail: String| {
        Attempt::Final(MongoError::Failed {
            what: what.to_string(),
            detail,
        })
    };
    if let Ok(errors) = reply.get_array("writeErrors") {
        if let Some(first) = errors.first().and_then(Bson::as_document) {
            return Err(failed(format!(
                "{} of the statements failed; the first: code {}: {}",
                errors.len(),
                first
                    .get("code")
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                first.get_str("errmsg").unwrap_or("(no message)")
            )));
        }
    }
    if let Ok(error) = reply.get_document("writeConcernError") {
        return Err(Attempt::Transient(MongoError::Failed {
            what: what.to_string(),
            detail: format!(
                "write concern error: {}",
                error.get_str("errmsg").unwrap_or("(no message)")
            ),
        }));
    }
    let count =
        |field| count_field(reply, field).map_err(|_| failed(format!("no {field} in the reply")));
    Ok(Updated {
        matched: count("n")?,
        modified: count("nModified").unwrap_or(0),
    })
}

/// The key of an `_id` in sets of ids (its exact BSON value, type included).
pub fn id_key(id: &Bson) -> String {
    format!("{id:?}")
}

/// How a read-back finds the documents of one run of `_id`s (one BSON type,
/// ascending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadBack {
    /// By `_id` range from the run's first to its last `_id`, keeping the
    /// wanted ones: for documents a pass read in `_id` order, whose range
    /// holds little else.
    #[default]
    Range,
    /// By `_id` list (`$in`, [`IDS_PER_QUERY`] at a time): for
    /// documents scattered over the collection — follow mode's micro-batches
    /// mix new messages with edits of old ones, and a range from the oldest
    /// to the newest `_id` could span the whole collection.
    Ids,
}

/// The documents of `ids` (one run, see [`ReadBack`]) as they are now, with
/// their `_id`, version, primary key, markers and the fields their
/// searchability depends on — what an acknowledgement that did not match everything reads back
/// to learn what happened. Only the wanted documents are held.
pub async fn read_states(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    ids: &[Bson],
    how: ReadBack,
) -> Result<Vec<Document>, MongoError> {
    let mut projection =
        doc! { "_id": 1, VERSION_FIELD: 1, VERSION_TOKEN: 1, collection.primary_key(): 1 };
    projection.extend(judging_fields(rules, collection));
    read_kept(db, collection, ids, how, projection).await
}

/// Like [`read_states`], with the whole read projection (what Meilisearch
/// gets) besides: what a refused batch, whose NDJSON was dropped once
/// enqueued, is rebuilt from to isolate the documents Meilisearch rejects.
pub async fn read_documents(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    ids: &[Bson],
    how: ReadBack,
) -> Result<Vec<Document>, MongoError> {
    let mut projection = collection.read_projection();
    projection.extend(judging_fields(rules, collection));
    read_kept(db, collection, ids, how, projection).await
}

async fn read_kept(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    how: ReadBack,
    projection: Document,
) -> Result<Vec<Document>, MongoError> {
    let (Some(first), Some(last)) = (ids.first(), ids.last()) else {
        return Ok(Vec::new());
    };
    match how {
        ReadBack::Range => {
            let wanted: std::collections::HashSet<String> = ids.iter().map(id_key).collect();
            read_kept_in_range(db, collection, first, last, &wanted, projection).await
        }
        ReadBack::Ids => {
            find_by_id_lists(db, collection, ids, doc! {}, projection, "read back").await
        }
    }
}

async fn read_kept_in_range(
    db: &Database,
    collection: Collection,
    first: &Bson,
    last: &Bson,
    wanted: &std::collections::HashSet<String>,
    projection: Document,
) -> Result<Vec<Document>, MongoError> {
    const PAGE: i64 = 10_000;
    let mut kept = Vec::new();
    let mut lower = doc! { "$gte": first.clone() };
    loop {
        lower.insert("$lte", last.clone());
        let page: Vec<Document> = collection
            .handle(db)
            .find(doc! { "_id": lower.clone() })
            .sort(doc! { "_id": 1 })
            .limit(PAGE)
            .projection(projection.clone())
            .max_time(READ_TIME_LIMIT)
            .await
            .map_err(mongo_err("read back"))?
            .try_collect()
            .await
            .map_err(mongo_err("read back"))?;
        let full = page.len() as i64 == PAGE;
        let Some(after) = page.last().and_then(|d| d.get("_id").cloned()) else {
            return Ok(kept);
        };
        kept.extend(
            page.into_iter()
                .filter(|d| d.get("_id").is_some_and(|id| wanted.contains(&id_key(id)))),
        );
        if !full {
            return Ok(kept);
        }
        lower = doc! { "$gt": after };
    }
}

/// Marks removed ([`markers::removed`]) every flagged document that is not
/// searchable at `now`: it must not be in Meilisearch (the caller has
/// removed what Meilisearch held of it), so it cannot be "indexed".
pub async fn clear_flags_of_unindexable(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    guard: &Guard,
) -> Result<u64, MongoError> {
    let filter = doc! { FLAG: true, "$nor": [ searchable::filter(rules, collection, now) ] };
    let handle = collection.handle(db);
    flag_retry::with_retries("clear flags", guard, || async {
        let result = handle
            .update_many(filter.clone(), markers::removed())
            .await
            .map_err(attempt_err("clear flags"))?;
        Ok(result.modified_count)
    })
    .await
}

/// Clears the flags of the next `batch` flagged documents after `after` (by
/// `_id`), in one range update. Returns how many were cleared and the last
/// `_id` of the range (`None` once no flagged document is left). Resumable:
/// a rerun simply finds the documents still flagged.
pub async fn reset_flags_batch(
    db: &Database,
    collection: Collection,
    after: Option<&Bson>,
    batch: usize,
    guard: &Guard,
) -> Result<(u64, Option<Bson>), MongoError> {
    let mut batch = batch.max(1);
    loop {
        match reset_flags_range(db, collection, after, batch, guard).await? {
            Some(done) => return Ok(done),
            // The server stopped the update for taking too long (code 50,
            // see `update_each`): a smaller range.
            None => {
                tracing::debug!(
                    batch,
                    "resetting flags took the server too long: halving the range"
                );
                batch = (batch / 2).max(1);
            }
        }
    }
}

/// One range of [`reset_flags_batch`]; `None` when the server stopped the
/// update for taking too long (and more than one document was in it).
async fn reset_flags_range(
    db: &Database,
    collection: Collection,
    after: Option<&Bson>,
    batch: usize,
    guard: &Guard,
) -> Result<Option<(u64, Option<Bson>)>, MongoError> {
    let handle = collection.handle(db);
    let mut filter = doc! { FLAG: true };
    if let Some(after) = after {
        filter.insert("_id", doc! { "$gt": after.clone() });
    }
    // The last `_id` of the next `batch` flagged documents bounds the range.
    let page: Vec<Document> = handle
        .find(filter)
        .sort(doc! { "_id": 1 })
        .skip(batch.saturating_sub(1) as u64)
        .limit(1)
        .projection(doc! { "_id": 1 })
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("reset flags"))?
        .try_collect()
        .await
        .map_err(mongo_err("reset flags"))?;
    let upper = page.first().and_then(|d| d.get("_id").cloned());
    let mut range = doc! {};
    if let Some(after) = after {
        range.insert("$gt", after.clone());
    }
    if let Some(upper) = &upper {
        range.insert("$lte", upper.clone());
    }
    let mut update_filter = doc! { FLAG: true };
    if !range.is_empty() {
        update_filter.insert("_id", range);
    }
    let cleared = flag_retry::with_retries("reset flags", guard, || async {
        match handle
            .update_many(update_filter.clone(), doc! { "$set": { FLAG: false } })
            .await
        {
            Ok(result) => Ok(Some(result.modified_count)),
            Err(error) if batch > 1 && update_took_too_long(&error) => Ok(None),
            Err(error) => Err(attempt_err("reset flags")(error)),
        }
    })
    .await?;
    Ok(cleared.map(|cleared| (cleared, upper)))
}

/// Whether an `update_many` failed because the server stopped it for
/// taking too long (a command error or a write error with code 50).
fn update_took_too_long(error: &mongodb::error::Error) -> bool {
    took_too_long(error)
        || matches!(&*error.kind, ErrorKind::Write(mongodb::error::WriteFailure::WriteError(e)) if e.code == MAX_TIME_EXPIRED)
}

/// LibreChat's own view of one collection, as its `getSyncProgress()`
/// reports it (the same four counts, [`ProgressFilters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LibreChatProgress {
    /// `totalDocuments`: searchable by LibreChat's own rule.
    pub searchable: u64,
    /// `totalProcessed`: of those, flagged at the schema version.
    pub processed: u64,
    /// `pendingIndexing`: attempted but not flagged, or flagged at another
    /// schema version.
    pub pending_indexing: u64,
    /// `pendingCleanup`: excluded documents that may still be in Meilisearch.
    pub pending_cleanup: u64,
    /// `isComplete`: everything processed, no cleanup pending.
    pub complete: bool,
}

/// LibreChat's `getSyncProgress()` of `collection` at `now`: four counts,
/// each over the whole collection (seconds at a million documents).
pub async fn librechat_progress(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
) -> Result<LibreChatProgress, MongoError> {
    let filters = ProgressFilters::new(rules, collection, now);
    let handle = collection.handle(db);
    let count = |filter: Document| {
        let handle = handle.clone();
        async move {
            handle
                .count_documents(filter)
                .max_time(READ_TIME_LIMIT)
                .await
                .map_err(mongo_err("count LibreChat's progress"))
        }
    };
    let searchable = count(filters.searchable).await?;
    let processed = count(filters.processed).await?;
    let pending_indexing = count(filters.pending_indexing).await?;
    let pending_cleanup = match filters.pending_cleanup {
        Some(filter) => count(filter).await?,
        None => 0,
    };
    Ok(LibreChatProgress {
        searchable,
        processed,
        pending_indexing,
        pending_cleanup,
        complete: processed == searchable && pending_cleanup == 0,
    })
}

/// How many excluded documents may still be in Meilisearch (LibreChat's
/// pending cleanup; 0 without an exclusion path). On MongoDB LibreChat's
/// partial indexes (`meili_excluded_*`) serve the query.
pub async fn count_pending_cleanup(
    db: &Database,
    rules: &Rules,
    collection: Collection,
) -> Result<u64, MongoError> {
    let Some(path) = rules.exclusion_path(collection) else {
        return Ok(0);
    };
    collection
        .handle(db)
        .count_documents(markers::pending_cleanup_filter(path))
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("count the excluded documents to clean up"))
}

/// The next `limit` excluded documents pending cleanup after `after` (by
/// `_id`), with their `_id` and primary key.
pub async fn pending_cleanup_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<Document>, MongoError> {
    let Some(path) = rules.exclusion_path(collection) else {
        return Ok(Vec::new());
    };
    let mut filter = markers::pending_cleanup_filter(path);
    if let Some(after) = after {
        filter.insert("_id", doc! { "$gt": after.clone() });
    }
    collection
        .handle(db)
        .find(filter)
        .sort(doc! { "_id": 1 })
        .limit(limit as i64)
        .projection(doc! { "_id": 1, collection.primary_key(): 1 })
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("read the excluded documents to clean up"))?
        .try_collect()
        .await
        .map_err(mongo_err("read the excluded documents to clean up"))
}

/// Marks removed ([`markers::removed`]) each of `ids` that still carries
/// the exclusion path: Meilisearch has just been told to delete them, and a
/// document that lost the path since (and may have been indexed) is left
/// alone. Returns how many were marked.
pub async fn mark_excluded_removed(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    ids: &[Bson],
    guard: &Guard,
) -> Result<u64, MongoError> {
    let Some(path) = rules.exclusion_path(collection) else {
        return Ok(0);
    };
    let statements = ids
        .iter()
        .map(|id| {
            statement(doc! { "q": { "_id": id.clone(), path: { "$exists": true } }, "u": markers::removed() })
        })
        .collect::<Result<_, _>>()?;
    Ok(
        update_each(db, collection, statements, "mark removed", guard)
            .await?
            .matched,
    )
}

/// The next page (by `_id`, after `after`) of the documents whose expiry
/// has passed at `now` and that may still be in Meilisearch by their
/// markers (`markers::may_be_indexed_filter`), with their version, primary
/// key and the fields that judge them: what the expiry sweep removes.
/// LibreChat's TTL index on `expiredAt` serves the range, and it holds only
/// the documents expired and not yet deleted by MongoDB's TTL monitor.
pub async fn expired_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<Document>, MongoError> {
    let mut filter = searchable::expired_filter(now);
    filter.extend(markers::may_be_indexed_filter());
    let mut projection =
        doc! { "_id": 1, VERSION_FIELD: 1, VERSION_TOKEN: 1, collection.primary_key(): 1 };
    projection.extend(judging_fields(rules, collection));
    read_page(db, collection, filter, after, limit, projection, None)
        .await?
        .iter()
        .map(parse)
        .collect()
}

/// The earliest expiry after `now` of a document that may be in
/// Meilisearch by its markers: when the next one must leave. One document,
/// sorted by `expiredAt` — LibreChat's TTL index on it serves the query.
pub async fn next_expiry(
    db: &Database,
    collection: Collection,
    now: DateTime,
) -> Result<Option<DateTime>, MongoError> {
    let mut filter = searchable::expiring_filter(now);
    filter.extend(markers::may_be_indexed_filter());
    let next = collection
        .handle(db)
        .find_one(filter)
        .sort(doc! { searchable::EXPIRY: 1 })
        .projection(doc! { "_id": 0, searchable::EXPIRY: 1 })
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("read the next expiry"))?;
    Ok(next.and_then(|d| d.get_datetime(searchable::EXPIRY).ok().copied()))
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

    #[test]
    fn a_version_filter_matches_the_exact_values_read() {
        let at = DateTime::from_millis(5);
        let v = DocVersion::of(&doc! { "_id": 1, "updatedAt": at, "text": "x" });
        assert_eq!(
            v.filter(),
            doc! { "_id": 1, "updatedAt": { "$eq": at }, VERSION_TOKEN: { "$exists": false } }
        );
        let v = DocVersion::of(&doc! { "_id": 2, VERSION_TOKEN: "abc" });
        assert_eq!(
            v.filter(),
            doc! { "_id": 2, "updatedAt": { "$exists": false }, VERSION_TOKEN: { "$eq": "abc" } }
        );
        let v =
            DocVersion::of(&doc! { "_id": 3, "updatedAt": Bson::Null, VERSION_TOKEN: Bson::Null });
        assert_eq!(
            v.filter(),
            doc! { "_id": 3, "updatedAt": { "$type": "null" }, VERSION_TOKEN: { "$type": "null" } }
        );
    }

    #[test]
    fn a_reply_stopped_for_taking_too_long_is_told_apart() {
        let stopped = doc! { "ok": 1.0, "n": 0, "writeErrors": [ { "index": 0, "code": 50, "errmsg": "command timeout" } ] };
        assert!(reply_took_too_long(&stopped));
        let other = doc! { "ok": 1.0, "n": 0, "writeErrors": [ { "index": 0, "code": 66, "errmsg": "immutable" } ] };
        assert!(!reply_took_too_long(&other));
        assert!(!reply_took_too_long(&doc! { "ok": 1.0, "n": 3 }));
    }

    #[test]
    fn update_replies_count_or_fail() {
        let ok = doc! { "ok": 1.0, "n": 3, "nModified": 2 };
        assert!(matches!(
            update_reply(&ok, "x"),
            Ok(Updated {
                matched: 3,
                modified: 2
            })
        ));
        let failed = doc! { "ok": 1.0, "n": 1, "writeErrors": [ { "index": 0, "code": 66, "errmsg": "immutable" } ] };
        let Err(Attempt::Final(error)) = update_reply(&failed, "set flags") else {
            panic!("a write error is final");
        };
        let error = error.to_string();
        assert!(
            error.contains("set flags") && error.contains("immutable"),
            "{error}"
        );
        // Applied but not confirmed: worth sending again.
        let concern = doc! { "ok": 1.0, "n": 1, "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
        assert!(matches!(
            update_reply(&concern, "x"),
            Err(Attempt::Transient(_))
        ));
    }
}
