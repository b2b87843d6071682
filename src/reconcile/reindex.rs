//! The forced reindex (DESIGN.md §3.7, `meili-reconciler reindex`).
//!
//! **Zero-downtime (default)**, per collection, with `<uid>` the live index
//! and `<uid>_reindex` the build target:
//!
//! 1. *prepare*: delete a `<uid>_reindex` left by a crashed attempt, create
//!    it with the right primary key and the desired settings (that task
//!    finished before any document is sent);
//! 2. *build*: note MongoDB's clock `T0`, then stream every indexable
//!    document into `<uid>_reindex` through the sync pipeline, without
//!    touching `_meiliIndex` — the flags keep describing the live index,
//!    which search still answers from, until the swap;
//! 3. *swap*: `POST /swap-indexes` the two, atomically. A missing live index
//!    is first created empty: the `rename` form of a swap only exists since
//!    Meilisearch 1.18, and a plain swap works on every v1;
//! 4. *catch-up*: note the clock `T1`, re-send the indexable documents
//!    changed since `T0` (a document without `updatedAt` cannot have
//!    changed) into the now-live index. Both times are widened by
//!    [`CLOCK_SKEW`], because `updatedAt` comes from the application
//!    servers' clocks, not MongoDB's;
//! 5. *flags*: one id-set comparison of the new index with MongoDB (the
//!    engine's drift repair) deletes what is gone or no longer indexable,
//!    clears the flags of what the index lacks and of what is not
//!    indexable, and sets the flags of what it holds and is unchanged since
//!    `T1`, by `_id` ranges;
//! 6. *index*: the ordinary indexing of whatever is still unflagged
//!    (edited after `T1`, inserted without `updatedAt` after the build
//!    passed), acknowledged as usual;
//! 7. *drop*: delete the old index, now named `<uid>_reindex`.
//!
//! Search answers from a complete index throughout: the old one until the
//! swap, then the new one, which already holds every document that was
//! indexable when the build read it. Documents Meilisearch refuses are
//! isolated as in a sync, reported, and left unflagged.
//!
//! A crash at any point leaves a live index that search can use: before the
//! swap the old one untouched (the next attempt deletes the half-built
//! target), after it the new one, whose flags the next reconciliation's
//! drift check repairs.
//!
//! **In place** (`--in-place`): the structure and settings step of a
//! reconciliation, then the collection's flags reset in batches (the
//! rebuild's resumable reset) and the ordinary forced reconciliation of the
//! live index — cheaper, but search misses documents until they are sent
//! again.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mongodb::bson::DateTime;
use mongodb::Database;
use serde_json::{Map, Value};

use super::sync::{self, Feed};
use super::{
    finish, orphans, plan, prepare_index, rebuild, reconcile_collection, settings,
    CollectionSummary, Ctx, RebuildReason, ReconcileError, RunSummary, SyncOptions,
};
use crate::lease::Guard;
use crate::meili::Meili;
use crate::mongo::{self, Collection};
use crate::progress::Progress;

/// How far the application servers' clocks (which write `updatedAt`) may be
/// behind MongoDB's: the catch-up re-sends documents changed this long
/// before the build began, and flags are only set on documents unchanged
/// this long before the catch-up began (the rest go through ordinary,
/// acknowledged indexing). Costs a few re-sent documents, never a stale one.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// Suffix of the index a zero-downtime reindex builds.
pub const BUILD_SUFFIX: &str = "_reindex";

/// What to reindex and how.
#[derive(Clone, Debug, Default)]
pub struct ReindexOptions {
    /// Only this collection's index (default: both).
    pub only: Option<Collection>,
    /// Reset the flags and re-index into the live index instead of building
    /// a new one and swapping it in.
    pub in_place: bool,
}

impl ReindexOptions {
    fn collections(&self) -> Vec<Collection> {
        match self.only {
            Some(collection) => vec![collection],
            None => Collection::ALL.to_vec(),
        }
    }
}

/// The index a zero-downtime reindex of `live_uid` builds (and, after the
/// swap, the old index until it is dropped).
pub fn build_uid(live_uid: &str) -> String {
    format!("{live_uid}{BUILD_SUFFIX}")
}

