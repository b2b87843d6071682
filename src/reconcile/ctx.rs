//! [`Ctx`]: what every step of one collection's work is handed (the servers,
//! the options, the lease guard, the progress lane, the collection and its
//! index, the run's phase clock), with the few helpers the steps share
//! (progress, counting, deleting documents, dropping an index, waiting
//! for a task another may have done already); and [`Run`], what every
//! collection's context in one run is made from. Below every step, which
//! all take it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongodb::bson::{Bson, DateTime, RawDocumentBuf};
use mongodb::Database;
use tokio::sync::watch;

use super::error::ReconcileError;
use super::options::SyncOptions;
use super::phases;
use crate::lease::Guard;
use crate::meili::{Meili, MeiliError};
use crate::mongo::{self, Collection};
use crate::progress::Progress;

/// What every collection's work in one run (a reconciliation, a reindex,
/// `verify`) shares: the servers, the options, the lease guard, the
/// progress, when the run started and its phase clock.
pub(crate) struct Run<'a> {
    pub(crate) db: &'a Database,
    pub(crate) meili: &'a Meili,
    pub(crate) opts: &'a SyncOptions,
    pub(crate) guard: &'a Guard,
    pub(crate) progress: &'a Progress,
    pub(crate) started: Instant,
    pub(crate) phases: Arc<phases::PhaseClock>,
}

impl<'a> Run<'a> {
    /// A run starting now.
    pub(crate) fn new(
        db: &'a Database,
        meili: &'a Meili,
        opts: &'a SyncOptions,
        guard: &'a Guard,
        progress: &'a Progress,
    ) -> Run<'a> {
        Run {
            db,
            meili,
            opts,
            guard,
            progress,
            started: Instant::now(),
            phases: Arc::default(),
        }
    }

    /// The context of `collection`'s work on its index, reporting through
    /// `progress` (the run's, or a lane of it) and timed on the run's clock.
    pub(crate) fn ctx<'b>(&'b self, collection: Collection, progress: &'b Progress) -> Ctx<'b> {
        Ctx {
            db: self.db,
            meili: self.meili,
            opts: self.opts,
            guard: self.guard,
            progress,
            collection,
            uid: collection.index_uid(&self.opts.index_prefix),
            phases: Arc::clone(&self.phases),
            read_back: crate::mongo::ReadBack::default(),
            ack_gate: None,
        }
    }
}

/// Everything one collection's work needs.
pub(crate) struct Ctx<'a> {
    pub(crate) db: &'a Database,
    pub(crate) meili: &'a Meili,
    pub(crate) opts: &'a SyncOptions,
    pub(crate) guard: &'a Guard,
    progress: &'a Progress,
    pub(crate) collection: Collection,
    pub(crate) uid: String,
    /// Where the run's indexing time goes; shared by every context of a run.
    pub(crate) phases: Arc<phases::PhaseClock>,
    /// How sent documents are read back (a refused batch, an acknowledgement
    /// that did not match everything).
    pub(crate) read_back: crate::mongo::ReadBack,
    /// When set, no acknowledgement is written until it reads `true`: a
    /// head start's documents are sent while the plan counts, and the
    /// counts must see MongoDB as it was before the run wrote a flag.
    pub(crate) ack_gate: Option<watch::Receiver<bool>>,
}

