//! Expiry is a delete (docs/design.md §4.4): a document whose `expiredAt`
//! (LibreChat's retention) has passed is searchable in no branch of the
//! retention filter, and MongoDB's TTL monitor deletes it only some time
//! later, with no hook to tell Meilisearch. The sweep removes the expired
//! documents that may still be in Meilisearch by their markers from the
//! index (the task awaited), then writes LibreChat's removal markers for the
//! version read (`mongo::mark_removed`; a document saved since keeps its
//! own, and its change or the next run judges it), so the next sweep no
//! longer finds them.
//!
//! It goes a page of [`PAGE`] documents at a time, whatever their number
//! (a retention policy applied at once expires thousands in one second):
//! one read, one deletion task and one marker write per page, so memory and
//! Meilisearch tasks grow with pages, not documents. A document the rule
//! itself still finds searchable (an `expiredAt` array holding a later date
//! too) is left as it is, and paging by `_id` moves past it.
//!
//! A run sweeps before indexing (what expires during the run goes at the
//! next one: interval mode removes an expired document within
//! `serve.interval` and a run); a follower sweeps when the next expiry —
//! the earliest among the documents that may be indexed, overdue ones
//! included (`follow::expiry`) — has come. The query is served by
//! LibreChat's TTL index on `expiredAt` and reads only documents expired
//! and not yet deleted, so a sweep with nothing to do costs one indexed
//! query.

use mongodb::bson::{Bson, Document};

use super::ctx::Ctx;
use super::error::ReconcileError;
use crate::librechat::searchable;
use crate::mongo::{self, DocVersion};

/// Documents per page: one read, one Meilisearch deletion task and one
/// marker write each. Large, because a deletion task costs Meilisearch
/// about the same whatever its size (a busy one takes seconds for a few
/// ids); small enough to hold (a page is a few MB).
const PAGE: usize = 5_000;

/// Removes the collection's expired documents from the index and marks
/// them removed. Returns how many were removed.
pub(crate) async fn sweep(ctx: &Ctx<'_>) -> Result<u64, ReconcileError> {
    let rules = &ctx.opts.rules;
    let now = mongo::server_time(ctx.db).await?;
    let mut removed = 0;
    let mut after: Option<Bson> = None;
    let (db, collection) = (ctx.db, ctx.collection);
    let meili_id = |d: &&Document| mongo::meili_id(collection, d);
    loop {
        let page = mongo::expired_page(db, rules, collection, now, after.as_ref(), PAGE).await?;
        let Some(last) = page.last().and_then(|d| d.get("_id").cloned()) else {
            break;
        };
        // Judged again by the rule itself (an `expiredAt` array may hold
        // a later date too).
        let searchable = |d: &&Document| searchable::is_searchable(rules, collection, d, now);
        let expired: Vec<&Document> = page.iter().filter(|d| !searchable(d)).collect();
        let meili_ids: Vec<String> = expired.iter().filter_map(meili_id).collect();
        removed += ctx.delete_documents(&meili_ids).await?;
        let versions: Vec<DocVersion> = expired.iter().map(|d| DocVersion::of(d)).collect();
        mongo::mark_removed(ctx.db, ctx.collection, &versions, ctx.guard).await?;
        if page.len() < PAGE {
            break;
        }
        after = Some(last);
    }
    if removed > 0 {
        tracing::info!(index = %ctx.uid, removed, "expired documents removed from Meilisearch and marked");
    }
    Ok(removed)
}