/// A forced full reindex as lease owner (see the module documentation).
/// Every write checks `guard` first; `progress` shows the phases
/// (`reindex prepare`, `reindex build`, `swap`, `catch-up`, `compare ids`,
/// `index`, `drop old index`, each followed by the collection's name).
pub async fn reindex(
    db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
    reindex: &ReindexOptions,
    guard: &Guard,
    progress: &Progress,
) -> Result<RunSummary, ReconcileError> {
    let started = Instant::now();
    let desired = settings::desired(&opts.filterable_attributes);
    let summaries = if reindex.in_place {
        in_place(db, meili, opts, reindex, &desired, guard, progress).await?
    } else {
        let mut summaries = Vec::new();
        for collection in reindex.collections() {
            let ctx = Ctx::new(
                db,
                meili,
                opts,
                guard,
                progress,
                collection,
                opts.index_uid(collection),
            );
            summaries.push(build_and_swap(&ctx, &desired).await?);
        }
        summaries
    };
    Ok(finish(summaries, started, progress))
}

/// `--in-place`: structure and settings first, then per collection a flag
/// reset and a forced reconciliation of the live index.
async fn in_place(
    db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
    reindex: &ReindexOptions,
    desired: &Map<String, Value>,
    guard: &Guard,
    progress: &Progress,
) -> Result<Vec<CollectionSummary>, ReconcileError> {
    progress.phase("plan", 0);
    let plan = plan::plan(db, meili, opts).await?;
    let selected = reindex.collections();
    let forced = SyncOptions {
        force: true,
        ..opts.clone()
    };
    let mut work = Vec::new();
    for index in plan
        .indexes
        .into_iter()
        .filter(|i| selected.contains(&i.collection))
    {
        let summary = CollectionSummary {
            collection: index.collection.name().to_string(),
            index_uid: index.index_uid.clone(),
            settings_changed: prepare_index(meili, &index, desired, guard, progress).await?,
            ..Default::default()
        };
        work.push((index, summary));
    }
    let mut summaries = Vec::new();
    for (mut index, mut summary) in work {
        // A structural reason found by the plan says more than "forced".
        index.rebuild.get_or_insert(RebuildReason::Forced);
        let ctx = Ctx::new(
            db,
            meili,
            &forced,
            guard,
            progress,
            index.collection,
            index.index_uid.clone(),
        );
        reconcile_collection(&ctx, &index, &mut summary).await?;
        summaries.push(summary);
    }
    Ok(summaries)
}

fn minus(t: DateTime, d: Duration) -> DateTime {
    DateTime::from_millis(t.timestamp_millis() - d.as_millis() as i64)
}

