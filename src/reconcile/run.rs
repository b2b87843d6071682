//! One reconciliation of both collections (docs/design.md §4), as lease
//! owner: the plan, each index's structure and settings first, then both
//! collections side by side, each through its flag reset, exact comparison,
//! indexing, and then the id-set drift repair. A reindex and `verify --repair`
//! reuse its steps ([`prepare_index`], [`reconcile_collection`],
//! [`finish`]).

use std::collections::HashSet;
use std::time::Instant;

use mongodb::Database;

use super::ack::Tally;
use super::ctx::{Ctx, Run};
use super::error::ReconcileError;
use super::head_start;
use super::options::{build_uid, SyncOptions};
use super::plan::{self, IndexPlan, RebuildReason};
use super::summary::{CollectionSummary, RunSummary};
use super::{exact, excluded, expiry, marker, orphans, rebuild, rejects, settings, sync};
use crate::lease::Guard;
use crate::meili::Meili;
use crate::mongo::{self, Collection};
use crate::progress::{Lane, Progress};

/// One reconciliation of both collections (docs/design.md §4), as lease owner:
/// settings and index structure first (waiting for their tasks before any
/// document write), then both collections concurrently, each in order: the
/// flag reset of a rebuild, indexing of unindexed documents, and drift
/// repair. The first error ends the run (the other collection's work is
/// dropped where it stands, as a crash would leave it: every step is
/// resumable).
pub async fn reconcile(
    mongo_db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
    guard: &Guard,
    progress: &Progress,
) -> Result<RunSummary, ReconcileError> {
    let run = Run::new(mongo_db, meili, opts, guard, progress);
    progress.phase("plan", 0);
    let survey = plan::survey(mongo_db, meili, opts).await?;
    let now = survey.now;
    // No index needs its structure or settings changed (nor anything else
    // that must precede indexing): each collection sweeps its expired
    // documents, then counts while its small backlog is already sent
    // ([`head_start`]), with nothing to prepare — a rebuild of a lost index
    // recreates nothing — and counts taken before any write of the run.
    let head_start = !opts.deep && survey.indexes.iter().all(IndexPlan::may_send_before_counts);
    let (indexes, mut summaries) = if head_start {
        let new = |i: &IndexPlan| CollectionSummary::new(i.collection, &i.index_uid);
        let summaries = survey.indexes.iter().map(new).collect();
        (survey.indexes, summaries)
    } else {
        let plan = survey.counted(mongo_db, opts).await?;
        // Structure and settings of every index before any document is written.
        let mut summaries = Vec::new();
        for index in &plan.indexes {
            summaries.push(prepare_index(&run, index).await?);
        }
        (plan.indexes, summaries)
    };

    // The plan's counts are still the current ones when no settings task
    // ran since (on a large index one can take minutes); else each
    // collection counts again.
    let plan_counts_current = summaries.iter().all(|s| s.settings_changed.is_empty());

    // Then the collections side by side: while one waits for Meilisearch
    // or MongoDB the other progresses (each reports through its own lane).
    let lanes: Vec<Lane> = indexes.iter().map(|_| progress.lane()).collect();
    let work = indexes.iter().zip(summaries.iter_mut()).zip(&lanes);
    let work = work.map(|((index, summary), lane)| {
        let ctx = run.ctx(index.collection, lane);
        async move {
            let (index, before) = match head_start {
                true => count_with_head_start(&ctx, index, now).await?,
                false => (index.clone(), BeforeCounts::default()),
            };
            reconcile_collection(&ctx, &index, plan_counts_current, summary, before).await
        }
    });
    futures::future::try_join_all(work).await?;
    drop(lanes);

    Ok(finish(&run, summaries))
}

/// The head start's way: sweeps the collection's expired documents, then
/// counts while its small backlog is already sent ([`head_start`]).
/// Returns the index's plan and what was done before it was decided.
async fn count_with_head_start(
    ctx: &Ctx<'_>,
    surveyed: &IndexPlan,
    now: mongodb::bson::DateTime,
) -> Result<(IndexPlan, BeforeCounts), ReconcileError> {
    // Swept before anything is sent, so that the index's count read after
    // a sweep is the run's starting point.
    let swept = Some(sweep_expired(ctx).await?);
    let (index, head_start) = head_start::count_with_head_start(ctx, surveyed, now).await?;
    Ok((index, BeforeCounts { swept, head_start }))
}

