//! The reconciliation engine (docs/design.md §4): bring both Meilisearch indexes
//! in step with the chat collections, in a safe order — settings and index
//! structure of both indexes first, then — both collections side by side —
//! flag resets, the exact comparison a reindex left pending (or `--deep`
//! asked for) or the id-set drift repair, and finally indexing, acknowledged
//! version-exactly.
//!
//! [`plan`](plan::plan) and [`verify`](verify::verify) are read-only;
//! [`reconcile`], [`reindex`] and [`verify::repair`] do the work under a
//! lease [`Guard`] that every write checks first.

mod ack;
pub(crate) mod apply;
pub mod exact;
mod marker;
pub mod orphans;
pub mod phases;
pub mod plan;
pub mod rebuild;
pub mod reindex;
pub mod rejects;
pub mod settings;
pub mod sync;
mod test_hook;
pub mod verify;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongodb::Database;
use serde::Serialize;

use crate::lease::{Guard, LeaseLost};
use crate::meili::{Meili, MeiliError};
use crate::mongo::{self, Collection, MongoError};
use crate::progress::{Lane, Progress};

pub use plan::{plan, IndexPlan, Plan, RebuildReason};
pub use reindex::{reindex, ReindexOptions};
pub use rejects::Rejected;

/// What a reconciliation may do and how hard it pushes.
#[derive(Clone, Debug)]
pub struct SyncOptions {
    /// Prefix of both index uids (`""`: LibreChat's `messages` and `convos`).
    pub index_prefix: String,
    /// Most documents per Meilisearch task.
    pub batch_docs: usize,
    /// Most bytes of NDJSON per Meilisearch task.
    pub batch_bytes: usize,
    /// Most Meilisearch tasks outstanding at once (an upper bound beside
    /// `max_bytes_in_flight`).
    pub in_flight: usize,
    /// Most bytes of NDJSON enqueued in Meilisearch and not yet indexed and
    /// acknowledged: enough that Meilisearch finds several tasks waiting and
    /// merges them into one indexing batch.
    pub max_bytes_in_flight: usize,
    /// Memory the drift check and the exact comparison may hold their
    /// per-document state in; beyond it they compare in hash partitions.
    pub compare_memory: usize,
    /// Below this many unindexed documents a collection is skipped (§3.8).
    pub threshold: u64,
    /// Pause between pages read from MongoDB.
    pub delay: Duration,
    /// `filterableAttributes` of both indexes.
    pub filterable_attributes: Vec<String>,
    /// Ignore the threshold and compare id sets.
    pub force: bool,
    /// Compare every document's contents (the exact comparison) instead of
    /// only the id sets when the counts disagree.
    pub deep: bool,
    /// Collection of the reconciler's state document (the lease's collection).
    pub state_collection: String,
    /// The lease's job id: the state document is `<state_job>:indexes`.
    pub state_job: String,
}

/// Default of `sync.in_flight`.
pub const DEFAULT_IN_FLIGHT: usize = 64;
/// Default of `sync.max_bytes_in_flight`.
pub const DEFAULT_MAX_BYTES_IN_FLIGHT: usize = 256 * 1024 * 1024;
/// Default of `sync.compare_memory`.
pub const DEFAULT_COMPARE_MEMORY: usize = 64 * 1024 * 1024;

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            index_prefix: String::new(),
            batch_docs: 10_000,
            batch_bytes: 8 * 1024 * 1024,
            in_flight: DEFAULT_IN_FLIGHT,
            max_bytes_in_flight: DEFAULT_MAX_BYTES_IN_FLIGHT,
            compare_memory: DEFAULT_COMPARE_MEMORY,
            threshold: 1000,
            delay: Duration::ZERO,
            filterable_attributes: vec!["user".into()],
            force: false,
            deep: false,
            state_collection: "distributedJobs".into(),
            state_job: "meili-index-sync".into(),
        }
    }
}

impl SyncOptions {
    /// The Meilisearch index uid that `collection` feeds.
    pub fn index_uid(&self, collection: Collection) -> String {
        format!("{}{}", self.index_prefix, collection.index_name())
    }
}

/// Why a reconciliation stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReconcileError {
    /// The guard failed: someone else owns the work now, or we are stopping.
    #[error("lease lost: {0}")]
    LeaseLost(#[from] LeaseLost),
    #[error("{0}")]
    MeiliUnreachable(String),
    #[error("{0}")]
    MongoUnreachable(String),
    #[error("{0}")]
    Other(String),
}

