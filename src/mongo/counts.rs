//! Counts over the chat collections: the plan's counts (one aggregation
//! that partitions the indexable documents), the backlog gauge's count of
//! the unflagged ones, the cheap estimate a comparison sizes its memory by,
//! and LibreChat's own progress counts (what its `getSyncProgress()` reports).

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, DateTime};
use mongodb::Database;
use serde::Serialize;

use super::error::{mongo_err, MongoError};
use super::reads::backlog_hint;
use super::{count_field, handle, unindexed_filter_in, Backlog, Collection, FLAG, READ_TIME_LIMIT};
use crate::librechat::markers::{self, ProgressFilters, SCHEMA_VERSION};
use crate::librechat::{searchable, Rules};

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
    pub(crate) flagged: u64,
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
    let handle = handle(db, collection);
    let aggregate = handle.aggregate(pipeline).max_time(READ_TIME_LIMIT);
    let mut rows = aggregate.await.map_err(mongo_err("count"))?;
    let row = rows.try_next().await.map_err(mongo_err("count"))?;
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
/// sync index when it holds every document ([`backlog_hint`]), so the
/// server reads only the backlog's own entries — where [`counts`] reads
/// every indexable document. For the backlog gauge, which every replica
/// refreshes after every run: it needs no partition, so it need not pay for
/// one. Not the whole unprocessed condition: its other branch (flagged at
/// another schema version) reads every flagged document on MongoDB and
/// DocumentDB alike, on every replica after every run (docs/benchmarks.md,
/// "The backlog gauge"); the plan counts those documents, and a run
/// sends them.
pub async fn count_unflagged(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
) -> Result<u64, MongoError> {
    let backlog = Backlog::Unflagged;
    let filter = unindexed_filter_in(rules, collection, now, backlog);
    let handle = handle(db, collection);
    let mut count = handle.count_documents(filter).max_time(READ_TIME_LIMIT);
    if let Some(hint) = backlog_hint(db, collection, backlog).await? {
        count = count.hint(hint);
    }
    let what = "count the unflagged documents";
    count.await.map_err(mongo_err(what))
}

/// The collection's document count from its metadata (cheap; may be off
/// by a little): what a comparison uses to size its memory.
pub(crate) async fn estimated_count(
    db: &Database,
    collection: Collection,
) -> Result<u64, MongoError> {
    let count = handle(db, collection).estimated_document_count().await;
    count.map_err(mongo_err("estimate the document count"))
}

/// LibreChat's own view of one collection, as its `getSyncProgress()`
/// reports it (the same four counts, [`ProgressFilters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LibreChatProgress {
    /// `totalDocuments`: searchable by LibreChat's own rule.
    pub(crate) searchable: u64,
    /// `totalProcessed`: of those, flagged at the schema version.
    pub(crate) processed: u64,
    /// `pendingIndexing`: attempted but not flagged, or flagged at another
    /// schema version.
    pub(crate) pending_indexing: u64,
    /// `pendingCleanup`: excluded documents that may still be in Meilisearch.
    pub(crate) pending_cleanup: u64,
    /// `isComplete`: everything processed, no cleanup pending.
    pub(crate) complete: bool,
}

/// LibreChat's `getSyncProgress()` of `collection` at `now`: four counts,
/// each over the whole collection (seconds at a million documents).
pub(crate) async fn librechat_progress(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
) -> Result<LibreChatProgress, MongoError> {
    let filters = ProgressFilters::new(rules, collection, now);
    let handle = handle(db, collection);
    let count = |filter| {
        let count = handle.count_documents(filter).max_time(READ_TIME_LIMIT);
        async { count.await.map_err(mongo_err("count LibreChat's progress")) }
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
pub(crate) async fn count_pending_cleanup(
    db: &Database,
    rules: &Rules,
    collection: Collection,
) -> Result<u64, MongoError> {
    let Some(path) = rules.exclusion_path(collection) else {
        return Ok(0);
    };
    handle(db, collection)
        .count_documents(markers::pending_cleanup_filter(path))
        .max_time(READ_TIME_LIMIT)
        .await
        .map_err(mongo_err("count the excluded documents to clean up"))
}