/// What a collection's work did before its plan was decided (the head
/// start's way, [`count_with_head_start`]).
#[derive(Debug, Default)]
pub(crate) struct BeforeCounts {
    /// The expiry sweep, when it ran: documents deleted, and the index's
    /// count after it when any were.
    swept: Option<(u64, Option<u64>)>,
    /// What the head start's sender did, when it sent the backlog.
    head_start: Option<Tally>,
}

/// Sweeps the collection's expired documents from its index (a delete:
/// what expired since it was indexed goes now, not when MongoDB's TTL
/// monitor deletes it). Returns how many, and the index's count after
/// them when any were deleted.
async fn sweep_expired(ctx: &Ctx<'_>) -> Result<(u64, Option<u64>), ReconcileError> {
    let sweeping = Instant::now();
    let expired = expiry::sweep(ctx).await?;
    tracing::debug!(index = %ctx.uid, expired, ms = sweeping.elapsed().as_millis() as u64, "expiry swept");
    let in_meili = match expired {
        0 => None,
        _ => Some(ctx.meili.document_count(&ctx.uid).await?),
    };
    Ok((expired, in_meili))
}

/// The run's summary, logged; progress moves to `done`.
pub(crate) fn finish(run: &Run<'_>, summaries: Vec<CollectionSummary>) -> RunSummary {
    let elapsed = run.started.elapsed();
    let indexed: u64 = summaries.iter().map(|s| s.indexed).sum();
    let summary = RunSummary {
        nothing_to_do: !summaries.iter().any(CollectionSummary::changed_anything),
        collections: summaries,
        duration_ms: elapsed.as_millis() as u64,
        docs_per_sec: indexed as f64 / elapsed.as_secs_f64().max(1e-3),
        phases: run.phases.snapshot(),
    };
    run.progress.phase("done", 0);
    tracing::info!("reconciliation finished: {summary}");
    summary
}

/// The plan (read-only) of the index of `only` one collection, or of each.
pub(crate) async fn planned(
    run: &Run<'_>,
    only: Option<Collection>,
) -> Result<Vec<IndexPlan>, ReconcileError> {
    run.progress.phase("plan", 0);
    let plan = plan::plan(run.db, run.meili, run.opts).await?;
    let selected = |i: &IndexPlan| only.is_none_or(|c| c == i.collection);
    Ok(plan.indexes.into_iter().filter(selected).collect())
}

/// The structure and settings of one index, before any document write:
/// (re)creates it when the plan says so, then applies the settings diff and
/// waits for it. Returns its summary, with the settings keys changed.
pub(crate) async fn prepare_index(
    run: &Run<'_>,
    index: &IndexPlan,
) -> Result<CollectionSummary, ReconcileError> {
    let (meili, guard) = (run.meili, run.guard);
    let ctx = run.ctx(index.collection, run.progress);
    let rebuild = index.rebuild.as_ref();
    let diff = if rebuild.is_some_and(RebuildReason::recreates_index) {
        ctx.phase("rebuild", 0);
        rebuild::recreate_index(&ctx, &index.index_uid, index.exists).await?;
        let desired = settings::desired(&run.opts.filterable_attributes);
        settings::diff(&meili.settings(&index.index_uid).await?, &desired)
    } else {
        index.settings_to_apply.clone()
    };
    ctx.phase("settings", 0);
    let mut summary = CollectionSummary::new(index.collection, &index.index_uid);
    summary.settings_changed = settings::apply(meili, &index.index_uid, &diff, guard).await?;
    Ok(summary)
}