impl From<MeiliError> for ReconcileError {
    fn from(e: MeiliError) -> Self {
        match e {
            MeiliError::LeaseLost(lost) => ReconcileError::LeaseLost(lost),
            e @ MeiliError::Unreachable { .. } => ReconcileError::MeiliUnreachable(e.to_string()),
            e => ReconcileError::Other(e.to_string()),
        }
    }
}

impl From<MongoError> for ReconcileError {
    fn from(e: MongoError) -> Self {
        match e {
            MongoError::LeaseLost(lost) => ReconcileError::LeaseLost(lost),
            e @ MongoError::Unreachable(_) => ReconcileError::MongoUnreachable(e.to_string()),
            e => ReconcileError::Other(e.to_string()),
        }
    }
}

/// What a run did to one collection and its index.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CollectionSummary {
    pub collection: String,
    pub index_uid: String,
    /// Documents Meilisearch confirmed in this run.
    pub indexed: u64,
    /// Documents deleted from Meilisearch (gone or no longer indexable in Mongo).
    pub deleted: u64,
    /// Flags cleared (index rebuilt, drift, documents no longer indexable,
    /// documents changed while in flight).
    pub flags_cleared: u64,
    /// Flags set by an exact comparison on documents the index already held.
    pub flags_set: u64,
    /// Documents Meilisearch refused, left unacknowledged.
    pub rejected: Vec<Rejected>,
    /// Settings keys that were changed.
    pub settings_changed: Vec<String>,
    /// Why the index was rebuilt, if it was.
    pub rebuilt: Option<RebuildReason>,
    /// Unindexed documents left alone because they were below the threshold.
    pub skipped_by_threshold: Option<u64>,
    /// Whether the id sets were compared.
    pub compared_ids: bool,
    /// Hash partitions the id or document comparison ran in: 0 when none
    /// ran; above 1 when `sync.compare_memory` could not hold every id (or
    /// digest) at once, and each side was read once per partition.
    pub comparison_partitions: u64,
    /// What an exact comparison of every document found (before repairing),
    /// when one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<exact::Comparison>,
}

impl CollectionSummary {
    fn changed_anything(&self) -> bool {
        self.indexed > 0
            || self.deleted > 0
            || self.flags_cleared > 0
            || self.flags_set > 0
            || !self.rejected.is_empty()
            || !self.settings_changed.is_empty()
            || self.rebuilt.is_some()
    }
}

/// The outcome of one reconciliation.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub collections: Vec<CollectionSummary>,
    pub duration_ms: u64,
    /// Documents indexed per second of the whole run.
    pub docs_per_sec: f64,
    /// Nothing was changed (documents skipped by the threshold stay as they were).
    pub nothing_to_do: bool,
    /// Where the indexing time went ([`phases`]).
    pub phases: phases::Phases,
}

impl RunSummary {
    pub fn rejected_count(&self) -> usize {
        self.collections.iter().map(|c| c.rejected.len()).sum()
    }

    pub fn indexed(&self) -> u64 {
        self.collections.iter().map(|c| c.indexed).sum()
    }
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.collections {
            write!(f, "{} → {}: ", c.collection, c.index_uid)?;
            if !c.changed_anything() {
                write!(f, "nothing to do")?;
            } else {
                let mut parts = Vec::new();
                if let Some(reason) = &c.rebuilt {
                    parts.push(format!("rebuilt ({reason})"));
                }
                if !c.settings_changed.is_empty() {
                    parts.push(format!(
                        "settings changed: {}",
                        c.settings_changed.join(", ")
                    ));
                }
                parts.push(format!("indexed {}", c.indexed));
                if c.deleted > 0 {
                    parts.push(format!("deleted {}", c.deleted));
                }
                if c.flags_cleared > 0 {
                    parts.push(format!("flags cleared {}", c.flags_cleared));
                }
                if c.flags_set > 0 {
                    parts.push(format!("flags set {}", c.flags_set));
                }
                if !c.rejected.is_empty() {
                    let shown: Vec<String> = c
                        .rejected
                        .iter()
                        .take(5)
                        .map(|r| format!("{} ({})", r.id.as_deref().unwrap_or(&r.mongo_id), r.code))
                        .collect();
                    let more = c.rejected.len().saturating_sub(shown.len());
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    parts.push(format!(
                        "rejected {}: {}{more}",
                        c.rejected.len(),
                        shown.join(", ")
                    ));
                }
                write!(f, "{}", parts.join(", "))?;
            }
            if let Some(v) = &c.verified {
                write!(
                    f,
                    "; compared every document: {} missing, {} unexpected, {} stale before repair",
                    v.missing.count, v.unexpected.count, v.stale.count
                )?;
            }
            if let Some(n) = c.skipped_by_threshold {
                write!(f, "; {n} unindexed left below the threshold")?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "took {:.1} s, {:.0} docs/s",
            self.duration_ms as f64 / 1000.0,
            self.docs_per_sec
        )?;
        if self.phases != phases::Phases::default() {
            write!(f, " ({})", self.phases)?;
        }
        if self.nothing_to_do {
            write!(f, "; nothing to do")?;
        } else if self.rejected_count() > 0 {
            write!(f, "; completed with {} rejects", self.rejected_count())?;
        } else {
            write!(f, "; completed")?;
        }
        Ok(())
    }
}

