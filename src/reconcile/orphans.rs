//! Drift both ways (docs/design.md §4.4): documents in Meilisearch whose MongoDB
//! document is gone or no longer indexable are deleted, and documents
//! flagged in MongoDB but missing from Meilisearch get their flags cleared so
//! indexing sends them. A run does this after indexing, so that what was
//! deleted while the run read, sent and acknowledged is found too.
//!
//! Meilisearch first, then MongoDB, memory bounded by `sync.compare_memory`:
//! 1. the Meilisearch ids, page by page ([`MeiliIds`]: a 64-bit hash and a
//!    seen-bit per document);
//! 2. MongoDB's indexable ids, by plain `_id` range pages filtered in Rust:
//!    an id listed in step 1 is marked seen (claimed); a flagged document
//!    step 1 did not list gets its flag cleared (Meilisearch lacks it);
//! 3. only when some listed id was not claimed: the Meilisearch ids again,
//!    the unclaimed ones checked against MongoDB by primary key (a message
//!    LibreChat saved and indexed after step 2 read past its `_id` is no
//!    orphan) and deleted as they pile up, the paging offset stepping back
//!    by the number deleted;
//! 4. the flags of documents that are not indexable are cleared.
//!
//! In this order a document deleted at any time before step 2 reads its
//! page is not claimed, so it goes. (MongoDB first, as before, "saw" a
//! document that was deleted after its page was read, and kept it.)
//!
//! When more ids are expected than fit the budget, they are split by hash
//! into partitions, each compared by its own passes: memory stays bounded by
//! the setting whatever the collection's size, at the cost of a pass per
//! partition (none at the default budget below ~7 million documents).
//!
//! At `trace` level (`RUST_LOG=meili_reconciler::reconcile::orphans=trace`)
//! every page of ids read from either side is logged, with the candidates
//! MongoDB claimed in step 3 and the ids deleted: which id a comparison
//! listed, claimed or deleted can be read from the log.
//!
//! This compares ids only (cheap: no document bodies). The exact comparison
//! of contents is [`super::exact`] (`verify`, `once --deep`, the reindex),
//! which keeps its Meilisearch side in the same compact [`Seen`] form.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use mongodb::bson::{Bson, DateTime};

use super::ack::Tally;
use super::ctx::Ctx;
use super::error::ReconcileError;
use crate::mongo;

/// Ids per page read from either side, and orphans per deletion task.
const PAGE: usize = 10_000;
/// Flags cleared per flush.
const CLEAR_FLUSH: usize = 1_000;
/// Bytes one id takes in [`MeiliIds`] (its hash, and its seen-bit rounded up).
const BYTES_PER_ID: usize = 9;

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
    fn for_ids(expected_ids: u64, budget_bytes: usize, bytes_per_id: usize) -> Partitions {
        let per_partition = (budget_bytes / bytes_per_id.max(1)).max(1) as u64;
        Partitions(expected_ids.div_ceil(per_partition).max(1))
    }

    /// The partition an id's hash falls in.
    pub(crate) fn of(self, hash: u64) -> u64 {
        hash % self.0
    }

    /// The partitions comparing `ctx.uid` (holding `in_meili` documents)
    /// with its collection needs at `bytes_per_id`: sized for the larger of
    /// the two sides (MongoDB's estimated count), logged when more than one.
    pub(crate) async fn for_comparison(
        ctx: &Ctx<'_>,
        in_meili: u64,
        bytes_per_id: usize,
    ) -> Result<Partitions, ReconcileError> {
        let in_mongo = mongo::estimated_count(ctx.db, ctx.collection).await?;
        let expected = in_meili.max(in_mongo);
        let partitions = Partitions::for_ids(expected, ctx.opts.compare_memory, bytes_per_id);
        if partitions.0 > 1 {
            tracing::info!(index = %ctx.uid, partitions = partitions.0,
                "comparing in hash partitions to stay within sync.compare_memory");
        }
        Ok(partitions)
    }
}

/// The Meilisearch side of a comparison, compactly: sorted 64-bit id
/// hashes, each with a value (the exact comparison's digest, nothing for
/// the drift check) and a seen-bit, set when MongoDB has the document.
#[derive(Debug)]
pub(crate) struct Seen<V> {
    entries: Vec<(u64, V)>,
    seen: Vec<u64>,
}

/// The Meilisearch ids of one partition, as the drift check keeps them.
type MeiliIds = Seen<()>;

