//! Drift both ways (DESIGN.md §3.5): documents in Meilisearch whose MongoDB
//! document is gone or no longer indexable are deleted (then their flags
//! cleared), and documents flagged in MongoDB but missing from Meilisearch get
//! their flags cleared so indexing sends them.
//!
//! Bounded and compact: Meilisearch ids are paged (primary-key field only)
//! and kept as sorted 64-bit hashes, MongoDB ids are streamed by `_id` range
//! and kept the same way; only the ids to delete are kept as strings, and
//! flags are cleared in chunks as they are found.
//!
//! This compares ids only (cheap: no document bodies). The exact comparison
//! of contents is [`super::exact`] (`verify`, `once --deep`, the reindex).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use mongodb::bson::Bson;

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
}

/// A stable 64-bit hash of a document id.
pub(crate) fn id_hash(id: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    id.hash(&mut hasher);
    hasher.finish()
}

/// Compares the id sets of the index and the collection and repairs both sides.
pub(crate) async fn repair(ctx: &Ctx<'_>) -> Result<OrphanOutcome, ReconcileError> {
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
    // get their flag cleared.
    let now = mongo::server_time(ctx.db).await?;
    let mut mongo_hashes = Vec::new();
    let mut to_clear: Vec<Bson> = Vec::new();
    let mut after: Option<Bson> = None;
    loop {
        let page =
            mongo::indexable_ids_page(ctx.db, ctx.collection, now, after.as_ref(), PAGE).await?;
        after = page.after.clone();
        for entry in &page.entries {
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
        }
        if to_clear.len() >= CLEAR_FLUSH {
            outcome.flags_cleared +=
                mongo::clear_flags(ctx.db, ctx.collection, &to_clear, ctx.guard).await?;
            to_clear.clear();
        }
        if page.last {
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
    outcome.deleted += ctx.delete_documents(&to_delete).await?;

    // 4. Documents that are not indexable cannot be "indexed".
    outcome.flags_cleared +=
        mongo::clear_flags_of_unindexable(ctx.db, ctx.collection, now, ctx.guard).await?;

    if outcome.deleted + outcome.flags_cleared > 0 {
        tracing::info!(
            index = %ctx.uid,
            deleted = outcome.deleted,
            flags_cleared = outcome.flags_cleared,
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
