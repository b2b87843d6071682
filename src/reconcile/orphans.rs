//! Drift both ways (docs/design.md §4.4): documents in Meilisearch whose MongoDB
//! document is gone or no longer indexable are deleted, and documents
//! flagged in MongoDB but missing from Meilisearch get their flags cleared so
//! indexing sends them.
//!
//! One read of each side, memory bounded by `sync.compare_memory`:
//! 1. MongoDB, by plain `_id` range pages filtered in Rust: the Meilisearch
//!    id of every indexable document as a 64-bit hash whose lowest bit holds
//!    the flag, sorted ([`MongoIds`]: 8 bytes and a seen-bit per document);
//! 2. the Meilisearch ids, page by page, **once**: an id found in step 1 is
//!    marked seen; one not found is an orphan candidate. Candidates are
//!    checked against MongoDB by primary key before they are deleted (a
//!    message LibreChat saved and indexed after step 1 read past its `_id`
//!    is no orphan), and deleted as they pile up; the paging offset steps
//!    back by the number deleted;
//! 3. only when some flagged document was not seen: MongoDB again, clearing
//!    the flags of those (Meilisearch lacks them);
//! 4. the flags of documents that are not indexable are cleared.
//!
//! When more ids are expected than fit the budget, they are split by hash
//! into partitions, each compared by its own passes: memory stays bounded by
//! the setting whatever the collection's size, at the cost of a pass per
//! partition (none at the default budget below ~7 million documents).
//!
//! This compares ids only (cheap: no document bodies). The exact comparison
//! of contents is [`super::exact`] (`verify`, `once --deep`, the reindex).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use mongodb::bson::{Bson, DateTime};

use super::{Ctx, ReconcileError};
use crate::mongo;

/// Ids per page read from either side, and orphans per deletion task.
const PAGE: usize = 10_000;
/// Flags cleared per flush.
const CLEAR_FLUSH: usize = 1_000;
/// Bytes one id takes in [`MongoIds`] (a hash, and a bit rounded up).
const BYTES_PER_ID: usize = 9;

/// What a drift repair did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OrphanOutcome {
    pub deleted: u64,
    pub flags_cleared: u64,
    /// Hash partitions the id sets were compared in.
    pub partitions: u64,
}

/// A stable 64-bit hash of a document id.
pub(crate) fn id_hash(id: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    id.hash(&mut hasher);
    hasher.finish()
}

/// How ids are split when they do not all fit a memory budget: the drift
/// check's and the exact comparison's per-document state is bounded by
/// `sync.compare_memory`, and each partition is compared by its own
/// passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Partitions(pub u64);

impl Partitions {
    /// As many partitions as `expected_ids` need at `budget_bytes` each, when
    /// one id takes `bytes_per_id`.
    pub fn for_ids(expected_ids: u64, budget_bytes: usize, bytes_per_id: usize) -> Partitions {
        let per_partition = (budget_bytes / bytes_per_id.max(1)).max(1) as u64;
        Partitions(expected_ids.div_ceil(per_partition).max(1))
    }

    /// The partition an id's hash falls in (its lowest bit is not part of
    /// it: [`MongoIds`] keeps the flag there).
    pub fn of(self, hash: u64) -> u64 {
        (hash >> 1) % self.0
    }

    /// The partitions comparing `ctx.uid` (holding `in_meili` documents)
    /// with its collection needs at `bytes_per_id`: sized for the larger of
    /// the two sides (MongoDB's estimated count), logged when more than one.
    pub async fn for_comparison(
        ctx: &Ctx<'_>,
        in_meili: u64,
        bytes_per_id: usize,
    ) -> Result<Partitions, ReconcileError> {
        let in_mongo = mongo::estimated_count(ctx.db, ctx.collection).await?;
        let partitions = Partitions::for_ids(
            in_meili.max(in_mongo),
            ctx.opts.compare_memory,
            bytes_per_id,
        );
        if partitions.0 > 1 {
            tracing::info!(index = %ctx.uid, partitions = partitions.0,
                "comparing in hash partitions to stay within sync.compare_memory");
        }
        Ok(partitions)
    }
}

/// The indexable MongoDB documents of one partition, as sorted keys (the id
/// hash with the flag in the lowest bit) and a seen-bit each.
#[derive(Debug, Default)]
struct MongoIds {
    keys: Vec<u64>,
    seen: Vec<u64>,
}

impl MongoIds {
    fn key(hash: u64, flagged: bool) -> u64 {
        (hash & !1) | u64::from(flagged)
    }

    fn push(&mut self, hash: u64, flagged: bool) {
        self.keys.push(MongoIds::key(hash, flagged));
    }