impl<'a> Ctx<'a> {
    /// The same context for documents scattered over the collection (not
    /// read in `_id` order): they are read back by `_id` list.
    pub(crate) fn with_scattered_ids(mut self) -> Ctx<'a> {
        self.read_back = crate::mongo::ReadBack::Ids;
        self
    }

    /// Waits until acknowledgements may be written ([`Ctx::ack_gate`]).
    /// `false`: the gate was dropped closed, nothing may be acknowledged.
    pub(crate) async fn ack_gate_open(&self) -> bool {
        // Asked before every batch: open, it costs a look, not a clone.
        let Some(gate) = self.ack_gate.as_ref().filter(|gate| !*gate.borrow()) else {
            return true;
        };
        let mut gate = gate.clone();
        tracing::debug!(index = %self.uid, "acknowledgement waits for the plan's counts");
        let waiting = std::time::Instant::now();
        let open = gate.wait_for(|open| *open).await.is_ok();
        let ms = waiting.elapsed().as_millis() as u64;
        tracing::debug!(index = %self.uid, open, ms, "acknowledgement no longer waits for the plan's counts");
        open
    }

    /// The same work aimed at another index (e.g. a reindex's build target).
    pub(crate) fn on_index(&self, uid: String) -> Ctx<'a> {
        Ctx {
            uid,
            phases: Arc::clone(&self.phases),
            read_back: mongo::ReadBack::default(),
            ack_gate: None,
            ..*self
        }
    }

    /// The next page (`sync.batch_docs` documents after `after`, by `_id`)
    /// of the collection's unindexed documents (those `backlog` selects),
    /// or of all its searchable ones (`None`), at MongoDB's time `now`,
    /// filtered by the server.
    pub(crate) async fn read_page(
        &self,
        backlog: Option<mongo::Backlog>,
        now: DateTime,
        after: Option<&Bson>,
    ) -> Result<Vec<RawDocumentBuf>, ReconcileError> {
        let (rules, limit) = (&self.opts.rules, self.opts.batch_docs.max(1));
        let (db, collection) = (self.db, self.collection);
        Ok(match backlog {
            Some(backlog) => {
                mongo::read_unindexed_page(db, rules, collection, now, backlog, after, limit)
                    .await?
            }
            None => mongo::read_indexable_page(db, rules, collection, now, after, limit).await?,
        })
    }

    /// MongoDB's counts of the collection at its current time.
    pub(crate) async fn counts(&self) -> Result<mongo::Counts, ReconcileError> {
        let now = mongo::server_time(self.db).await?;
        Ok(mongo::counts(self.db, &self.opts.rules, self.collection, now).await?)
    }

    /// Counts `n` documents done and logs the progress every few seconds.
    pub(crate) fn advance(&self, n: u64) {
        self.progress.advance(n);
        if self.progress.due_for_log(Duration::from_secs(5)) {
            let s = self.progress.snapshot();
            tracing::info!(phase = %s.phase, done = s.done, total = s.total,
                docs_per_sec = s.docs_per_sec.round() as u64, eta_secs = s.eta_secs, "progress");
        }
    }

    pub(crate) fn phase(&self, name: &str, total: u64) {
        self.progress
            .phase(&format!("{name} {}", self.collection.name()), total);
    }

    /// Deletes documents from the index by Meilisearch id, waiting for each
    /// task (one per 10,000 ids). Returns how many ids were sent.
    pub(crate) async fn delete_documents(&self, ids: &[String]) -> Result<u64, ReconcileError> {
        let (meili, guard) = (self.meili, self.guard);
        for chunk in ids.chunks(10_000) {
            let task = meili.delete_documents(&self.uid, chunk, guard).await?;
            meili.wait_ok(task, "delete documents", guard).await?;
        }
        Ok(ids.len() as u64)
    }

    /// Drops `uid` if it exists (a leftover reindex build index), waiting
    /// for the task. Returns whether there was one.
    pub(crate) async fn drop_index(&self, uid: &str) -> Result<bool, ReconcileError> {
        if self.meili.index(uid).await?.is_none() {
            return Ok(false);
        }
        let task = self.meili.delete_index(uid, self.guard).await?;
        let (meili, guard) = (self.meili, self.guard);
        wait_tolerating(meili, task, "index_not_found", "delete index", guard).await?;
        Ok(true)
    }
}

/// Waits for `task`, failing unless it succeeded or failed with error code
/// `tolerated` (someone else did the same meanwhile).
pub(crate) async fn wait_tolerating(
    meili: &Meili,
    task: u64,
    tolerated: &str,
    what: &str,
    guard: &Guard,
) -> Result<(), MeiliError> {
    let outcome = meili.wait_for_task(task, guard).await?;
    if outcome.error.as_ref().is_some_and(|e| e.code != tolerated) {
        outcome.into_result(what)?;
    }
    Ok(())
}
