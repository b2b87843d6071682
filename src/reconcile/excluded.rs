//! The excluded documents' cleanup (LibreChat's `cleanupExcludedMeiliIndex`,
//! docs/design.md §4.4): documents kept out of search by their collection's
//! exclusion path (subagent records) that may still be in Meilisearch by
//! LibreChat's markers — flagged, attempted, or unflagged without a cleanup
//! version — are deleted from Meilisearch by id, and once the task
//! succeeded marked removed (LibreChat's cleanup markers), so LibreChat's own
//! `getSyncProgress()` counts no pending cleanup.
//!
//! The query is LibreChat's own, which its partial indexes
//! (`meili_excluded_*`) serve on MongoDB; the plan counts it first, so a run
//! with nothing to clean pays one count. Resumable: a crash between the
//! deletion and the markers leaves the documents pending, and the next run
//! deletes them again (harmless) and marks them.

use mongodb::bson::{Bson, Document};

use super::ack::Tally;
use super::ctx::Ctx;
use super::error::ReconcileError;
use crate::mongo;

/// Documents per page (and per Meilisearch deletion task).
const PAGE: usize = 1_000;

/// Deletes the collection's excluded documents pending cleanup from the
/// index and marks them removed. Returns the Meilisearch ids whose deletion
/// was asked for (and awaited) as `deleted`, the documents marked removed
/// as `flags_cleared`.
pub(crate) async fn clean_up(ctx: &Ctx<'_>) -> Result<Tally, ReconcileError> {
    let rules = &ctx.opts.rules;
    let mut cleaned = Tally::default();
    if rules.exclusion_path(ctx.collection).is_none() {
        return Ok(cleaned);
    }
    ctx.phase("clean up excluded", 0);
    let mut after: Option<Bson> = None;
    let (db, collection) = (ctx.db, ctx.collection);
    let meili_id = |d: &Document| mongo::meili_id(collection, d);
    loop {
        let page = mongo::pending_cleanup_page(db, rules, collection, after.as_ref(), PAGE).await?;
        let Some(last) = page.last().and_then(|d| d.get("_id").cloned()) else {
            break;
        };
        let ids: Vec<Bson> = page.iter().filter_map(|d| d.get("_id").cloned()).collect();
        let meili_ids: Vec<String> = page.iter().filter_map(meili_id).collect();
        cleaned.deleted += ctx.delete_documents(&meili_ids).await?;
        cleaned.flags_cleared +=
            mongo::mark_excluded_removed(ctx.db, rules, ctx.collection, &ids, ctx.guard).await?;
        if page.len() < PAGE {
            break;
        }
        after = Some(last);
    }
    if cleaned.flags_cleared > 0 {
        tracing::info!(index = %ctx.uid, deleted = cleaned.deleted, marked = cleaned.flags_cleared,
            "excluded documents removed from Meilisearch and marked (LibreChat's cleanup)");
    }
    Ok(cleaned)
}
