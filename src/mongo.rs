//! The chat collections in MongoDB (`messages`, `conversations`): which
//! documents are indexable (one definition, as a filter and as a Rust
//! predicate that mirrors it), the counts the plan needs, paging by `_id`,
//! the document → Meilisearch shape (docs/design.md §3.2), and every write of the
//! `_meiliIndex` flag.
//!
//! Queries use the server's clock (`hello.localTime`) for expiry, never
//! `$$NOW`, and page by `_id` range instead of holding a cursor or sending
//! long `$in` lists. Every flag write goes through the few functions at the
//! end of this file, checks the lease [`Guard`] first and never touches
//! `updatedAt`.
//!
//! A flag is set only for an exact version ([`set_flags_if_unchanged`]): one
//! update statement per document, matching its `_id` and the exact
//! `updatedAt` value that was read (see docs/design.md, "Version-exact
//! acknowledgement"). The statements of many documents travel in one raw
//! `update` command (every MongoDB version has it; the driver's `bulk_write`
//! needs 8.0). Per-document filters never use `$or`: some servers then scan
//! the collection for every statement.

use std::collections::HashSet;

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, DateTime, Document, RawDocumentBuf};
use mongodb::error::ErrorKind;
use mongodb::{Collection as MongoCollection, Database};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::flag_retry::{self, Attempt};
use crate::lease::{Guard, LeaseLost};

/// The flag LibreChat keeps on each document: true = Meilisearch has this version.
pub const FLAG: &str = "_meiliIndex";

/// The field whose exact value identifies a document's version: LibreChat
/// (mongoose timestamps) rewrites it with every save.
pub const VERSION_FIELD: &str = "updatedAt";

/// Update statements per `update` command (well under the 100,000 a command
/// may hold and the 16 MiB a message may weigh).
pub const STATEMENTS_PER_COMMAND: usize = 1_000;

/// Why a MongoDB operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MongoError {
    #[error("MongoDB is unreachable: {0}")]
    Unreachable(String),
    #[error("MongoDB {what} failed: {detail}")]
    Failed { what: String, detail: String },
    #[error(transparent)]
    LeaseLost(#[from] LeaseLost),
}

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

    /// The fields sent to Meilisearch.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            Collection::Messages => &["messageId", "conversationId", "user", "sender", "text"],
            Collection::Conversations => &["conversationId", "title", "user", "tags"],
        }
    }

    /// What to read from MongoDB to build the Meilisearch document, plus
    /// its version (`updatedAt`).
    fn read_projection(self) -> Document {
        let mut projection = doc! { "_id": 1, VERSION_FIELD: 1 };
        for field in self.fields() {
            projection.insert(*field, 1);
        }
        if self == Collection::Messages {
            // Only what the text of the parts needs, not images or tool calls.
            projection.insert("content.type", 1);
            projection.insert("content.text", 1);
        }
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

/// Documents that belong in Meilisearch at server time `now` (docs/design.md §3.3):
/// a `user` (not null, not `""`), not `isTemporary: true`, not expired at
/// `now`, and for messages not `unfinished: true`.
///
/// Expiry is written `expiredAt: { $not: { $lte: now } }` — "unset, null or
/// later than `now`" without an `$or`, so the same conditions can sit inside
/// a per-document update filter without making any server scan. `$lte`
/// compares dates with dates only, so an `expiredAt` that is not a date (a
/// string, a number) counts as "never expires". [`is_indexable`] is the same
/// rule in Rust, value for value (arrays included, as MongoDB matches them).
pub fn indexable_filter(collection: Collection, now: DateTime) -> Document {
    let mut filter = doc! {
        "user": { "$nin": [Bson::Null, ""] },
        "isTemporary": { "$ne": true },
        "expiredAt": { "$not": { "$lte": now } },
    };
    if collection == Collection::Messages {
        filter.insert("unfinished", doc! { "$ne": true });
    }
    filter
}

/// Whether `doc` matches [`indexable_filter`] at `now`, decided in Rust with
/// MongoDB's matching rules: a missing field equals `null`, and a condition
/// on an array field holds when it holds for the array or for one of its
/// elements (so `isTemporary: [true]` is temporary, `user: ["a", ""]` has an
/// empty user). The fields it reads are [`INDEXABILITY_FIELDS`].
pub fn is_indexable(collection: Collection, doc: &Document, now: DateTime) -> bool {
    let no_user =
        |v: &Bson| matches!(v, Bson::Null) || matches!(v, Bson::String(s) if s.is_empty());
    let is_true = |v: &Bson| matches!(v, Bson::Boolean(true));
    let expired = |v: &Bson| matches!(v, Bson::DateTime(t) if *t <= now);
    let user_missing = match doc.get("user") {
        None => true,
        Some(value) => matches_or_contains(value, no_user),
    };
    let temporary = doc
        .get("isTemporary")
        .is_some_and(|v| matches_or_contains(v, is_true));
    let is_expired = doc
        .get("expiredAt")
        .is_some_and(|v| matches_or_contains(v, expired));
    let unfinished = collection == Collection::Messages
        && doc
            .get("unfinished")
            .is_some_and(|v| matches_or_contains(v, is_true));
    !(user_missing || temporary || is_expired || unfinished)
}

/// The fields [`is_indexable`] reads.
pub const INDEXABILITY_FIELDS: [&str; 4] = ["user", "isTemporary", "expiredAt", "unfinished"];

/// MongoDB's rule for a condition on a field that may hold an array: it
/// holds for the value itself or for one of its elements (one level).
fn matches_or_contains(value: &Bson, condition: impl Fn(&Bson) -> bool) -> bool {
    condition(value) || matches!(value, Bson::Array(items) if items.iter().any(&condition))
}

/// Indexable documents whose flag is not set.
pub fn unindexed_filter(collection: Collection, now: DateTime) -> Document {
    let mut filter = indexable_filter(collection, now);
    filter.insert(FLAG, doc! { "$ne": true });
    filter
}

/// The counts the plan needs. `indexed + unindexed = indexable` always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Documents that belong in Meilisearch.
    pub indexable: u64,
    /// Of those, flagged as indexed.
    pub indexed: u64,
    /// Of those, not flagged.
    pub unindexed: u64,
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
    collection: Collection,
    now: DateTime,
) -> Result<Counts, MongoError> {
    let flagged = doc! { "$cond": [ { "$eq": [ format!("${FLAG}"), true ] }, 1, 0 ] };
    let pipeline = [
        doc! { "$match": indexable_filter(collection, now) },
        doc! { "$group": { "_id": Bson::Null, "indexable": { "$sum": 1 }, "indexed": { "$sum": flagged } } },
    ];
    let row = collection
        .handle(db)
        .aggregate(pipeline)
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
    let indexed = count_field(&row, "indexed")?.min(indexable);
    Ok(Counts {
        indexable,
        indexed,
        unindexed: indexable - indexed,
    })
}