/// Everything one collection's work needs.
pub(crate) struct Ctx<'a> {
    pub db: &'a Database,
    pub meili: &'a Meili,
    pub opts: &'a SyncOptions,
    pub guard: &'a Guard,
    pub progress: &'a Progress,
    pub collection: Collection,
    pub uid: String,
    /// Where the run's indexing time goes; shared by every context of a run.
    pub phases: Arc<phases::PhaseClock>,
    /// How sent documents are read back (a refused batch, an acknowledgement
    /// that did not match everything).
    pub read_back: crate::mongo::ReadBack,
}

impl<'a> Ctx<'a> {
    /// The context of `collection`'s work on index `uid`.
    pub fn new(
        db: &'a Database,
        meili: &'a Meili,
        opts: &'a SyncOptions,
        guard: &'a Guard,
        progress: &'a Progress,
        collection: Collection,
        uid: String,
    ) -> Ctx<'a> {
        Ctx {
            db,
            meili,
            opts,
            guard,
            progress,
            collection,
            uid,
            phases: Arc::default(),
            read_back: crate::mongo::ReadBack::default(),
        }
    }

    /// The same context for documents scattered over the collection (not
    /// read in `_id` order): they are read back by `_id` list.
    pub fn with_scattered_ids(mut self) -> Ctx<'a> {
        self.read_back = crate::mongo::ReadBack::Ids;
        self
    }

    /// The same context counting its phases on `phases` (the run's clock).
    pub fn with_phases(mut self, phases: &Arc<phases::PhaseClock>) -> Ctx<'a> {
        self.phases = Arc::clone(phases);
        self
    }

    /// The same work aimed at another index (e.g. a reindex's build target).
    pub fn on_index(&self, uid: String) -> Ctx<'a> {
        Ctx::new(
            self.db,
            self.meili,
            self.opts,
            self.guard,
            self.progress,
            self.collection,
            uid,
        )
        .with_phases(&self.phases)
    }

    /// Counts `n` documents done and logs the progress every few seconds.
    pub fn advance(&self, n: u64) {
        self.progress.advance(n);
        if self.progress.due_for_log(Duration::from_secs(5)) {
            let s = self.progress.snapshot();
            tracing::info!(
                phase = %s.phase,
                done = s.done,
                total = s.total,
                docs_per_sec = s.docs_per_sec.round() as u64,
                eta_secs = s.eta_secs,
                "progress"
            );
        }
    }

    pub fn phase(&self, name: &str, total: u64) {
        self.progress
            .phase(&format!("{name} {}", self.collection.name()), total);
    }

    /// Deletes documents from the index by Meilisearch id, waiting for each
    /// task (one per 10,000 ids). Returns how many ids were sent.
    pub async fn delete_documents(&self, ids: &[String]) -> Result<u64, ReconcileError> {
        for chunk in ids.chunks(10_000) {
            let task = self
                .meili
                .delete_documents(&self.uid, chunk, self.guard)
                .await?;
            self.meili
                .wait_ok(task, "delete documents", self.guard)
                .await?;
        }
        Ok(ids.len() as u64)
    }

    /// Drops `uid` if it exists (a leftover reindex build index), waiting
    /// for the task. Returns whether there was one.
    pub async fn drop_index(&self, uid: &str) -> Result<bool, ReconcileError> {
        if self.meili.index(uid).await?.is_none() {
            return Ok(false);
        }
        let task = self.meili.delete_index(uid, self.guard).await?;
        let outcome = self.meili.wait_for_task(task, self.guard).await?;
        if outcome
            .error
            .as_ref()
            .is_some_and(|e| e.code != "index_not_found")
        {
            outcome.into_result("delete index")?;
        }
        Ok(true)
    }
}

