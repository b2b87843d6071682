//! The forced reindex (docs/design.md §4.9, `meili-reconciler reindex`).
//!
//! **Zero-downtime (default)**, per collection, with `<uid>` the live index
//! and `<uid>_reindex` the build target (docs/design.md, "Reindex steps and
//! crash points"):
//!
//! 1. *prepare*: delete a `<uid>_reindex` left by a crashed attempt, create
//!    it with the right primary key and the desired settings (that task
//!    finished before any document is sent);
//! 2. *build*: stream every indexable document into `<uid>_reindex` through
//!    the sync pipeline, without touching `_meiliIndex` — the flags keep
//!    describing the live index, which search still answers from;
//! 3. *mark*: record in the reindex marker (a state document next to the
//!    lease, [`super::marker`]) that `<uid>` needs an exact comparison;
//! 4. *swap*: `POST /swap-indexes` the two, atomically. A missing live index
//!    is first created empty: the `rename` form of a swap only exists since
//!    Meilisearch 1.18, and a plain swap works on every v1;
//! 5. *flags*: the exact comparison ([`super::exact`]) of the now-live index
//!    with MongoDB, document by document: a document the index holds
//!    exactly gets its flag set for the version compared; a missing or
//!    stale one has its flag cleared (the old index's flag may say true)
//!    and is sent and acknowledged version-exactly; an unexpected one is
//!    deleted. Then the mark is cleared. This replaces a "catch-up" of the
//!    documents changed since the build began, which had to guess how far
//!    the application servers' clocks (which write `updatedAt`) may be off;
//! 6. *index*: the ordinary indexing of whatever is still unflagged
//!    (edited or inserted since), acknowledged version-exactly;
//! 7. *drop*: delete the old index, now named `<uid>_reindex`.
//!
//! Search answers from a complete index throughout: the old one until the
//! swap, then the new one, which already holds every document that was
//! indexable when the build read it. Documents Meilisearch refuses are
//! isolated as in a sync, reported, and left unflagged.
//!
//! A crash at any point leaves a live index search can use and a state the
//! next ordinary reconciliation makes exact: before the mark, the live
//! index is untouched (the leftover build is dropped); after it, the marker
//! makes the next run compare every document of whichever index is live
//! before anything else, then drop the leftover `<uid>_reindex`. The test
//! `reindex_kill_at_each_step` kills a real process after each step.
//!
//! **In place** (`--in-place`): the structure and settings step of a
//! reconciliation, then the collection's flags reset in batches (the
//! rebuild's resumable reset) and the ordinary forced reconciliation of the
//! live index — cheaper (no second index), and search keeps answering from
//! the live index while every document is sent again.

use std::collections::HashSet;

use mongodb::Database;
use serde_json::{Map, Value};

use super::ctx::{wait_tolerating, Ctx, Run};
use super::error::ReconcileError;
use super::options::{collections, SyncOptions};
use super::plan::RebuildReason;
use super::run::{finish, planned, prepare_index, reconcile_collection};
use super::summary::{CollectionSummary, RunSummary};
use super::sync::{self, Read};
use super::test_hook::pause_after;
use super::{exact, excluded, marker, rebuild, rejects, settings};
use crate::lease::Guard;
use crate::meili::Meili;
use crate::mongo::{self, Collection};
use crate::progress::Progress;

pub use super::options::build_uid;

/// What to reindex and how.
#[derive(Clone, Debug, Default)]
pub struct ReindexOptions {
    /// Only this collection's index (default: both).
    pub only: Option<Collection>,
    /// Reset the flags and re-index into the live index instead of building
    /// a new one and swapping it in.
    pub in_place: bool,
}

/// A forced full reindex as lease owner (see the module documentation).
/// Every write checks `guard` first; `progress` shows the phases
/// (`reindex prepare`, `reindex build`, `swap`, `compare: …`, `index`,
/// `drop old index`, each followed by the collection's name).
pub async fn reindex(
    db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
    reindex: &ReindexOptions,
    guard: &Guard,
    progress: &Progress,
) -> Result<RunSummary, ReconcileError> {
    let run = Run::new(db, meili, opts, guard, progress);
    let summaries = if reindex.in_place {
        in_place(&run, reindex).await?
    } else {
        let mut summaries = Vec::new();
        for collection in collections(reindex.only) {
            summaries.push(build_and_swap(&run.ctx(collection, progress)).await?);
        }
        summaries
    };
    Ok(finish(&run, summaries))
}

/// `--in-place`: structure and settings first, then per collection a flag
/// reset and a forced reconciliation of the live index.
async fn in_place(
    run: &Run<'_>,
    reindex: &ReindexOptions,
) -> Result<Vec<CollectionSummary>, ReconcileError> {
    let forced = SyncOptions {
        force: true,
        ..run.opts.clone()
    };
    let mut work = Vec::new();
    for index in planned(run, reindex.only).await? {
        let summary = prepare_index(run, &index).await?;
        work.push((index, summary));
    }
    let mut summaries = Vec::new();
    for (mut index, mut summary) in work {
        // A structural reason found by the plan says more than "forced".
        index.rebuild.get_or_insert(RebuildReason::Forced);
        // Forced: no threshold, and the id sets are compared.
        let mut ctx = run.ctx(index.collection, run.progress);
        ctx.opts = &forced;
        // Rebuilding: the flags are reset first, so they are counted afterwards.
        reconcile_collection(&ctx, &index, false, &mut summary, Default::default()).await?;
        summaries.push(summary);
    }
    Ok(summaries)
}