/// How many indexable documents are not flagged at `now`: one count over
/// [`unindexed_filter`], whose flag condition lets the server answer from
/// the sync index `{_meiliIndex, isTemporary, expiredAt}` and read only the
/// backlog — where [`counts`] reads every indexable document. For the
/// backlog gauge, which every replica refreshes after every run: it needs
/// no partition, so it need not pay for one.
pub async fn count_unindexed(
    db: &Database,
    collection: Collection,
    now: DateTime,
) -> Result<u64, MongoError> {
    collection
        .handle(db)
        .count_documents(unindexed_filter(collection, now))
        .await
        .map_err(mongo_err("count the unindexed documents"))
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
/// documents at server time `now`, projected to the fields Meilisearch needs.
pub async fn read_unindexed_page(
    db: &Database,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    read_page(
        db,
        collection,
        unindexed_filter(collection, now),
        after,
        limit,
        collection.read_projection(),
    )
    .await
}

/// The next page of every indexable document at server time `now`, whatever
/// its flag, projected like [`read_unindexed_page`] plus the flag. What a
/// forced reindex builds from and what an exact comparison reads.
pub async fn read_indexable_page(
    db: &Database,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    let mut projection = collection.read_projection();
    projection.insert(FLAG, 1);
    read_page(
        db,
        collection,
        indexable_filter(collection, now),
        after,
        limit,
        projection,
    )
    .await
}

/// A plain scan of ALL documents in `_id` order, with no filter: what a pass
/// reads when most of the collection is unindexed. A plain `_id` order costs
/// the server only what it returns, whereas the unindexed filter sorted by
/// `_id` costs some servers (DocumentDB-based ones) time proportional to the
/// whole collection on every page. Projected like [`read_unindexed_page`]
/// plus the flag and [`INDEXABILITY_FIELDS`], so the caller keeps what
/// [`is_unindexed`] (or [`is_indexable`]) accepts.
///
/// Read through one batched cursor (`_id > last`, sorted by `_id`), handed
/// out in pages: a cursor's `getMore`s cost about half as much as as many
/// `_id`-range queries (secantusdb: 5.5 s against 11.2 s for 52,000
/// documents). A cursor that fails (it timed out while the reader waited on a
/// slow pipeline, the server stepped down) is reopened once per page after
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
    /// A scan of `collection`, fetching `batch_size` documents per round trip.
    pub fn new(db: &Database, collection: Collection, batch_size: usize) -> Scan {
        let mut projection = collection.read_projection();
        projection.insert(FLAG, 1);
        for field in INDEXABILITY_FIELDS {
            projection.insert(field, 1);
        }
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

/// Whether `doc` matches [`unindexed_filter`] at `now`, decided in Rust
/// (`_meiliIndex: {$ne: true}` with MongoDB's rule for arrays, and
/// [`is_indexable`]). `doc` must carry the flag and [`INDEXABILITY_FIELDS`].
pub fn is_unindexed(collection: Collection, doc: &Document, now: DateTime) -> bool {
    let flagged = doc
        .get(FLAG)
        .is_some_and(|v| matches_or_contains(v, |v| matches!(v, Bson::Boolean(true))));
    !flagged && is_indexable(collection, doc, now)
}

async fn read_page(
    db: &Database,
    collection: Collection,
    mut filter: Document,
    after: Option<&Bson>,
    limit: usize,
    projection: Document,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    if let Some(after) = after {
        filter.insert("_id", doc! { "$gt": after.clone() });
    }
    collection
        .raw_handle(db)
        .find(filter)
        .sort(doc! { "_id": 1 })
        .limit(limit as i64)
        .projection(projection)
        .await
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
/// `now`. Read as a plain range and filtered in Rust ([`is_indexable`]):
/// the indexable filter sorted by `_id` costs some servers (DocumentDB-based
/// ones) time proportional to the whole collection on every page.
pub async fn indexable_ids_page(
    db: &Database,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<IdsPage, MongoError> {
    let pk = collection.primary_key();
    let mut projection = doc! { "_id": 1, pk: 1, FLAG: 1 };
    for field in INDEXABILITY_FIELDS {
        projection.insert(field, 1);
    }
    let docs = read_page(db, collection, doc! {}, after, limit, projection).await?;
    let last = docs.len() < limit;
    let after = docs.last().and_then(raw_id);
    let mut entries = Vec::new();
    for raw in &docs {
        let d = parse(raw)?;
        if is_indexable(collection, &d, now) {
            entries.push(IdEntry {
                mongo_id: d.get("_id").cloned().unwrap_or(Bson::Null),
                meili_id: meili_id(collection, &d),
                flagged: d.get_bool(FLAG).unwrap_or(false),
            });
        }
    }
    Ok(IdsPage {
        entries,
        after,
        last,
    })
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
    collection: Collection,
    meili_ids: &[String],
    now: DateTime,
) -> Result<HashSet<String>, MongoError> {
    let pk = collection.primary_key();
    let mut projection = doc! { pk: 1 };
    for field in INDEXABILITY_FIELDS {
        projection.insert(field, 1);
    }
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
            .await
            .map_err(mongo_err("read by primary key"))?
            .try_collect()
            .await
            .map_err(mongo_err("read by primary key"))?;
        claimed.extend(
            found
                .iter()
                .filter(|d| is_indexable(collection, d, now))
                .filter_map(|d| meili_id(collection, d)),
        );
    }
    Ok(claimed)
}

/// One version of one document: its `_id` and the exact `updatedAt` value
/// read with it (`None`: it had no `updatedAt`).
#[derive(Clone, Debug, PartialEq)]
pub struct DocVersion {
    pub id: Bson,
    pub updated_at: Option<Bson>,
}

impl DocVersion {
    /// The version of a document as read (it must have been read with its
    /// `_id` and `updatedAt`).
    pub fn of(doc: &Document) -> DocVersion {
        DocVersion {
            id: doc.get("_id").cloned().unwrap_or(Bson::Null),
            updated_at: doc.get(VERSION_FIELD).cloned(),
        }
    }

    /// The filter that matches this document only while it still has this
    /// version: `_id` and `updatedAt` equal to the values read. A `null`
    /// must be matched by type (`updatedAt: null` would also match a
    /// document whose `updatedAt` was since removed).
    fn filter(&self) -> Document {
        let version = match &self.updated_at {
            None => Bson::Document(doc! { "$exists": false }),
            Some(Bson::Null) => Bson::Document(doc! { "$type": "null" }),
            Some(value) => Bson::Document(doc! { "$eq": value.clone() }),
        };
        doc! { "_id": self.id.clone(), VERSION_FIELD: version }
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

/// Sets the flag of each document that still has the version given and is
/// indexable at server time `now`: one statement per document, filter `_id`,
/// the exact `updatedAt` read and [`indexable_filter`]. Returns how many
/// statements matched: fewer than `versions.len()` means some document was
/// changed, deleted or made unindexable since it was read (those keep the
/// flag the application gave them). Fenced by the guard before each command.
pub async fn set_flags_if_unchanged(
    db: &Database,
    collection: Collection,
    versions: &[DocVersion],
    now: DateTime,
    guard: &Guard,
) -> Result<Updated, MongoError> {
    let indexable = indexable_filter(collection, now);
    let statements = versions
        .iter()
        .map(|version| {
            let mut filter = version.filter();
            filter.extend(indexable.clone());
            doc! { "q": filter, "u": { "$set": { FLAG: true } } }
        })
        .collect();
    update_each(db, collection, statements, "set flags", guard).await
}

/// `_id`s per `$in` list: a few round trips more for a micro-batch, and no
/// list long enough to cost more than it saves (on some servers the cost of
/// matching an `$in` list grows faster than its length).
const IDS_PER_QUERY: usize = 100;

/// Which of the given documents carry `_meiliIndex: true` now (their
/// `_id`s): queries by `_id` list, the flag in the filter. Follow mode
/// asks this just before it sends a micro-batch, to leave out the versions
/// LibreChat's save hook has indexed meanwhile.
pub async fn flagged_among(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
) -> Result<Vec<Bson>, MongoError> {
    let found = find_by_id_lists(
        db,
        collection,
        ids,
        doc! { FLAG: true },
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
        .map(|id| doc! { "q": { "_id": id.clone(), FLAG: true }, "u": { "$set": { FLAG: false } } })
        .collect();
    Ok(
        update_each(db, collection, statements, "clear flags", guard)
            .await?
            .modified,
    )
}

/// Runs update statements as raw `update` commands of at most
/// [`STATEMENTS_PER_COMMAND`] statements (unordered), checking the guard
/// before each command. A write error or write-concern error in a reply is
/// an error: no flag write is silently lost.
async fn update_each(
    db: &Database,
    collection: Collection,
    statements: Vec<Document>,
    what: &str,
    guard: &Guard,
) -> Result<Updated, MongoError> {
    let mut total = Updated::default();
    let mut statements = statements.into_iter();
    loop {
        let chunk: Vec<Document> = statements.by_ref().take(STATEMENTS_PER_COMMAND).collect();
        if chunk.is_empty() {
            return Ok(total);
        }
        let command = doc! { "update": collection.name(), "updates": chunk, "ordered": false };
        let updated = flag_retry::with_retries(what, guard, || async {
            let reply = db
                .run_command(command.clone())
                .await
                .map_err(attempt_err(what))?;
            update_reply(&reply, what)
        })
        .await?;
        total.matched += updated.matched;
        total.modified += updated.modified;
    }
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
/// their `_id`, version, primary key, flag and the fields [`is_indexable`]
/// reads — what an acknowledgement that did not match everything reads back
/// to learn what happened. Only the wanted documents are held.
pub async fn read_states(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    how: ReadBack,
) -> Result<Vec<Document>, MongoError> {
    let mut projection = doc! { "_id": 1, VERSION_FIELD: 1, FLAG: 1, collection.primary_key(): 1 };
    for field in INDEXABILITY_FIELDS {
        projection.insert(field, 1);
    }
    read_kept(db, collection, ids, how, projection).await
}

/// Like [`read_states`], with the whole read projection (what Meilisearch
/// gets) besides: what a refused batch, whose NDJSON was dropped once
/// enqueued, is rebuilt from to isolate the documents Meilisearch rejects.
pub async fn read_documents(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    how: ReadBack,
) -> Result<Vec<Document>, MongoError> {
    let mut projection = collection.read_projection();
    projection.insert(FLAG, 1);
    for field in INDEXABILITY_FIELDS {
        projection.insert(field, 1);
    }
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

/// Clears the flag of every document that is not indexable at `now` (they
/// must not be in Meilisearch, so they cannot be "indexed").
pub async fn clear_flags_of_unindexable(
    db: &Database,
    collection: Collection,
    now: DateTime,
    guard: &Guard,
) -> Result<u64, MongoError> {
    let filter = doc! { FLAG: true, "$nor": [ indexable_filter(collection, now) ] };
    let handle = collection.handle(db);
    flag_retry::with_retries("clear flags", guard, || async {
        let result = handle
            .update_many(filter.clone(), doc! { "$set": { FLAG: false } })
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
        let result = handle
            .update_many(update_filter.clone(), doc! { "$set": { FLAG: false } })
            .await
            .map_err(attempt_err("reset flags"))?;
        Ok(result.modified_count)
    })
    .await?;
    Ok((cleared, upper))
}

/// The Meilisearch primary-key value of a document, as sent.
pub fn meili_id(collection: Collection, doc: &Document) -> Option<String> {
    let value = bson_to_json(doc.get(collection.primary_key())?);
    let id = crate::meili::id_string(&value)?;
    Some(match collection {
        Collection::Conversations => id.replace('|', "--"),
        Collection::Messages => id,
    })
}

/// The Meilisearch document for a MongoDB document (docs/design.md §3.2): only the
/// sent fields, absent stays absent, `content` parts become `text`, and `|`
/// in `conversationId` becomes `--`.
pub fn to_meili(collection: Collection, doc: &Document) -> Map<String, Value> {
    let mut out = Map::new();
    for field in collection.fields() {
        if let Some(value) = doc.get(*field) {
            out.insert((*field).to_string(), bson_to_json(value));
        }
    }
    if collection == Collection::Messages {
        if let Some(Bson::Array(parts)) = doc.get("content") {
            out.insert("text".into(), Value::String(text_of_parts(parts)));
        }
    }
    if let Some(Value::String(id)) = out.get_mut("conversationId") {
        if id.contains('|') {
            *id = id.replace('|', "--");
        }
    }
    out
}

/// The parts of type `text`, joined by a space. A part's `text` is a string,
/// or (older LibreChat) `{ value: string }`.
fn text_of_parts(parts: &[Bson]) -> String {
    parts
        .iter()
        .filter_map(|part| {
            let part = part.as_document()?;
            if part.get_str("type").ok()? != "text" {
                return None;
            }
            match part.get("text")? {
                Bson::String(s) => Some(s.as_str()),
                Bson::Document(d) => d.get_str("value").ok(),
                _ => None,
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// BSON → JSON as Meilisearch should see it: plain values, ObjectIds as hex.
fn bson_to_json(value: &Bson) -> Value {
    match value {
        Bson::ObjectId(id) => Value::String(id.to_hex()),
        Bson::Array(items) => Value::Array(items.iter().map(bson_to_json).collect()),
        Bson::Document(d) => Value::Object(
            d.iter()
                .map(|(k, v)| (k.clone(), bson_to_json(v)))
                .collect(),
        ),
        other => other.clone().into_relaxed_extjson(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_content_parts_become_text_and_content_is_not_sent() {
        let doc = doc! {
            "_id": 1, "messageId": "m1", "conversationId": "a|b|c", "user": "u", "sender": "GPT",
            "text": "stale", "content": [
                { "type": "text", "text": "hello" },
                { "type": "image_url", "image_url": "x" },
                { "type": "text", "text": { "value": "world" } },
            ],
            "isTemporary": false,
        };
        let shaped = to_meili(Collection::Messages, &doc);
        assert_eq!(
            Value::Object(shaped),
            json!({"messageId": "m1", "conversationId": "a--b--c", "user": "u", "sender": "GPT", "text": "hello world"})
        );
    }

    #[test]
    fn absent_fields_stay_absent() {
        let doc = doc! { "_id": 1, "messageId": "m1", "user": "u" };
        let shaped = to_meili(Collection::Messages, &doc);
        assert_eq!(
            Value::Object(shaped),
            json!({"messageId": "m1", "user": "u"})
        );
        let doc = doc! { "_id": 1, "conversationId": "c|1", "user": "u", "tags": ["a", "b"], "model": "x" };
        let shaped = to_meili(Collection::Conversations, &doc);
        assert_eq!(
            Value::Object(shaped),
            json!({"conversationId": "c--1", "user": "u", "tags": ["a", "b"]})
        );
    }

    #[test]
    fn meili_ids_are_shaped_like_the_documents() {
        let doc = doc! { "conversationId": "x|y" };
        assert_eq!(
            meili_id(Collection::Conversations, &doc).as_deref(),
            Some("x--y")
        );
        let doc = doc! { "messageId": 42_i64 };
        assert_eq!(meili_id(Collection::Messages, &doc).as_deref(), Some("42"));
        assert_eq!(meili_id(Collection::Messages, &doc! {}), None);
    }

    #[test]
    fn indexability_follows_mongodb_matching_rules() {
        let now = DateTime::from_millis(1_000_000);
        let before = DateTime::from_millis(999_999);
        let after = DateTime::from_millis(1_000_001);
        let m = |d: Document| is_indexable(Collection::Messages, &d, now);
        let c = |d: Document| is_indexable(Collection::Conversations, &d, now);
        assert!(m(doc! { "user": "u" }));
        // user: absent, null, empty, or an array holding null or "".
        assert!(!m(doc! {}));
        assert!(!m(doc! { "user": Bson::Null }));
        assert!(!m(doc! { "user": "" }));
        assert!(!m(doc! { "user": ["a", ""] }));
        assert!(!m(doc! { "user": [Bson::Null] }));
        assert!(m(doc! { "user": ["a"] }));
        assert!(m(doc! { "user": Bson::Array(vec![]) }));
        assert!(m(doc! { "user": 5 }), "any other value is a user");
        // isTemporary: only true (or an array holding true).
        assert!(!m(doc! { "user": "u", "isTemporary": true }));
        assert!(!m(doc! { "user": "u", "isTemporary": [true] }));
        assert!(m(doc! { "user": "u", "isTemporary": false }));
        assert!(m(doc! { "user": "u", "isTemporary": 1 }));
        assert!(m(doc! { "user": "u", "isTemporary": "true" }));
        assert!(m(doc! { "user": "u", "isTemporary": Bson::Null }));
        // expiredAt: a date at or before now expires; anything else never does.
        assert!(!m(doc! { "user": "u", "expiredAt": before }));
        assert!(!m(doc! { "user": "u", "expiredAt": now }));
        assert!(m(doc! { "user": "u", "expiredAt": after }));
        assert!(m(doc! { "user": "u", "expiredAt": Bson::Null }));
        assert!(m(doc! { "user": "u", "expiredAt": "2001-01-01" }));
        assert!(m(doc! { "user": "u", "expiredAt": 5 }));
        assert!(!m(doc! { "user": "u", "expiredAt": [before] }));
        assert!(m(doc! { "user": "u", "expiredAt": [after, 3] }));
        assert!(m(doc! { "user": "u", "expiredAt": Bson::Array(vec![]) }));
        // unfinished: messages only.
        assert!(!m(doc! { "user": "u", "unfinished": true }));
        assert!(m(doc! { "user": "u", "unfinished": false }));
        assert!(c(doc! { "user": "u", "unfinished": true }));
        assert!(!c(doc! { "user": "u", "isTemporary": true }));
    }

    #[test]
    fn unindexed_in_rust_means_unflagged_and_indexable() {
        let now = DateTime::from_millis(1_000);
        let m = Collection::Messages;
        assert!(is_unindexed(m, &doc! { "_id": 1, "user": "u" }, now));
        assert!(is_unindexed(
            m,
            &doc! { "_id": 1, "user": "u", FLAG: false },
            now
        ));
        assert!(!is_unindexed(
            m,
            &doc! { "_id": 1, "user": "u", FLAG: true },
            now
        ));
        assert!(!is_unindexed(
            m,
            &doc! { "_id": 1, "user": "u", FLAG: [true] },
            now
        ));
        assert!(!is_unindexed(m, &doc! { "_id": 1, "user": "" }, now));
        assert!(!is_unindexed(
            m,
            &doc! { "_id": 1, "user": "u", "unfinished": true },
            now
        ));
    }

    #[test]
    fn a_version_filter_matches_the_exact_value_read() {
        let at = DateTime::from_millis(5);
        let v = DocVersion::of(&doc! { "_id": 1, "updatedAt": at, "text": "x" });
        assert_eq!(v.filter(), doc! { "_id": 1, "updatedAt": { "$eq": at } });
        let v = DocVersion::of(&doc! { "_id": 2 });
        assert_eq!(
            v.filter(),
            doc! { "_id": 2, "updatedAt": { "$exists": false } }
        );
        let v = DocVersion::of(&doc! { "_id": 3, "updatedAt": Bson::Null });
        assert_eq!(
            v.filter(),
            doc! { "_id": 3, "updatedAt": { "$type": "null" } }
        );
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

    #[test]
    fn content_without_text_parts_gives_empty_text() {
        let doc = doc! { "messageId": "m", "content": [ { "type": "think", "think": "x" } ] };
        let shaped = to_meili(Collection::Messages, &doc);
        assert_eq!(shaped["text"], json!(""));
    }
}