    /// Sorts the keys; call once after the last push.
    fn seal(&mut self) {
        self.keys.sort_unstable();
        self.seen = vec![0; self.keys.len().div_ceil(64)];
    }

    /// Where the id with this hash is (flag ignored).
    fn position(&self, hash: u64) -> Option<usize> {
        let wanted = hash & !1;
        self.keys.binary_search_by_key(&wanted, |k| k & !1).ok()
    }

    fn mark_seen(&mut self, position: usize) {
        self.seen[position / 64] |= 1 << (position % 64);
    }

    fn is_seen(&self, position: usize) -> bool {
        self.seen[position / 64] & (1 << (position % 64)) != 0
    }

    fn is_flagged(&self, position: usize) -> bool {
        self.keys[position] & 1 == 1
    }

    /// Flagged documents Meilisearch did not list.
    fn flagged_unseen(&self) -> usize {
        (0..self.keys.len())
            .filter(|&p| self.is_flagged(p) && !self.is_seen(p))
            .count()
    }
}

/// Compares the id sets of the index and the collection and repairs both sides.
pub(crate) async fn repair(ctx: &Ctx<'_>) -> Result<OrphanOutcome, ReconcileError> {
    let mut outcome = OrphanOutcome::default();
    let in_meili = ctx.meili.document_count(&ctx.uid).await?;
    let partitions = Partitions::for_comparison(ctx, in_meili, BYTES_PER_ID).await?;
    outcome.partitions = partitions.0;
    ctx.phase("compare ids", in_meili * partitions.0);
    let now = mongo::server_time(ctx.db).await?;
    for part in 0..partitions.0 {
        let in_part = |hash: u64| partitions.of(hash) == part;
        let (mut ids, cleared) = read_mongo_ids(ctx, now, &in_part, part == 0).await?;
        outcome.flags_cleared += cleared;
        super::test_hook::pause_after("drift-mongo-ids").await;
        outcome.deleted += delete_orphans(ctx, &mut ids, now, &in_part).await?;
        if ids.flagged_unseen() > 0 {
            outcome.flags_cleared += clear_unseen_flags(ctx, &ids, now, &in_part).await?;
        }
    }
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

/// Step 1: the partition's indexable ids. When `clear_idless`, the flags of
/// flagged documents without a Meilisearch id (never searchable) are cleared
/// on the way. Returns the ids and the flags cleared.
async fn read_mongo_ids(
    ctx: &Ctx<'_>,
    now: DateTime,
    in_part: &impl Fn(u64) -> bool,
    clear_idless: bool,
) -> Result<(MongoIds, u64), ReconcileError> {
    let mut ids = MongoIds::default();
    let cleared = clear_flags_while_reading_ids(ctx, now, |entry| match &entry.meili_id {
        Some(id) => {
            let hash = id_hash(id);
            if in_part(hash) {
                ids.push(hash, entry.flagged);
            }
            None
        }
        None => (entry.flagged && clear_idless).then_some(entry.mongo_id),
    })
    .await?;
    ids.seal();
    Ok((ids, cleared))
}

/// One pass over MongoDB's indexable ids (plain `_id` range pages), clearing
/// the flags of the documents `visit` returns the `_id` of (a few thousand
/// at a time). Returns the flags cleared.
async fn clear_flags_while_reading_ids(
    ctx: &Ctx<'_>,
    now: DateTime,
    mut visit: impl FnMut(mongo::IdEntry) -> Option<Bson>,
) -> Result<u64, ReconcileError> {
    let mut to_clear: Vec<Bson> = Vec::new();
    let mut cleared = 0;
    let mut after: Option<Bson> = None;
    loop {
        let page =
            mongo::indexable_ids_page(ctx.db, ctx.collection, now, after.as_ref(), PAGE).await?;
        after = page.after;
        to_clear.extend(page.entries.into_iter().filter_map(&mut visit));
        if to_clear.len() >= CLEAR_FLUSH || page.last {
            cleared += mongo::clear_flags(ctx.db, ctx.collection, &to_clear, ctx.guard).await?;
            to_clear.clear();
        }
        if page.last {
            return Ok(cleared);
        }
    }
}

/// Step 2: one pass over the Meilisearch ids of the partition, marking the
/// ones MongoDB has and deleting the orphans. Returns how many were deleted.
async fn delete_orphans(
    ctx: &Ctx<'_>,
    ids: &mut MongoIds,
    now: DateTime,
    in_part: &impl Fn(u64) -> bool,
) -> Result<u64, ReconcileError> {
    let pk = ctx.collection.primary_key();
    let mut candidates: Vec<String> = Vec::new();
    let mut deleted = 0;
    let mut offset = 0u64;
    loop {
        let (page, _) = ctx
            .meili
            .document_ids(&ctx.uid, pk, offset, PAGE as u64)
            .await?;
        if page.is_empty() {
            break;
        }
        offset += page.len() as u64;
        ctx.advance(page.len() as u64);
        for id in page {
            let hash = id_hash(&id);
            if !in_part(hash) {
                continue;
            }
            match ids.position(hash) {
                Some(position) => ids.mark_seen(position),
                None => candidates.push(id),
            }
        }
        if candidates.len() >= PAGE {
            let gone = delete_confirmed(ctx, &mut candidates, now).await?;
            deleted += gone;
            // Every deleted document was listed before `offset`: the ones
            // after it moved up by as many places.
            offset = offset.saturating_sub(gone);
        }
    }
    deleted += delete_confirmed(ctx, &mut candidates, now).await?;
    Ok(deleted)
}

/// Deletes the candidates that no indexable MongoDB document claims now
/// (the check by primary key closes the race with documents saved after
/// step 1 read past them). Empties `candidates`; returns how many went.
async fn delete_confirmed(
    ctx: &Ctx<'_>,
    candidates: &mut Vec<String>,
    now: DateTime,
) -> Result<u64, ReconcileError> {
    if candidates.is_empty() {
        return Ok(0);
    }
    let claimed = mongo::indexable_meili_ids_among(ctx.db, ctx.collection, candidates, now).await?;
    if !claimed.is_empty() {
        tracing::debug!(index = %ctx.uid, kept = claimed.len(),
            "ids MongoDB gained after its ids were read: not orphans");
    }
    let orphans: Vec<String> = candidates
        .drain(..)
        .filter(|id| !claimed.contains(id))
        .collect();
    ctx.delete_documents(&orphans).await
}

/// Step 3: clears the flags of flagged documents of the partition that
/// Meilisearch did not list (and that are still flagged and indexable).
async fn clear_unseen_flags(
    ctx: &Ctx<'_>,
    ids: &MongoIds,
    now: DateTime,
    in_part: &impl Fn(u64) -> bool,
) -> Result<u64, ReconcileError> {
    clear_flags_while_reading_ids(ctx, now, |entry| {
        let hash = entry.meili_id.as_deref().map(id_hash)?;
        // Flagged when step 1 read it (and now), and Meilisearch did not list it.
        let missing = entry.flagged
            && in_part(hash)
            && ids
                .position(hash)
                .is_some_and(|p| ids.is_flagged(p) && !ids.is_seen(p));
        missing.then_some(entry.mongo_id)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_distinguish_ids() {
        assert_eq!(id_hash("m-1"), id_hash("m-1"));
        assert_ne!(id_hash("m-1"), id_hash("m_1"));
    }

    #[test]
    fn partitions_follow_the_budget_and_cover_every_hash_once() {
        let parts = |ids, budget| Partitions::for_ids(ids, budget, BYTES_PER_ID);
        assert_eq!(parts(0, 64 << 20), Partitions(1));
        assert_eq!(parts(1_000_000, 64 << 20), Partitions(1));
        // 9 bytes an id: 90 bytes hold 10 ids.
        assert_eq!(parts(10, 90), Partitions(1));
        assert_eq!(parts(11, 90), Partitions(2));
        assert_eq!(parts(100, 90), Partitions(10));
        let parts = Partitions(3);
        for id in ["a", "b", "c", "m-1", "m-2"] {
            let hash = id_hash(id);
            let homes: Vec<u64> = (0..3).filter(|&p| parts.of(hash) == p).collect();
            assert_eq!(homes.len(), 1);
            // The flag bit does not move an id to another partition.
            assert_eq!(parts.of(hash | 1), parts.of(hash & !1));
        }
    }

    #[test]
    fn ids_are_found_whatever_their_flag_and_remember_it() {
        let mut ids = MongoIds::default();
        let (a, b, c) = (id_hash("a"), id_hash("b"), id_hash("c"));
        ids.push(a, true);
        ids.push(b, false);
        ids.push(c, true);
        ids.seal();
        let pa = ids.position(a).unwrap();
        let pb = ids.position(b).unwrap();
        assert!(ids.is_flagged(pa) && !ids.is_flagged(pb));
        assert_eq!(ids.position(a | 1), Some(pa), "the flag bit is ignored");
        assert_eq!(ids.position(id_hash("z")), None);
        assert_eq!(ids.flagged_unseen(), 2);
        ids.mark_seen(pa);
        assert!(ids.is_seen(pa) && !ids.is_seen(pb));
        assert_eq!(ids.flagged_unseen(), 1);
        ids.mark_seen(pb);
        assert_eq!(
            ids.flagged_unseen(),
            1,
            "an unflagged document seen changes nothing"
        );
    }
}
