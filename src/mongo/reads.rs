//! Documents read by `_id`: the unindexed backlog a page at a time (hinted
//! to LibreChat's sync index when it is whole), every indexable document,
//! plain scans of a whole collection, pages of ids for comparing id sets,
//! the expired and the excluded documents still to remove, and which
//! collections keep change-stream pre-images.

use std::collections::HashSet;

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, DateTime, Document, RawDocumentBuf};
use mongodb::options::Hint;
use mongodb::{Collection as MongoCollection, Database};

use super::error::{command_code, failed, mongo_err, short, MongoError, NAMESPACE_NOT_FOUND};
use super::read_back::find_in_lists;
use super::{
    after_id, handle, judging, meili_id, read_all, state_projection, sync_projection,
    unindexed_filter_in, Backlog, Collection, FLAG, READ_TIME_LIMIT,
};
use crate::librechat::markers;
use crate::librechat::{projection, searchable, Rules};

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
    let projection = sync_projection(rules, collection);
    let hint = backlog_hint(db, collection, backlog).await?;
    let filter = unindexed_filter_in(rules, collection, now, backlog);
    read_page(db, collection, filter, after, limit, projection, hint).await
}

/// The hint of a query over `backlog`'s filter ([`unindexed_filter_in`]):
/// LibreChat's backlog index ([`backlog_index`]) for the unflagged ones,
/// none for [`Backlog::Any`] — its other branch (flagged at another schema
/// version) would walk every flagged entry of that index, so it is left to
/// the server's planner. What the backlog's reads and the gauge's count
/// both name.
pub(super) async fn backlog_hint(
    db: &Database,
    collection: Collection,
    backlog: Backlog,
) -> Result<Option<Hint>, MongoError> {
    Ok(match backlog {
        Backlog::Unflagged => backlog_index(db, collection).await?.map(Hint::Name),
        Backlog::Any => None,
    })
}

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
/// [`count_unflagged`](super::count_unflagged) names it for the same reason. An index dropped
/// between this look and the read fails that read (the hint names nothing),
/// and the next run reads without it.
pub async fn backlog_index(
    db: &Database,
    collection: Collection,
) -> Result<Option<String>, MongoError> {
    let handle = handle(db, collection);
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
pub(crate) async fn read_indexable_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    let filter = searchable::filter(rules, collection, now);
    let projection = sync_projection(rules, collection);
    read_page(db, collection, filter, after, limit, projection, None).await
}

/// Documents a [`Scan`] fetches per round trip. The driver reads a reply
/// into a buffer and copies its payload out before freeing the buffer, so a
/// reply costs twice its size for a moment, beside the page being handed out:
/// at a page's 10,000 documents a round trip (~6 MB of LibreChat messages)
/// each `getMore` held ~12 MB for a moment, and a 100k `once` peaked 3.7 MiB
/// higher than with a thousand. A thousand keeps a reply near 0.6 MB, and
/// the scan read no slower (200k: 6.2 s of reading).
pub(crate) const SCAN_ROUND_TRIP_DOCS: usize = 1_000;

/// A plain scan of ALL documents in `_id` order, with no filter: what a pass
/// reads when most of the collection is unindexed. The unindexed filter
/// sorted by `_id` costs some servers (DocumentDB-based ones) time
/// proportional to the whole collection on every page; there any
/// `_id`-sorted query sorts what it reads when it opens, so one cursor
/// sorts once. Projected like [`read_unindexed_page`],
/// so the caller keeps what [`is_unindexed`](super::is_unindexed) (or
/// `searchable::is_searchable`) accepts.
///
/// Read through one batched cursor (`_id > last`, sorted by `_id`), handed
/// out in pages: a cursor's `getMore`s cost about half as much as as many
/// `_id`-range queries (secantusdb: 5.5 s against 11.2 s for 52,000
/// documents). A cursor that fails (it timed out while the reader waited on a
/// slow pipeline, the server stepped down) is reopened once per `next_page` after
/// the last `_id` handed out, so nothing is skipped or read twice.
pub(crate) struct Scan {
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
    pub(crate) fn new(
        db: &Database,
        rules: &Rules,
        collection: Collection,
        page_size: usize,
    ) -> Scan {
        Scan {
            handle: db.collection(collection.name()),
            projection: sync_projection(rules, collection),
            batch_size: page_size.clamp(1, SCAN_ROUND_TRIP_DOCS) as u32,
            cursor: None,
            after: None,
            ended: false,
        }
    }