/// One collection's flag reset (when rebuilding), the cleanup of excluded
/// and expired documents, the exact comparison an interrupted reindex left
/// pending (or `--deep` asked for), the removal of a leftover reindex build
/// index, indexing, and then — forced, or when the counts differ — the
/// id-set drift repair (and indexing what it found missing).
///
/// The id-set comparison comes after indexing so that a document deleted
/// while the run read, sent or acknowledged it is found as well (§4.4): a
/// document deleted before the comparison reads its `_id` page from
/// MongoDB is not in Meilisearch when the run ends.
///
/// `plan_counts_current`: nothing was written since `index` was planned, so
/// its counts (MongoDB's and the index's) decide the drift check and the
/// threshold instead of counting again — on a large collection the count
/// aggregation reads every document. `before`: what the head start's way
/// did before the plan was decided (the sweep, the backlog sent), else
/// nothing.
pub(crate) async fn reconcile_collection(
    ctx: &Ctx<'_>,
    index: &IndexPlan,
    plan_counts_current: bool,
    summary: &mut CollectionSummary,
    before: BeforeCounts,
) -> Result<(), ReconcileError> {
    let in_meili_now = reset_and_clean_up(ctx, index, summary, before.swept).await?;
    let (counts, compare_ids) =
        compare_or_count(ctx, index, plan_counts_current, in_meili_now, summary).await?;
    clear_reindex_leftovers(ctx, index).await?;
    let counts = match counts {
        Some(counts) => counts,
        None => ctx.counts().await?,
    };
    // Whether the exact comparison changed something.
    let repaired = summary.verified.as_ref().is_some_and(|c| !c.is_exact());
    let exempt = ctx.opts.force || summary.rebuilt.is_some() || repaired;
    index_backlog(ctx, &counts, exempt, before.head_start, summary).await?;
    if compare_ids {
        repair_drift(ctx, &counts, summary).await?;
    }
    Ok(())
}

/// What an interrupted reindex left, once the index's flags are exact
/// (compared, or reset by a rebuild): its mark is cleared, and the build
/// index dropped — we hold the lease, so no reindex is running: whatever
/// `<uid>_reindex` holds (a half build, or the old index after a swap) is
/// not live.
pub(crate) async fn clear_reindex_leftovers(
    ctx: &Ctx<'_>,
    index: &IndexPlan,
) -> Result<(), ReconcileError> {
    if index.exact_comparison_pending {
        marker::clear(ctx.db, ctx.opts, &ctx.uid, ctx.guard).await?;
    }
    let build = build_uid(&ctx.uid);
    if index.leftover_build_index && ctx.drop_index(&build).await? {
        tracing::info!(index = %build, "dropped the index an interrupted reindex left");
    }
    Ok(())
}

/// The flag reset of a rebuild, then the cleanup of excluded documents and
/// the expiry sweep (unless the head start swept already: `swept`).
/// Returns the index's count when it changed from the plan's.
async fn reset_and_clean_up(
    ctx: &Ctx<'_>,
    index: &IndexPlan,
    summary: &mut CollectionSummary,
    swept: Option<(u64, Option<u64>)>,
) -> Result<Option<u64>, ReconcileError> {
    if let Some(reason) = &index.rebuild {
        tracing::info!(index = %ctx.uid, %reason, "rebuilding");
        summary.flags_cleared += rebuild::reset_flags(ctx).await?;
        summary.rebuilt = Some(reason.clone());
    }
    let mut in_meili_now = None;
    if index.pending_cleanup > 0 {
        let cleaned = excluded::clean_up(ctx).await?;
        // MongoDB's counts stand (excluded documents are not searchable),
        // but the index may hold fewer documents than the plan counted.
        if cleaned.deleted > 0 {
            in_meili_now = Some(ctx.meili.document_count(&ctx.uid).await?);
        }
        summary.add(cleaned);
    }
    // Expiry is a delete (the counts stand: an expired document is not
    // searchable).
    let (expired, in_meili_after) = match swept {
        Some(swept) => swept,
        None => sweep_expired(ctx).await?,
    };
    if expired > 0 {
        summary.deleted += expired;
        in_meili_now = in_meili_after;
    }
    Ok(in_meili_now)
}

/// The exact comparison an interrupted reindex left pending (or `--deep`
/// asked for), which repairs as it goes; else the counts, which decide
/// whether the id sets are compared after indexing (they differ, or
/// forced). Returns MongoDB's counts, when still current for the threshold
/// decision, and whether the id sets are compared after indexing.
async fn compare_or_count(
    ctx: &Ctx<'_>,
    index: &IndexPlan,
    plan_counts_current: bool,
    in_meili_now: Option<u64>,
    summary: &mut CollectionSummary,
) -> Result<(Option<mongo::Counts>, bool), ReconcileError> {
    if (index.exact_comparison_pending || ctx.opts.deep) && index.rebuild.is_none() {
        if index.exact_comparison_pending {
            tracing::info!(index = %ctx.uid, "an interrupted reindex left this index unverified: comparing every document");
        }
        ctx.phase("compare", 0);
        let (comparison, repairs) = exact::compare(ctx, Some(&HashSet::new())).await?;
        // What was deleted while the comparison and the indexing ran is
        // found by the id sets afterwards.
        summary.compared_ids = true;
        summary.comparison_partitions = comparison.partitions;
        summary.verified = Some(comparison);
        summary.add(repairs);
        return Ok((None, true));
    }
    let (counts, in_meili) = if plan_counts_current && index.rebuild.is_none() {
        (index.mongo, in_meili_now.unwrap_or(index.meili_documents))
    } else {
        let counts = ctx.counts().await?;
        (counts, ctx.meili.document_count(&ctx.uid).await?)
    };
    let compare_ids = ctx.opts.force || in_meili != counts.flagged;
    if compare_ids {
        tracing::info!(index = %ctx.uid, in_meili, flagged_indexable = counts.flagged,
            forced = ctx.opts.force, "the id sets are compared after indexing (the index's count differs from MongoDB's, or forced)");
    }
    Ok((Some(counts), compare_ids))
}

