//! Drift both ways (DESIGN.md §3.5): documents in Meilisearch whose MongoDB
//! document is gone or no longer indexable are deleted (then their flags
//! cleared), and documents flagged in MongoDB but missing from Meilisearch get
//! their flags cleared so indexing sends them.
//!
//! Bounded and compact: Meilisearch ids are paged (primary-key field only)
//! and kept as sorted 64-bit hashes, MongoDB ids are streamed by `_id` range
//! and kept the same way; only the ids to delete are kept as strings, and
//! flags are cleared in short chunks as they are found.
//!
//! After a forced reindex the same comparison also sets the flags of the
//! documents the new index holds ([`repair_and_flag`]): runs of consecutive
//! (by `_id`) indexable documents present in the index are flagged with one
//! range update each, fenced by "unchanged since the index was last fed".

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use mongodb::bson::{Bson, DateTime};

use super::{Ctx, ReconcileError};
use crate::mongo;

/// Ids per page read from either side, and per Meilisearch deletion task.
const PAGE: usize = 10_000;
/// Flags cleared per flush.
const CLEAR_FLUSH: usize = 1_000;

/// What a drift repair did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OrphanOutcome {
    pub deleted: u64,
    pub flags_cleared: u64,
    /// Flags set on documents the index holds ([`repair_and_flag`] only).
    pub flags_set: u64,
}

/// A run of consecutive indexable documents (by `_id`) the index holds.
#[derive(Default)]
struct PresentRun {
    first: Option<Bson>,
    last: Option<Bson>,
}

impl PresentRun {
    fn extend(&mut self, id: &Bson) {
        if self.first.is_none() {
            self.first = Some(id.clone());
        }
        self.last = Some(id.clone());
    }

    fn take(&mut self) -> Option<(Bson, Bson)> {
        Some((self.first.take()?, self.last.take()?))
    }
}

/// A stable 64-bit hash of a document id.
pub(crate) fn id_hash(id: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    id.hash(&mut hasher);
    hasher.finish()
}

/// Compares the id sets of the index and the collection and repairs both sides.
pub(crate) async fn repair(ctx: &Ctx<'_>) -> Result<OrphanOutcome, ReconcileError> {
    compare_and_repair(ctx, None).await
}

/// [`repair`], and also sets the flag of every indexable document the index
/// holds that is unchanged since `unchanged_since` (`updatedAt` at or before
/// it, or none): the index was fed every such document's current version.
/// Documents the index lacks (rejected, or inserted since) stay unflagged.
pub(crate) async fn repair_and_flag(
    ctx: &Ctx<'_>,
    unchanged_since: DateTime,
) -> Result<OrphanOutcome, ReconcileError> {
    compare_and_repair(ctx, Some(unchanged_since)).await
}

async fn compare_and_repair(
    ctx: &Ctx<'_>,
    flag_present_unchanged_since: Option<DateTime>,
) -> Result<OrphanOutcome, ReconcileError> {
    let mut outcome = OrphanOutcome::default();
    let pk = ctx.collection.primary_key();
    let in_meili = ctx.meili.document_count(&ctx.uid).await?;
    ctx.phase("compare ids", in_meili);

    // 1. What Meilisearch has.
    let mut meili_hashes = Vec::with_capacity(in_meili as usize);
    let mut offset = 0;
    loop {
        let (ids, _) = ctx
            .meili
            .document_ids(&ctx.uid, pk, offset, PAGE as u64)
            .await?;
        if ids.is_empty() {
            break;
        }
        offset += ids.len() as u64;
        meili_hashes.extend(ids.iter().map(|id| id_hash(id)));
        ctx.advance(ids.len() as u64);
    }
    meili_hashes.sort_unstable();

    // 2. What MongoDB says belongs there; flagged documents Meilisearch lacks
    // get their flag cleared (and, when asked, the ones it holds get it set).
    let now = mongo::server_time(ctx.db).await?;
    let mut mongo_hashes = Vec::new();
    let mut to_clear: Vec<Bson> = Vec::new();
    let mut after: Option<Bson> = None;
    loop {
        let page =
            mongo::indexable_ids_page(ctx.db, ctx.collection, now, after.as_ref(), PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.mongo_id.clone());
        let mut run = PresentRun::default();
        let mut runs = Vec::new();
        for entry in &page {
            let present = match &entry.meili_id {
                Some(id) => {
                    let hash = id_hash(id);
                    mongo_hashes.push(hash);
                    meili_hashes.binary_search(&hash).is_ok()
                }
                None => false,
            };
            if entry.flagged && !present {
                to_clear.push(entry.mongo_id.clone());
            }
            if present {
                run.extend(&entry.mongo_id);
            } else {
                runs.extend(run.take());
            }
        }
        runs.extend(run.take());
        if let Some(fence) = flag_present_unchanged_since {
            for (first, last) in &runs {
                outcome.flags_set +=
                    mongo::flag_range(ctx.db, ctx.collection, now, fence, first, last, ctx.guard)
                        .await?;
            }
        }
        if to_clear.len() >= CLEAR_FLUSH {
            outcome.flags_cleared +=
                mongo::clear_flags(ctx.db, ctx.collection, &to_clear, ctx.guard).await?;
            to_clear.clear();
        }
        if page.len() < PAGE {
            break;
        }
    }
    outcome.flags_cleared +=
        mongo::clear_flags(ctx.db, ctx.collection, &to_clear, ctx.guard).await?;
    drop(meili_hashes);
    mongo_hashes.sort_unstable();

    // 3. What Meilisearch has that does not belong there. Collected first so
    // the offsets stay valid while paging.
    let mut to_delete = Vec::new();
    let mut offset = 0;
    loop {
        let (ids, _) = ctx
            .meili
            .document_ids(&ctx.uid, pk, offset, PAGE as u64)
            .await?;
        if ids.is_empty() {
            break;
        }
        offset += ids.len() as u64;
        to_delete.extend(
            ids.into_iter()
                .filter(|id| mongo_hashes.binary_search(&id_hash(id)).is_err()),
        );
    }
    for chunk in to_delete.chunks(PAGE) {
        let task = ctx
            .meili
            .delete_documents(&ctx.uid, chunk, ctx.guard)
            .await?;
        ctx.meili
            .wait_ok(task, "delete documents", ctx.guard)
            .await?;
        outcome.deleted += chunk.len() as u64;
    }

    // 4. Documents that are not indexable cannot be "indexed".
    outcome.flags_cleared +=
        mongo::clear_flags_of_unindexable(ctx.db, ctx.collection, now, ctx.guard).await?;

    if outcome.deleted + outcome.flags_cleared + outcome.flags_set > 0 {
        tracing::info!(
            index = %ctx.uid,
            deleted = outcome.deleted,
            flags_cleared = outcome.flags_cleared,
            flags_set = outcome.flags_set,
            "drift repaired"
        );
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_distinguish_ids() {
        assert_eq!(id_hash("m-1"), id_hash("m-1"));
        assert_ne!(id_hash("m-1"), id_hash("m_1"));
    }
}
