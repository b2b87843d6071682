//! The reindex marker (docs/design.md, "Reindex steps and crash points"): a
//! small state document next to the lease — `_id: "<lease.job>:indexes"` in
//! `lease.collection`, never the lease document itself, which LibreChat
//! writes too — that says which live indexes need an exact comparison.
//!
//! A zero-downtime reindex marks the live index *before* it swaps the new
//! index in, and clears the mark only once the comparison that sets its
//! flags exactly has finished. A reindex that dies anywhere in between
//! leaves the mark, and the next ordinary reconciliation runs the
//! comparison first (`plan` shows it). Shape:
//! `{ _id, exactComparisonPending: { "<index uid>": { markedAt: <MongoDB time> } } }`.

use std::collections::HashSet;

use mongodb::bson::{doc, Document};
use mongodb::Database;

use super::options::SyncOptions;
use crate::lease::Guard;
use crate::mongo::{self, MongoError};

const PENDING: &str = "exactComparisonPending";

fn location(db: &Database, opts: &SyncOptions) -> (mongodb::Collection<Document>, String) {
    let id = format!("{}:indexes", opts.state_job);
    (db.collection::<Document>(&opts.state_collection), id)
}

/// The index uids marked as needing an exact comparison.
pub(crate) async fn pending(
    db: &Database,
    opts: &SyncOptions,
) -> Result<HashSet<String>, MongoError> {
    let (collection, id) = location(db, opts);
    let state = collection
        .find_one(doc! { "_id": &id })
        .await
        .map_err(|e| mongo::failed("read the reindex marker", &e))?;
    Ok(state
        .as_ref()
        .and_then(|s| s.get_document(PENDING).ok())
        .map(|pending| pending.keys().cloned().collect())
        .unwrap_or_default())
}

/// Marks `uid` as needing an exact comparison (before a swap).
pub(crate) async fn mark(
    db: &Database,
    opts: &SyncOptions,
    uid: &str,
    guard: &Guard,
) -> Result<(), MongoError> {
    let (collection, id) = location(db, opts);
    let now = mongo::server_time(db).await?;
    guard.check()?;
    let set = doc! { "$set": { format!("{PENDING}.{uid}"): { "markedAt": now } } };
    let marking = collection.update_one(doc! { "_id": &id }, set).upsert(true);
    let what = "mark the index for an exact comparison";
    marking.await.map_err(|e| mongo::failed(what, &e))?;
    Ok(())
}

/// Clears the mark of `uid` (after the exact comparison finished).
pub(crate) async fn clear(
    db: &Database,
    opts: &SyncOptions,
    uid: &str,
    guard: &Guard,
) -> Result<(), MongoError> {
    let (collection, id) = location(db, opts);
    guard.check()?;
    let unset = doc! { "$unset": { format!("{PENDING}.{uid}"): "" } };
    let clearing = collection.update_one(doc! { "_id": &id }, unset);
    clearing
        .await
        .map_err(|e| mongo::failed("clear the reindex marker", &e))?;
    Ok(())
}
