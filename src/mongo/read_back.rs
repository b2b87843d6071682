//! Documents already in hand read again by `_id` (a run of one BSON type,
//! by range or by `_id` list): what an acknowledgement that did not match
//! every statement reads back to learn what happened, what a refused batch
//! is rebuilt from, and which documents of a follow micro-batch LibreChat's
//! hook has flagged meanwhile.

use std::collections::HashSet;

use mongodb::bson::{doc, Bson, Document};
use mongodb::Database;

use super::error::MongoError;
use super::{handle, read_all, state_projection, sync_projection, Collection};
use crate::librechat::markers;
use crate::librechat::Rules;

/// `_id`s per `$in` list: a few round trips more for a micro-batch, and no
/// list long enough to cost more than it saves (on some servers the cost of
/// matching an `$in` list grows faster than its length).
pub(super) const IDS_PER_QUERY: usize = 100;

/// Which of the given documents are processed now (flagged at the current
/// schema version; their `_id`s): queries by `_id` list, the markers in the
/// filter. Follow mode asks this just before it sends a micro-batch, to
/// leave out the versions LibreChat's save hook has indexed meanwhile.
pub(crate) async fn processed_among(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    ids: &[Bson],
) -> Result<Vec<Bson>, MongoError> {
    let (filter, projection) = (markers::processed_filter(rules), doc! { "_id": 1 });
    let found = find_in_lists(db, collection, "_id", ids, filter, projection, "read flags").await?;
    Ok(found
        .into_iter()
        .filter_map(|mut doc| doc.remove("_id"))
        .collect())
}

/// The documents whose `field` is one of `values` that also match
/// `filter`, by `$in` lists of at most [`IDS_PER_QUERY`].
pub(super) async fn find_in_lists(
    db: &Database,
    collection: Collection,
    field: &str,
    values: &[Bson],
    filter: Document,
    projection: Document,
    what: &'static str,
) -> Result<Vec<Document>, MongoError> {
    let handle = handle(db, collection);
    let mut found = Vec::new();
    for chunk in values.chunks(IDS_PER_QUERY) {
        let mut query = doc! { field: { "$in": chunk } };
        query.extend(filter.clone());
        let find = handle.find(query).projection(projection.clone());
        found.extend(read_all(find, what).await?);
    }
    Ok(found)
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
    let projection = state_projection(rules, collection);
    read_kept(db, collection, ids, how, projection).await
}

/// Like [`read_states`], with the whole read projection (what Meilisearch
/// gets) besides: what a refused batch, whose NDJSON was dropped once
/// enqueued, is rebuilt from to isolate the documents Meilisearch rejects.
pub(crate) async fn read_documents(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    ids: &[Bson],
    how: ReadBack,
) -> Result<Vec<Document>, MongoError> {
    read_kept(db, collection, ids, how, sync_projection(rules, collection)).await
}

/// The documents of `ids` (one run) as [`ReadBack`] finds them: by `_id`
/// lists, or by `_id` range pages keeping only the wanted ones.
async fn read_kept(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    how: ReadBack,
    projection: Document,
) -> Result<Vec<Document>, MongoError> {
    const PAGE: i64 = 10_000;
    let (Some(first), Some(last)) = (ids.first(), ids.last()) else {
        return Ok(Vec::new());
    };
    if how == ReadBack::Ids {
        return find_in_lists(db, collection, "_id", ids, doc! {}, projection, "read back").await;
    }
    let wanted: HashSet<String> = ids.iter().map(id_key).collect();
    let handle = handle(db, collection);
    let mut kept = Vec::new();
    let mut lower = doc! { "$gte": first.clone() };
    loop {
        lower.insert("$lte", last.clone());
        let find = handle
            .find(doc! { "_id": lower.clone() })
            .sort(doc! { "_id": 1 })
            .limit(PAGE)
            .projection(projection.clone());
        let page = read_all(find, "read back").await?;
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