/// The zero-downtime reindex of one collection (`ctx.uid` is the live index).
async fn build_and_swap(ctx: &Ctx<'_>) -> Result<CollectionSummary, ReconcileError> {
    let live = ctx.uid.clone();
    let target = build_uid(&live);
    let mut summary = CollectionSummary::new(ctx.collection, &live);
    summary.rebuilt = Some(RebuildReason::Forced);
    summary.compared_ids = true;
    // 1. A clean build target with the desired settings, before any document.
    let live_exists = prepare_target(ctx, &target, &mut summary).await?;
    // 2. Build from every indexable document; flags untouched.
    let mut rejected = build(ctx, &target, &mut summary).await?;
    pause_after("build").await;
    // 3. From here until the flags are exact, a crash must leave a mark.
    marker::mark(ctx.db, ctx.opts, &live, ctx.guard).await?;
    pause_after("mark").await;
    // 4. The atomic swap.
    swap(ctx, &target, live_exists).await?;
    pause_after("swap").await;
    // 5. Flags exactly as the new index holds the documents.
    let (comparison, repairs) = exact::compare(ctx, Some(&rejected)).await?;
    marker::clear(ctx.db, ctx.opts, &live, ctx.guard).await?;
    rejected.extend(rejects::keys(&repairs.rejected));
    summary.add(repairs);
    summary.verified = Some(comparison);
    summary.add(excluded::clean_up(ctx).await?);
    pause_after("flags").await;
    // 6. Whatever is still unflagged goes through ordinary indexing.
    let counts = ctx.counts().await?;
    if counts.unindexed > 0 {
        let backlog = mongo::Backlog::of(&counts);
        summary.add(sync::index_unindexed(ctx, counts.unindexed, backlog, &rejected).await?);
    }
    pause_after("index").await;
    // 7. The old index goes.
    ctx.phase("drop old index", 0);
    ctx.drop_index(&target).await?;
    pause_after("drop").await;
    tracing::info!(index = %live, indexed = summary.indexed, deleted = summary.deleted,
        flags_set = summary.flags_set, rejected = summary.rejected.len(), "reindex finished");
    Ok(summary)
}

/// Recreates the build index `target` empty with the `desired` settings
/// (deleting what a crashed reindex left there), noting which settings the
/// live index lacks. Returns whether the live index exists.
async fn prepare_target(
    ctx: &Ctx<'_>,
    target: &str,
    summary: &mut CollectionSummary,
) -> Result<bool, ReconcileError> {
    ctx.phase("reindex prepare", 0);
    let desired = &settings::desired(&ctx.opts.filterable_attributes);
    let live_exists = ctx.meili.index(&ctx.uid).await?.is_some();
    let live_settings = match live_exists {
        true => ctx.meili.settings(&ctx.uid).await?,
        false => Value::Object(Map::new()),
    };
    let changed = settings::diff(&live_settings, desired);
    summary.settings_changed = changed.keys().cloned().collect();
    let leftover = ctx.meili.index(target).await?.is_some();
    if leftover {
        tracing::info!(index = %target, "deleting the build index a crashed reindex left");
    }
    rebuild::recreate_index(ctx, target, leftover).await?;
    let diff = settings::diff(&ctx.meili.settings(target).await?, desired);
    settings::apply(ctx.meili, target, &diff, ctx.guard).await?;
    Ok(live_exists)
}

/// Sends every indexable document into `target`, flags untouched. Returns
/// the ids Meilisearch refused (the comparison after the swap leaves them
/// alone).
async fn build(
    ctx: &Ctx<'_>,
    target: &str,
    summary: &mut CollectionSummary,
) -> Result<HashSet<String>, ReconcileError> {
    let counts = ctx.counts().await?;
    let build = ctx.on_index(target.to_string());
    build.phase("reindex build", counts.indexable);
    tracing::info!(index = %ctx.uid, target = %target, documents = counts.indexable, "reindex: building");
    let built = sync::run_pass(&build, Read::Everything, &HashSet::new(), None).await?;
    let rejected = rejects::keys(&built.rejected).collect();
    // Not acknowledged: what it indexed and rejected is all it did.
    summary.add(built);
    Ok(rejected)
}

/// Swaps the build index `target` in for the live one (created empty first
/// when it does not exist).
async fn swap(ctx: &Ctx<'_>, target: &str, live_exists: bool) -> Result<(), ReconcileError> {
    ctx.phase("swap", 0);
    if !live_exists {
        // Someone creating it meanwhile is fine.
        let pk = ctx.collection.primary_key();
        let task = ctx.meili.create_index(&ctx.uid, pk, ctx.guard).await?;
        let (code, what) = ("index_already_exists", "create the live index");
        wait_tolerating(ctx.meili, task, code, what, ctx.guard).await?;
    }
    let task = ctx.meili.swap_indexes(&ctx.uid, target, ctx.guard).await?;
    ctx.meili.wait_ok(task, "swap indexes", ctx.guard).await?;
    tracing::info!(index = %ctx.uid, "reindex: swapped in the new index");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_index_is_named_after_the_live_one() {
        assert_eq!(build_uid("t1_messages"), "t1_messages_reindex");
        let both = ReindexOptions::default();
        assert_eq!(collections(both.only), Collection::ALL.to_vec());
        let one = ReindexOptions {
            only: Some(Collection::Conversations),
            in_place: false,
        };
        assert_eq!(collections(one.only), vec![Collection::Conversations]);
    }

    /// The lead spawns the reindex on the runtime: its future must be `Send`.
    #[allow(dead_code)]
    fn reindex_future_is_send(db: &Database, meili: &Meili, guard: &Guard, progress: &Progress) {
        fn assert_send<T: Send>(_: T) {}
        let opts = SyncOptions::default();
        let r = ReindexOptions::default();
        assert_send(reindex(db, meili, &opts, &r, guard, progress));
    }
}