/// One reconciliation of both collections (docs/design.md §4), as lease owner:
/// settings and index structure first (waiting for their tasks before any
/// document write), then both collections concurrently, each in order: the
/// flag reset of a rebuild, drift repair, and indexing of unindexed
/// documents. The first error ends the run (the other collection's work is
/// dropped where it stands, as a crash would leave it: every step is
/// resumable).
pub async fn reconcile(
    mongo_db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
    guard: &Guard,
    progress: &Progress,
) -> Result<RunSummary, ReconcileError> {
    let started = Instant::now();
    progress.phase("plan", 0);
    let plan = plan::plan(mongo_db, meili, opts).await?;
    let desired = settings::desired(&opts.filterable_attributes);

    // Structure and settings of every index before any document is written.
    let mut summaries = Vec::new();
    for index in &plan.indexes {
        let mut summary = CollectionSummary {
            collection: index.collection.name().to_string(),
            index_uid: index.index_uid.clone(),
            ..Default::default()
        };
        summary.settings_changed = prepare_index(meili, index, &desired, guard, progress).await?;
        summaries.push(summary);
    }

    // The plan's counts are still the current ones when no settings task
    // ran since (on a large index one can take minutes); else each
    // collection counts again.
    let plan_counts_current = summaries.iter().all(|s| s.settings_changed.is_empty());

    // Then the collections side by side: while one waits for Meilisearch
    // or MongoDB the other progresses (each reports through its own lane).
    let phases = Arc::default();
    let lanes: Vec<Lane> = plan.indexes.iter().map(|_| progress.lane()).collect();
    let work = plan
        .indexes
        .iter()
        .zip(summaries.iter_mut())
        .zip(&lanes)
        .map(|((index, summary), lane)| {
            let ctx = Ctx::new(
                mongo_db,
                meili,
                opts,
                guard,
                lane,
                index.collection,
                index.index_uid.clone(),
            )
            .with_phases(&phases);
            async move { reconcile_collection(&ctx, index, plan_counts_current, summary).await }
        });
    futures::future::try_join_all(work).await?;
    drop(lanes);

    Ok(finish(summaries, started, &phases, progress))
}

/// The run's summary, logged; progress moves to `done`.
pub(crate) fn finish(
    summaries: Vec<CollectionSummary>,
    started: Instant,
    phases: &phases::PhaseClock,
    progress: &Progress,
) -> RunSummary {
    let elapsed = started.elapsed();
    let indexed: u64 = summaries.iter().map(|s| s.indexed).sum();
    let summary = RunSummary {
        nothing_to_do: !summaries.iter().any(CollectionSummary::changed_anything),
        collections: summaries,
        duration_ms: elapsed.as_millis() as u64,
        docs_per_sec: indexed as f64 / elapsed.as_secs_f64().max(1e-3),
        phases: phases.snapshot(),
    };
    progress.phase("done", 0);
    tracing::info!("reconciliation finished: {summary}");
    summary
}

/// The structure and settings of one index, before any document write:
/// (re)creates it when the plan says so, then applies the settings diff and
/// waits for it. Returns the settings keys changed.
pub(crate) async fn prepare_index(
    meili: &Meili,
    index: &IndexPlan,
    desired: &serde_json::Map<String, serde_json::Value>,
    guard: &Guard,
    progress: &Progress,
) -> Result<Vec<String>, ReconcileError> {
    let recreate = index
        .rebuild
        .as_ref()
        .is_some_and(RebuildReason::recreates_index);
    let diff = if recreate {
        progress.phase(&format!("rebuild {}", index.collection.name()), 0);
        rebuild::recreate_index(
            meili,
            &index.index_uid,
            index.collection.primary_key(),
            index.exists,
            guard,
        )
        .await?;
        settings::diff(&meili.settings(&index.index_uid).await?, desired)
    } else {
        index.settings_to_apply.clone()
    };
    progress.phase(&format!("settings {}", index.collection.name()), 0);
    Ok(settings::apply(meili, &index.index_uid, &diff, guard).await?)
}