    /// The next (up to) `limit` documents; fewer only at the end.
    pub(crate) async fn next_page(
        &mut self,
        limit: usize,
    ) -> Result<Vec<RawDocumentBuf>, MongoError> {
        let mut page = Vec::with_capacity(limit.min(10_000));
        let mut reopened = false;
        while page.len() < limit && !self.ended {
            if self.cursor.is_none() {
                let find = self
                    .handle
                    .find(after_id(doc! {}, self.after.as_ref()))
                    .sort(doc! { "_id": 1 })
                    .projection(self.projection.clone())
                    .batch_size(self.batch_size)
                    .max_time(READ_TIME_LIMIT);
                self.cursor = Some(find.await.map_err(mongo_err("read"))?);
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

/// A document of a raw page, parsed: one at a time, while it is shaped.
pub(crate) fn parse(raw: &RawDocumentBuf) -> Result<Document, MongoError> {
    let invalid = |e| format!("a document MongoDB returned is not valid BSON: {e}");
    raw.to_document()
        .map_err(|e| MongoError::new("read", invalid(e)))
}

/// The `_id` of a raw document (where the next page starts).
pub fn raw_id(raw: &RawDocumentBuf) -> Option<Bson> {
    let id = raw.get("_id").ok().flatten()?;
    Bson::try_from(id).ok()
}

/// The next `limit` documents of `filter` after `after` (by `_id`), kept
/// as raw BSON: a page of 10,000 documents kept raw takes about their wire
/// size, parsed into `Document`s several times that (an ordered map and a
/// `String` per field).
async fn read_page(
    db: &Database,
    collection: Collection,
    filter: Document,
    after: Option<&Bson>,
    limit: usize,
    projection: Document,
    hint: Option<Hint>,
) -> Result<Vec<RawDocumentBuf>, MongoError> {
    let handle = db.collection(collection.name());
    let mut find = handle
        .find(after_id(filter, after))
        .sort(doc! { "_id": 1 })
        .limit(limit as i64)
        .projection(projection);
    if let Some(hint) = hint {
        find = find.hint(hint);
    }
    read_all(find, "read").await
}

/// One indexable document's identity, for comparing id sets.
#[derive(Clone, Debug)]
pub(crate) struct IdEntry {
    pub(crate) mongo_id: Bson,
    /// The Meilisearch primary-key value, when the document has one.
    pub(crate) meili_id: Option<String>,
    pub(crate) flagged: bool,
}

/// One page of [`indexable_ids_page`].
#[derive(Debug)]
pub(crate) struct IdsPage {
    /// The indexable documents of the page.
    pub(crate) entries: Vec<IdEntry>,
    /// The last `_id` read (indexable or not): where the next page starts.
    pub(crate) after: Option<Bson>,
    /// Whether the collection ends with this page.
    pub(crate) last: bool,
}

/// The next `_id` range page (by ascending `_id`, after `after`, `limit`
/// documents read) with the ids of its indexable documents at server time
/// `now`. Read as a plain range and filtered in Rust (`is_searchable`):
/// the indexable filter sorted by `_id` costs some servers (DocumentDB-based
/// ones) time proportional to the whole collection on every page.
pub(crate) async fn indexable_ids_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<IdsPage, MongoError> {
    let pk = collection.primary_key();
    let projection = judging(doc! { "_id": 1, pk: 1 }, rules, collection);
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
pub(crate) async fn collections_with_pre_images(
    db: &Database,
) -> Result<Vec<Collection>, MongoError> {
    let names: Vec<&str> = Collection::ALL.iter().map(|c| c.name()).collect();
    let command = doc! { "listCollections": 1, "filter": { "name": { "$in": names } } };
    let reply = db.run_command(command).await;
    let reply = reply.map_err(|e| failed("listCollections", &e))?;
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
        .filter_map(|info| Collection::named(info.get_str("name").ok()?))
        .collect())
}

/// Of the given Meilisearch ids, those that an indexable document of the
/// collection has now (server time `now`), found by primary key (each
/// id's stored spellings, [`projection::stored_ids`]).
pub(crate) async fn indexable_meili_ids_among(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    meili_ids: &[String],
    now: DateTime,
) -> Result<HashSet<String>, MongoError> {
    let pk = collection.primary_key();
    let projection = judging(doc! { pk: 1 }, rules, collection);
    let values: Vec<Bson> = meili_ids
        .iter()
        .flat_map(|id| projection::stored_ids(collection, id))
        .map(Bson::String)
        .collect();
    let what = "read by primary key";
    let found = find_in_lists(db, collection, pk, &values, doc! {}, projection, what).await?;
    Ok(found
        .iter()
        .filter(|d| searchable::is_searchable(rules, collection, d, now))
        .filter_map(|d| meili_id(collection, d))
        .collect())
}

/// The next `limit` excluded documents pending cleanup after `after` (by
/// `_id`), with their `_id` and primary key.
pub(crate) async fn pending_cleanup_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<Document>, MongoError> {
    let Some(path) = rules.exclusion_path(collection) else {
        return Ok(Vec::new());
    };
    let handle = handle(db, collection);
    let find = handle
        .find(after_id(markers::pending_cleanup_filter(path), after))
        .sort(doc! { "_id": 1 })
        .limit(limit as i64)
        .projection(doc! { "_id": 1, collection.primary_key(): 1 });
    read_all(find, "read the excluded documents to clean up").await
}

/// The next page (by `_id`, after `after`) of the documents whose expiry
/// has passed at `now` and that may still be in Meilisearch by their
/// markers (`markers::may_be_indexed_filter`), with their version, primary
/// key and the fields that judge them: what the expiry sweep removes.
/// LibreChat's TTL index on `expiredAt` serves the range, and it holds only
/// the documents expired and not yet deleted by MongoDB's TTL monitor.
pub(crate) async fn expired_page(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<Document>, MongoError> {
    let mut filter = searchable::expired_filter(now);
    filter.extend(markers::may_be_indexed_filter());
    let projection = state_projection(rules, collection);
    let page = read_page(db, collection, filter, after, limit, projection, None).await?;
    page.iter().map(parse).collect()
}

/// The earliest expiry of a document that may be in Meilisearch by its
/// markers, later than `after` when given, passed or not: when the next
/// one must leave (one already passed: at once). Only a single date counts
/// ([`searchable::expiry_after_filter`]). One document, sorted by
/// `expiredAt` — LibreChat's TTL index on it serves the query.
pub async fn next_expiry(
    db: &Database,
    collection: Collection,
    after: Option<DateTime>,
) -> Result<Option<DateTime>, MongoError> {
    let mut filter = searchable::expiry_after_filter(after);
    filter.extend(markers::may_be_indexed_filter());
    let next = handle(db, collection)
        .find_one(filter)
        .sort(doc! { searchable::EXPIRY: 1 })
        .projection(doc! { "_id": 0, searchable::EXPIRY: 1 })
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("read the next expiry"))?;
    Ok(next.and_then(|d| d.get_datetime(searchable::EXPIRY).ok().copied()))
}
