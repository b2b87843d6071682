//! The chat collections in MongoDB (`messages`, `conversations`): which
//! documents are indexable, the counts the plan needs, paging by `_id`, the
//! document → Meilisearch shape (DESIGN.md §2), and every write of the
//! `_meiliIndex` flag.
//!
//! Queries use the server's clock (`hello.localTime`) for expiry and for the
//! acknowledgement filter, never `$$NOW`, and page by `_id` range instead of
//! holding a cursor or sending long `$in` lists. Every flag write checks the
//! lease [`Guard`] first and never touches `updatedAt`.

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::error::ErrorKind;
use mongodb::{Collection as MongoCollection, Database};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::lease::{Guard, LeaseLost};

/// The flag LibreChat keeps on each document: true = Meilisearch has this version.
pub const FLAG: &str = "_meiliIndex";

/// How many `_id`s one flag-clearing `$in` may carry (long `$in` lists are slow).
const CLEAR_CHUNK: usize = 200;

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

    /// What to read from MongoDB to build the Meilisearch document.
    fn read_projection(self) -> Document {
        let mut projection = doc! { "_id": 1 };
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

/// Documents that belong in Meilisearch at server time `now` (DESIGN.md §2).
pub fn indexable_filter(collection: Collection, now: DateTime) -> Document {
    let mut filter = doc! {
        "user": { "$nin": [Bson::Null, ""] },
        "isTemporary": { "$ne": true },
        "$or": [ { "expiredAt": Bson::Null }, { "expiredAt": { "$gt": now } } ],
    };
    if collection == Collection::Messages {
        filter.insert("unfinished", doc! { "$ne": true });
    }
    filter
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
) -> Result<Vec<Document>, MongoError> {
    read_page(
        db,
        collection,
        unindexed_filter(collection, now),
        after,
        limit,
    )
    .await
}

/// The next page of every indexable document at server time `now`, whatever
/// its flag — only those changed at or after `changed_since` when given (a
/// document without `updatedAt` has not changed) — projected like
/// [`read_unindexed_page`]. What a forced reindex builds from.
pub async fn read_indexable_page(
    db: &Database,
    collection: Collection,
    now: DateTime,
    changed_since: Option<DateTime>,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<Document>, MongoError> {
    let mut filter = indexable_filter(collection, now);
    if let Some(since) = changed_since {
        filter.insert("updatedAt", doc! { "$gte": since });
    }
    read_page(db, collection, filter, after, limit).await
}

async fn read_page(
    db: &Database,
    collection: Collection,
    mut filter: Document,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<Document>, MongoError> {
    if let Some(after) = after {
        filter.insert("_id", doc! { "$gt": after.clone() });
    }
    collection
        .handle(db)
        .find(filter)
        .sort(doc! { "_id": 1 })
        .limit(limit as i64)
        .projection(collection.read_projection())
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

/// The next page of indexable documents' ids (by ascending `_id`).
pub async fn indexable_ids_page(
    db: &Database,
    collection: Collection,
    now: DateTime,
    after: Option<&Bson>,
    limit: usize,
) -> Result<Vec<IdEntry>, MongoError> {
    let mut filter = indexable_filter(collection, now);
    if let Some(after) = after {
        filter.insert("_id", doc! { "$gt": after.clone() });
    }
    let pk = collection.primary_key();
    let docs: Vec<Document> = collection
        .handle(db)
        .find(filter)
        .sort(doc! { "_id": 1 })
        .limit(limit as i64)
        .projection(doc! { "_id": 1, pk: 1, FLAG: 1 })
        .await
        .map_err(mongo_err("read ids"))?
        .try_collect()
        .await
        .map_err(mongo_err("read ids"))?;
    Ok(docs
        .into_iter()
        .map(|d| IdEntry {
            mongo_id: d.get("_id").cloned().unwrap_or(Bson::Null),
            meili_id: meili_id(collection, &d),
            flagged: d.get_bool(FLAG).unwrap_or(false),
        })
        .collect())
}

/// Acknowledges one sent range: sets the flag on the documents with `_id` in
/// `[first, last]` that still match the read's filter and were not changed
/// since the read (`updatedAt ≤ read_time`, or no `updatedAt`). One update.
pub async fn ack_range(
    db: &Database,
    collection: Collection,
    read_time: DateTime,
    first: &Bson,
    last: &Bson,
    guard: &Guard,
) -> Result<u64, MongoError> {
    flag_range(db, collection, read_time, read_time, first, last, guard).await
}

/// Sets the flag on the unflagged documents with `_id` in `[first, last]`
/// that are indexable at `now` and unchanged since `unchanged_since`
/// (`updatedAt ≤ unchanged_since`, or no `updatedAt`): the version
/// Meilisearch holds is theirs. One update, fenced by the guard.
pub async fn flag_range(
    db: &Database,
    collection: Collection,
    now: DateTime,
    unchanged_since: DateTime,
    first: &Bson,
    last: &Bson,
    guard: &Guard,
) -> Result<u64, MongoError> {
    let filter = doc! {
        "$and": [
            unindexed_filter(collection, now),
            { "_id": { "$gte": first.clone(), "$lte": last.clone() } },
            { "$or": [ { "updatedAt": { "$lte": unchanged_since } }, { "updatedAt": { "$exists": false } } ] },
        ]
    };
    guard.check()?;
    let result = collection
        .handle(db)
        .update_many(filter, doc! { "$set": { FLAG: true } })
        .await
        .map_err(mongo_err("set flags"))?;
    Ok(result.modified_count)
}

/// Clears the flag of the given documents, in short `$in` chunks.
pub async fn clear_flags(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    guard: &Guard,
) -> Result<u64, MongoError> {
    let mut cleared = 0;
    for chunk in ids.chunks(CLEAR_CHUNK) {
        guard.check()?;
        let result = collection
            .handle(db)
            .update_many(
                doc! { "_id": { "$in": chunk.to_vec() }, FLAG: true },
                doc! { "$set": { FLAG: false } },
            )
            .await
            .map_err(mongo_err("clear flags"))?;
        cleared += result.modified_count;
    }
    Ok(cleared)
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
    guard.check()?;
    let result = collection
        .handle(db)
        .update_many(filter, doc! { "$set": { FLAG: false } })
        .await
        .map_err(mongo_err("clear flags"))?;
    Ok(result.modified_count)
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
    guard.check()?;
    let result = handle
        .update_many(update_filter, doc! { "$set": { FLAG: false } })
        .await
        .map_err(mongo_err("reset flags"))?;
    Ok((result.modified_count, upper))
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

/// The Meilisearch document for a MongoDB document (DESIGN.md §2): only the
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
    fn content_without_text_parts_gives_empty_text() {
        let doc = doc! { "messageId": "m", "content": [ { "type": "think", "think": "x" } ] };
        let shaped = to_meili(Collection::Messages, &doc);
        assert_eq!(shaped["text"], json!(""));
    }
}