impl<V: Copy + Ord> Seen<V> {
    pub(crate) fn new(mut entries: Vec<(u64, V)>) -> Seen<V> {
        entries.sort_unstable();
        entries.shrink_to_fit();
        let seen = vec![0; entries.len().div_ceil(64)];
        Seen { entries, seen }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The position and value of the entry with id hash `hash`.
    pub(crate) fn find(&self, hash: u64) -> Option<(usize, V)> {
        let i = self.entries.partition_point(|(h, _)| *h < hash);
        let found = self.entries.get(i).filter(|(h, _)| *h == hash);
        found.map(|(_, v)| (i, *v))
    }

    pub(crate) fn mark_seen(&mut self, i: usize) {
        self.seen[i / 64] |= 1 << (i % 64);
    }

    /// Whether the id with this hash was listed and not seen.
    pub(crate) fn is_unseen(&self, hash: u64) -> bool {
        self.find(hash)
            .is_some_and(|(i, _)| self.seen[i / 64] & (1 << (i % 64)) == 0)
    }

    /// Listed ids not seen (for the drift check, the orphan candidates).
    pub(crate) fn unseen(&self) -> u64 {
        let seen: u64 = self.seen.iter().map(|w| u64::from(w.count_ones())).sum();
        self.entries.len() as u64 - seen
    }
}

/// The index's ids, page by page, by offset (primary key only).
#[derive(Default)]
pub(crate) struct IdPages {
    offset: u64,
}

impl IdPages {
    /// The next page; `None` at the end.
    pub(crate) async fn next(
        &mut self,
        ctx: &Ctx<'_>,
    ) -> Result<Option<Vec<String>>, ReconcileError> {
        let pk = ctx.collection.primary_key();
        let (meili, uid, offset) = (ctx.meili, &ctx.uid, self.offset);
        let (page, total) = meili.document_ids(uid, pk, offset, PAGE as u64).await?;
        tracing::trace!(index = %ctx.uid, offset = self.offset, total, ids = ?page,
            "meilisearch id page");
        self.offset += page.len() as u64;
        Ok((!page.is_empty()).then_some(page))
    }
}

/// Compares the id sets of the index and the collection and repairs both
/// sides. Returns what it did (documents deleted, flags cleared) and the
/// hash partitions the id sets were compared in.
pub(crate) async fn repair(ctx: &Ctx<'_>) -> Result<(Tally, u64), ReconcileError> {
    let mut outcome = Tally::default();
    let in_meili = ctx.meili.document_count(&ctx.uid).await?;
    let partitions = Partitions::for_comparison(ctx, in_meili, BYTES_PER_ID).await?;
    ctx.phase("compare ids", in_meili * partitions.0);
    for part in 0..partitions.0 {
        let in_part = |hash: u64| partitions.of(hash) == part;
        let mut ids = read_meili_ids(ctx, &in_part).await?;
        super::test_hook::pause_after("drift-meili-ids").await;
        // MongoDB's clock after Meilisearch was listed: a document that
        // expired since is an orphan too.
        let now = mongo::server_time(ctx.db).await?;
        outcome.flags_cleared += mark_mongo_ids(ctx, now, &mut ids, &in_part, part == 0).await?;
        super::test_hook::pause_after("drift-mongo-ids").await;
        if ids.unseen() > 0 {
            outcome.deleted += delete_orphans(ctx, &ids).await?;
        }
    }
    let now = mongo::server_time(ctx.db).await?;
    outcome.flags_cleared +=
        mongo::clear_flags_of_unindexable(ctx.db, &ctx.opts.rules, ctx.collection, now, ctx.guard)
            .await?;

    if outcome.deleted + outcome.flags_cleared > 0 {
        tracing::info!(index = %ctx.uid, deleted = outcome.deleted,
            flags_cleared = outcome.flags_cleared, "drift repaired");
    }
    Ok((outcome, partitions.0))
}

/// Step 1: the partition's Meilisearch ids (the whole index listed by
/// offset, primary key only).
async fn read_meili_ids(
    ctx: &Ctx<'_>,
    in_part: &impl Fn(u64) -> bool,
) -> Result<MeiliIds, ReconcileError> {
    let mut hashes = Vec::new();
    let mut pages = IdPages::default();
    while let Some(page) = pages.next(ctx).await? {
        ctx.advance(page.len() as u64);
        let in_page = page.iter().map(|id| (id_hash(id), ()));
        hashes.extend(in_page.filter(|(h, _)| in_part(*h)));
    }
    Ok(listed(hashes))
}

/// The listed ids as the drift check keeps them: a document listed twice,
/// as a concurrent addition can make the offset listing do, counts once.
fn listed(mut hashes: Vec<(u64, ())>) -> MeiliIds {
    hashes.sort_unstable();
    hashes.dedup();
    MeiliIds::new(hashes)
}

/// Step 2: one pass over MongoDB's indexable ids (plain `_id` range pages
/// at server time `now`), marking the listed ids MongoDB claims and
/// clearing the flags of flagged documents Meilisearch did not list (and,
/// when `clear_idless`, of flagged documents without a Meilisearch id,
/// never searchable). Returns the flags cleared.
async fn mark_mongo_ids(
    ctx: &Ctx<'_>,
    now: DateTime,
    ids: &mut MeiliIds,
    in_part: &impl Fn(u64) -> bool,
    clear_idless: bool,
) -> Result<u64, ReconcileError> {
    let mut to_clear: Vec<Bson> = Vec::new();
    let mut cleared = 0;
    let mut after: Option<Bson> = None;
    let (db, rules, collection) = (ctx.db, &ctx.opts.rules, ctx.collection);
    loop {
        let page =
            mongo::indexable_ids_page(db, rules, collection, now, after.as_ref(), PAGE).await?;
        tracing::trace!(index = %ctx.uid, after = ?after, last = page.last,
            ids = ?page.entries.iter().map(|e| e.meili_id.as_deref()).collect::<Vec<_>>(),
            "mongodb indexable id page");
        after = page.after;
        for entry in page.entries {
            match entry.meili_id.as_deref().map(id_hash) {
                Some(hash) if in_part(hash) => match ids.find(hash) {
                    Some((position, ())) => ids.mark_seen(position),
                    // Flagged, and Meilisearch lacks it: indexing sends it.
                    None if entry.flagged => to_clear.push(entry.mongo_id),
                    None => {}
                },
                Some(_) => {}
                None if entry.flagged && clear_idless => to_clear.push(entry.mongo_id),
                None => {}
            }
        }
        if to_clear.len() >= CLEAR_FLUSH || page.last {
            cleared += mongo::clear_flags(ctx.db, ctx.collection, &to_clear, ctx.guard).await?;
            to_clear.clear();
        }
        if page.last {
            return Ok(cleared);
        }
    }
}

/// Step 3, only when some listed id was not claimed: Meilisearch's ids
/// again, the unclaimed ones of step 1 confirmed against MongoDB by primary
/// key and deleted as they pile up (the paging offset steps back by the
/// number deleted). An id listed now but not in step 1 was added since and
/// is left alone. Returns how many were deleted.
async fn delete_orphans(ctx: &Ctx<'_>, ids: &MeiliIds) -> Result<u64, ReconcileError> {
    let mut candidates: Vec<String> = Vec::new();
    let mut deleted = 0;
    let mut pages = IdPages::default();
    while let Some(page) = pages.next(ctx).await? {
        // Step 1 listed only the partition's ids: one of another partition
        // is never found.
        candidates.extend(page.into_iter().filter(|id| ids.is_unseen(id_hash(id))));
        if candidates.len() >= PAGE {
            let gone = delete_confirmed(ctx, &mut candidates).await?;
            deleted += gone;
            // Every one deleted was listed before the offset: the ids after
            // it moved up by as many places.
            pages.offset = pages.offset.saturating_sub(gone);
        }
    }
    deleted += delete_confirmed(ctx, &mut candidates).await?;
    Ok(deleted)
}

/// Deletes the candidates that no indexable MongoDB document claims now
/// (the check by primary key closes the race with documents saved after
/// step 2 read past them). Empties `candidates`; returns how many went.
async fn delete_confirmed(
    ctx: &Ctx<'_>,
    candidates: &mut Vec<String>,
) -> Result<u64, ReconcileError> {
    if candidates.is_empty() {
        return Ok(0);
    }
    let now = mongo::server_time(ctx.db).await?;
    let claimed =
        mongo::indexable_meili_ids_among(ctx.db, &ctx.opts.rules, ctx.collection, candidates, now)
            .await?;
    if !claimed.is_empty() {
        tracing::debug!(index = %ctx.uid, kept = claimed.len(),
            "ids MongoDB gained after its ids were read: not orphans");
        tracing::trace!(index = %ctx.uid, ids = ?claimed, "orphan candidates MongoDB claims");
    }
    let orphans: Vec<String> = candidates
        .drain(..)
        .filter(|id| !claimed.contains(id))
        .collect();
    tracing::trace!(index = %ctx.uid, ids = ?orphans, "orphans deleted");
    ctx.delete_documents(&orphans).await
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
        }
    }

    #[test]
    fn listed_ids_are_found_once_and_remember_whether_mongodb_claimed_them() {
        let (a, b, c) = (id_hash("a"), id_hash("b"), id_hash("c"));
        // `a` listed twice (a concurrent addition moved the offset).
        let mut ids = listed(vec![(a, ()), (b, ()), (a, ()), (c, ())]);
        assert_eq!(ids.len(), 3, "duplicates count once");
        assert_eq!(ids.find(id_hash("z")), None);
        assert_eq!(ids.unseen(), 3);
        ids.mark_seen(ids.find(a).unwrap().0);
        assert!(!ids.is_unseen(a) && ids.is_unseen(b));
        assert!(
            !ids.is_unseen(id_hash("z")),
            "an id not listed in step 1 is never a candidate"
        );
        assert_eq!(ids.unseen(), 2);
    }
}