/// The zero-downtime reindex of one collection (`ctx.uid` is the live index).
async fn build_and_swap(
    ctx: &Ctx<'_>,
    desired: &Map<String, Value>,
) -> Result<CollectionSummary, ReconcileError> {
    let live = ctx.uid.clone();
    let target = build_uid(&live);
    let pk = ctx.collection.primary_key();
    let mut summary = CollectionSummary {
        collection: ctx.collection.name().to_string(),
        index_uid: live.clone(),
        rebuilt: Some(RebuildReason::Forced),
        compared_ids: true,
        ..Default::default()
    };

    // 1. A clean build target with the desired settings, before any document.
    ctx.phase("reindex prepare", 0);
    let live_exists = ctx.meili.index(&live).await?.is_some();
    let live_settings = match live_exists {
        true => ctx.meili.settings(&live).await?,
        false => Value::Object(Map::new()),
    };
    summary.settings_changed = settings::diff(&live_settings, desired)
        .keys()
        .cloned()
        .collect();
    let leftover = ctx.meili.index(&target).await?.is_some();
    if leftover {
        tracing::info!(index = %target, "deleting the build index a crashed reindex left");
    }
    rebuild::recreate_index(ctx.meili, &target, pk, leftover, ctx.guard).await?;
    let diff = settings::diff(&ctx.meili.settings(&target).await?, desired);
    settings::apply(ctx.meili, &target, &diff, ctx.guard).await?;

    // 2. Build from every indexable document; flags untouched.
    let build_began = mongo::server_time(ctx.db).await?;
    let counts = mongo::counts(ctx.db, ctx.collection, build_began).await?;
    let build = ctx.on_index(target.clone());
    build.phase("reindex build", counts.indexable);
    tracing::info!(index = %live, target = %target, documents = counts.indexable, "reindex: building");
    let built = sync::run_pass(
        &build,
        Feed::Indexable {
            changed_since: None,
        },
        &HashSet::new(),
    )
    .await?;
    summary.indexed += built.indexed;
    let mut rejected: HashSet<String> = built
        .rejected
        .iter()
        .map(|r| r.mongo_id_key.clone())
        .collect();
    summary.rejected.extend(built.rejected);

    // 3. The atomic swap.
    ctx.phase("swap", 0);
    if !live_exists {
        create_tolerating_existing(ctx, &live, pk).await?;
    }
    let task = ctx.meili.swap_indexes(&live, &target, ctx.guard).await?;
    ctx.meili.wait_ok(task, "swap indexes", ctx.guard).await?;
    tracing::info!(index = %live, "reindex: swapped in the new index");

    // 4. Catch up with what changed while the build ran.
    let catch_up_began = mongo::server_time(ctx.db).await?;
    ctx.phase("catch-up", 0);
    let caught = sync::run_pass(
        ctx,
        Feed::Indexable {
            changed_since: Some(minus(build_began, CLOCK_SKEW)),
        },
        &rejected,
    )
    .await?;
    summary.indexed += caught.indexed;
    rejected.extend(caught.rejected.iter().map(|r| r.mongo_id_key.clone()));
    summary.rejected.extend(caught.rejected);

    // 5. Drift both ways, and the flags of what the new index holds.
    let repaired = orphans::repair_and_flag(ctx, minus(catch_up_began, CLOCK_SKEW)).await?;
    summary.deleted += repaired.deleted;
    summary.flags_cleared += repaired.flags_cleared;

    // 6. Whatever is still unflagged goes through ordinary indexing.
    let now = mongo::server_time(ctx.db).await?;
    let unindexed = mongo::counts(ctx.db, ctx.collection, now).await?.unindexed;
    if unindexed > 0 {
        let indexed = sync::index_unindexed(ctx, unindexed, &rejected).await?;
        summary.indexed += indexed.indexed;
        summary.rejected.extend(indexed.rejected);
    }

    // 7. The old index goes.
    ctx.phase("drop old index", 0);
    let task = ctx.meili.delete_index(&target, ctx.guard).await?;
    let outcome = ctx.meili.wait_for_task(task, ctx.guard).await?;
    if outcome
        .error
        .as_ref()
        .is_some_and(|e| e.code != "index_not_found")
    {
        outcome.into_result("delete the old index")?;
    }
    tracing::info!(
        index = %live,
        indexed = summary.indexed,
        deleted = summary.deleted,
        flags_set = repaired.flags_set,
        rejected = summary.rejected.len(),
        "reindex finished"
    );
    Ok(summary)
}

/// Creates `uid` empty (someone creating it meanwhile is fine).
async fn create_tolerating_existing(
    ctx: &Ctx<'_>,
    uid: &str,
    primary_key: &str,
) -> Result<(), ReconcileError> {
    let task = ctx.meili.create_index(uid, primary_key, ctx.guard).await?;
    let outcome = ctx.meili.wait_for_task(task, ctx.guard).await?;
    if outcome
        .error
        .as_ref()
        .is_some_and(|e| e.code != "index_already_exists")
    {
        outcome.into_result("create the live index")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_index_is_named_after_the_live_one() {
        assert_eq!(build_uid("t1_messages"), "t1_messages_reindex");
        let both = ReindexOptions::default().collections();
        assert_eq!(both, Collection::ALL.to_vec());
        let one = ReindexOptions {
            only: Some(Collection::Conversations),
            in_place: false,
        };
        assert_eq!(one.collections(), vec![Collection::Conversations]);
    }

    #[test]
    fn skew_moves_times_back() {
        let t = DateTime::from_millis(100_000);
        assert_eq!(minus(t, Duration::from_secs(60)).timestamp_millis(), 40_000);
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