/// One collection's flag reset (when rebuilding), the exact comparison an
/// interrupted reindex left pending (or `--deep` asked for) or else the
/// id-set drift repair, the removal of a leftover reindex build index, and
/// indexing.
///
/// `plan_counts_current`: nothing was written since `index` was planned, so
/// its counts (MongoDB's and the index's) decide the drift check and the
/// threshold instead of counting again — on a large collection the count
/// aggregation reads every document.
pub(crate) async fn reconcile_collection(
    ctx: &Ctx<'_>,
    index: &IndexPlan,
    plan_counts_current: bool,
    summary: &mut CollectionSummary,
) -> Result<(), ReconcileError> {
    if let Some(reason) = &index.rebuild {
        tracing::info!(index = %ctx.uid, %reason, "rebuilding");
        summary.flags_cleared += rebuild::reset_flags(ctx).await?;
        summary.rebuilt = Some(reason.clone());
    }

    let mut repaired = false;
    // The counts the threshold decision needs, when still current.
    let mut current_counts = None;
    if (index.exact_comparison_pending || ctx.opts.deep) && index.rebuild.is_none() {
        if index.exact_comparison_pending {
            tracing::info!(index = %ctx.uid, "an interrupted reindex left this index unverified: comparing every document");
        }
        ctx.phase("compare", 0);
        let (comparison, repairs) = exact::compare(
            ctx,
            exact::Mode::Repair {
                skip: &HashSet::new(),
            },
        )
        .await?;
        repaired = !comparison.is_exact();
        summary.compared_ids = true;
        summary.comparison_partitions = comparison.partitions;
        summary.verified = Some(comparison);
        summary.indexed += repairs.indexed;
        summary.deleted += repairs.deleted;
        summary.flags_set += repairs.flags_set;
        summary.flags_cleared += repairs.flags_cleared;
        summary.rejected.extend(repairs.rejected);
    } else {
        let (counts, in_meili) = if plan_counts_current && index.rebuild.is_none() {
            (index.mongo, index.meili_documents)
        } else {
            let now = mongo::server_time(ctx.db).await?;
            let counts = mongo::counts(ctx.db, ctx.collection, now).await?;
            (counts, ctx.meili.document_count(&ctx.uid).await?)
        };
        if ctx.opts.force || in_meili != counts.indexed {
            tracing::info!(index = %ctx.uid, in_meili, flagged_indexable = counts.indexed,
                forced = ctx.opts.force, "comparing id sets (the index's count differs from MongoDB's, or forced)");
            summary.compared_ids = true;
            let outcome = orphans::repair(ctx).await?;
            summary.comparison_partitions = outcome.partitions;
            summary.deleted += outcome.deleted;
            summary.flags_cleared += outcome.flags_cleared;
            repaired = outcome.deleted + outcome.flags_cleared > 0;
        }
        if !repaired {
            current_counts = Some(counts);
        }
    }
    if index.exact_comparison_pending {
        // The flags are exact now (compared, or reset by the rebuild).
        marker::clear(ctx.db, ctx.opts, &ctx.uid, ctx.guard).await?;
    }
    if index.leftover_build_index {
        // We hold the lease, so no reindex is running: whatever
        // `<uid>_reindex` holds (a half build, or the old index after a
        // swap) is not live and goes.
        let build = reindex::build_uid(&ctx.uid);
        if ctx.drop_index(&build).await? {
            tracing::info!(index = %build, "dropped the index an interrupted reindex left");
        }
    }

    let counts = match current_counts {
        Some(counts) => counts,
        None => {
            let now = mongo::server_time(ctx.db).await?;
            mongo::counts(ctx.db, ctx.collection, now).await?
        }
    };
    if counts.unindexed == 0 {
        return Ok(());
    }
    let exempt = ctx.opts.force || summary.rebuilt.is_some() || repaired || counts.indexed == 0;
    if counts.unindexed < ctx.opts.threshold && !exempt {
        tracing::info!(
            index = %ctx.uid,
            unindexed = counts.unindexed,
            threshold = ctx.opts.threshold,
            "below the sync threshold: skipped"
        );
        summary.skipped_by_threshold = Some(counts.unindexed);
        return Ok(());
    }
    let skip: HashSet<String> = summary
        .rejected
        .iter()
        .map(|r| r.mongo_id_key.clone())
        .collect();
    let outcome = sync::index_unindexed(ctx, counts.unindexed, &skip).await?;
    summary.indexed += outcome.indexed;
    summary.deleted += outcome.deleted;
    summary.flags_cleared += outcome.flags_cleared;
    summary.rejected.extend(outcome.rejected);
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

    #[test]
    fn summary_says_nothing_to_do_or_counts_rejects() {
        let mut summary = RunSummary {
            collections: vec![CollectionSummary {
                collection: "messages".into(),
                index_uid: "messages".into(),
                ..Default::default()
            }],
            nothing_to_do: true,
            ..Default::default()
        };
        assert!(summary.to_string().contains("nothing to do"));
        summary.nothing_to_do = false;
        summary.collections[0].indexed = 999;
        summary.collections[0].rejected.push(Rejected {
            id: Some("bad|id".into()),
            mongo_id: "1".into(),
            code: "invalid_document_id".into(),
            message: String::new(),
            mongo_id_key: "1".into(),
        });
        let text = summary.to_string();
        assert!(text.contains("indexed 999"), "{text}");
        assert!(text.contains("bad|id (invalid_document_id)"), "{text}");
        assert!(text.contains("completed with 1 rejects"), "{text}");
    }
}