/// Indexes the unindexed documents: after a head start, what changed while
/// its backlog was in flight and what it left out; else the backlog,
/// unless it is below `sync.threshold` and nothing `exempt`s it (forced,
/// rebuilt, repaired, or an index with nothing indexed yet).
async fn index_backlog(
    ctx: &Ctx<'_>,
    counts: &mongo::Counts,
    exempt: bool,
    head_start: Option<Tally>,
    summary: &mut CollectionSummary,
) -> Result<(), ReconcileError> {
    let exempt = exempt || counts.indexed == 0;
    if let Some(settled) = head_start {
        // The unflagged backlog went while the plan counted: what changed
        // in flight is sent again, then what is flagged at another schema
        // version, which the head start's narrow read left out.
        let (unflagged, skip) = (mongo::Backlog::Unflagged, HashSet::new());
        summary.add(sync::send_changed_again(ctx, settled, unflagged, &skip).await?);
        if mongo::Backlog::of(counts) == mongo::Backlog::Any {
            let expected = counts.flagged - counts.indexed;
            index_unindexed(ctx, expected, mongo::Backlog::Any, summary).await?;
        }
    } else if counts.unindexed > 0 && counts.unindexed < ctx.opts.threshold && !exempt {
        tracing::info!(index = %ctx.uid, unindexed = counts.unindexed,
            threshold = ctx.opts.threshold, "below the sync threshold: skipped");
        summary.skipped_by_threshold = Some(counts.unindexed);
    } else if counts.unindexed > 0 {
        index_unindexed(ctx, counts.unindexed, mongo::Backlog::of(counts), summary).await?;
    }
    Ok(())
}

/// The id-set comparison: deletes orphans and clears the flags of
/// documents missing from Meilisearch, then sends those (and a backlog the
/// threshold held back with them).
async fn repair_drift(
    ctx: &Ctx<'_>,
    counts: &mongo::Counts,
    summary: &mut CollectionSummary,
) -> Result<(), ReconcileError> {
    summary.compared_ids = true;
    let (outcome, partitions) = orphans::repair(ctx).await?;
    summary.comparison_partitions = summary.comparison_partitions.max(partitions);
    let (deleted, flags_cleared) = (outcome.deleted, outcome.flags_cleared);
    summary.add(outcome);
    if deleted + flags_cleared > 0 {
        let backlog = summary.skipped_by_threshold.take().unwrap_or(0);
        let expected = backlog + flags_cleared;
        if expected > 0 {
            index_unindexed(ctx, expected, mongo::Backlog::of(counts), summary).await?;
        }
    }
    Ok(())
}

/// Indexes the collection's unindexed documents (about `expected`, those
/// `backlog` selects), leaving out those refused earlier in the run, into
/// the summary.
async fn index_unindexed(
    ctx: &Ctx<'_>,
    expected: u64,
    backlog: mongo::Backlog,
    summary: &mut CollectionSummary,
) -> Result<(), ReconcileError> {
    let skip: HashSet<String> = rejects::keys(&summary.rejected).collect();
    summary.add(sync::index_unindexed(ctx, expected, backlog, &skip).await?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lead spawns the engine on the runtime: its future must be `Send`.
    #[allow(dead_code)]
    fn reconcile_future_is_send(db: &Database, meili: &Meili, guard: &Guard, progress: &Progress) {
        fn assert_send<T: Send>(_: T) {}
        let opts = SyncOptions::default();
        assert_send(reconcile(db, meili, &opts, guard, progress));
    }
}
