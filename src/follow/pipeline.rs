//! The micro-batches in flight (docs/design.md §4.12, "The pipeline").
//!
//! Meilisearch has a fixed cost per indexing batch (≈ 0.7 s for one
//! document on a 2-core machine with Meilisearch 1.50), processes an
//! index's tasks in the order they were enqueued, and merges the tasks it
//! finds waiting into one indexing batch. So the owner does not wait for
//! a micro-batch's task before enqueueing the next: up to [`DEPTH`]
//! micro-batches are in flight at once — enqueued, their tasks processing
//! or waiting — and a change that arrives while one is processing is
//! enqueued at once, to be indexed with the next batch Meilisearch starts,
//! instead of waiting for the whole apply of the one before it.
//!
//! What stays in order, and why that is enough:
//!
//! 1. **Every Meilisearch write of a micro-batch is enqueued before any of
//!    the next one's** (its deletions as well as its additions): the owner
//!    enqueues one micro-batch at a time, to the end, and Meilisearch
//!    applies them in that order. Changes are read (`updateLookup`) in
//!    stream order, so for any document the later write carries the later
//!    read: Meilisearch ends with the newest state read.
//! 2. **Settling is exclusive and in order.** The oldest micro-batch is
//!    settled — poison isolation, the version-exact acknowledgement with
//!    its read-back and repairs, removal markers — only after all its tasks
//!    ended, and the owner runs it to the end before it prepares or
//!    enqueues anything else (it is one task; settling and enqueueing never
//!    interleave). Settling can write to Meilisearch again (a refused batch
//!    read again and bisected, a document found deleted while in flight
//!    deleted again), and such a late write carries a state read *during*
//!    the settling: newer than what any micro-batch enqueued before it read,
//!    and no micro-batch is enqueued between that read and the write. So
//!    the later write still carries the later read (1), and a micro-batch
//!    prepared after the settling sees its flags (the flush-time check
//!    leaves out a document flagged meanwhile instead of sending an older
//!    read over it).
//! 3. **Acknowledgements in micro-batch order.** A statement flags only
//!    the exact version it names, and only once that version's task
//!    succeeded; by (1) and (2) the last write Meilisearch holds for a
//!    document carries the newest state read, and a statement for an
//!    older version no longer matches MongoDB. An older micro-batch's
//!    acknowledgement that finds its version changed clears the flag by
//!    `_id` (§4.7); in order, that clear comes before the newer
//!    micro-batch's statement sets it, never after.
//! 4. **Resume tokens in order, never ahead.** A micro-batch's token
//!    becomes the safe point only once it and every micro-batch before it
//!    are settled; a token that arrives with nothing of its own (a stream
//!    caught up, an acknowledgement event) waits behind the newest
//!    micro-batch in flight. Whatever is in flight when the owner stops —
//!    lease lost, shutdown, a failure — is replayed from the saved token by
//!    the next owner: its unsettled writes are at most unflagged.
//! 5. **Drained before anything else writes.** A handover, a periodic
//!    reconciliation, an id-set comparison, an expiry sweep, a reopened
//!    stream: all begin with the pipeline empty (everything settled, the
//!    token saved).
//!
//! Memory: at most [`DEPTH`] micro-batches in flight, each holding per
//! document only what its acknowledgement needs (the NDJSON goes with the
//! request) and its times.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use futures::{stream, StreamExt, TryStreamExt};
use mongodb::bson::{DateTime, Document};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use super::apply::{Enqueued, Group};
use super::latency::{self, BatchTimes, DocTimes, Settlings, TaskTimes};
use crate::lease::Guard;
use crate::meili::{Meili, MeiliError, TaskOutcome};
use crate::reconcile::{ReconcileError, Run};

/// Most micro-batches in flight at once.
pub(crate) const DEPTH: usize = 32;

/// One micro-batch in flight.
pub(crate) struct InFlight {
    pub(crate) enqueued: Enqueued,
    /// Where to resume once it (and everything before it) is settled.
    pub(crate) token: Option<Document>,
    pub(crate) by_op: BTreeMap<&'static str, u64>,
    /// Its newest change's time (MongoDB's).
    pub(crate) newest: Option<DateTime>,
    /// The stream had nothing more after it.
    pub(crate) caught_up: bool,
    pub(crate) written: Vec<DocTimes>,
    pub(crate) times: BatchTimes,
}

/// What settling micro-batches gives the owner.
#[derive(Default)]
pub(crate) struct Settled {
    /// The newest settled micro-batch's token.
    pub(crate) token: Option<Document>,
    pub(crate) by_op: BTreeMap<&'static str, u64>,
    pub(crate) newest: Option<DateTime>,
    pub(crate) caught_up: bool,
}

/// A micro-batch's tasks all ended: their outcomes (in the order enqueued)
/// and when that was seen.
type TasksEnded = Result<(Vec<TaskOutcome>, Instant), MeiliError>;

/// The micro-batches in flight, oldest first, and what is known of their
/// tasks: a task of its own (the waiter) polls them one micro-batch after
/// the other — an ended task answers its first poll, so micro-batches that
/// Meilisearch indexed together are all seen ended at once — while the
/// owner's loop gathers, enqueues and settles.
pub(crate) struct Pipeline {
    queue: VecDeque<InFlight>,
    /// The ended micro-batches' outcomes, for the oldest ones of `queue`.
    ended: VecDeque<TasksEnded>,
    to_waiter: mpsc::UnboundedSender<Vec<u64>>,
    from_waiter: mpsc::UnboundedReceiver<TasksEnded>,
    _waiter: AbortOnDropHandle<()>,
    last_enqueued: Option<Instant>,
    settlings: Settlings,
}

impl Pipeline {
    /// `meili`: the client that polls the tasks (follow mode's polling).
    pub(crate) fn new(meili: Meili, guard: Guard) -> Self {
        let (to_waiter, tasks) = mpsc::unbounded_channel();
        let (ended, from_waiter) = mpsc::unbounded_channel();
        Pipeline {
            queue: VecDeque::new(),
            ended: VecDeque::new(),
            to_waiter,
            from_waiter,
            _waiter: AbortOnDropHandle::new(tokio::spawn(wait(meili, guard, tasks, ended))),
            last_enqueued: None,
            settlings: Settlings::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether another micro-batch may be enqueued.
    pub(crate) fn has_room(&self) -> bool {
        self.queue.len() < DEPTH
    }

    /// When the last micro-batch was enqueued.
    pub(crate) fn last_enqueued(&self) -> Option<Instant> {
        self.last_enqueued
    }

    /// A micro-batch whose writes were just enqueued.
    pub(crate) fn push(&mut self, in_flight: InFlight) {
        self.last_enqueued = Some(in_flight.times.enqueued);
        // The waiter outlives the pipeline's use: a send fails only once
        // it stopped on an error, which it reported first.
        let _ = self.to_waiter.send(in_flight.enqueued.tasks());
        self.queue.push_back(in_flight);
    }

    /// A resume token read after everything handed over so far: returned
    /// when nothing is in flight (it is safe now), otherwise it becomes
    /// the newest micro-batch's (safe once that one is settled).
    pub(crate) fn token_after(&mut self, token: Document, caught_up: bool) -> Option<Document> {
        match self.queue.back_mut() {
            None => Some(token),
            Some(newest) => {
                newest.token = Some(token);
                newest.caught_up = caught_up;
                None
            }
        }
    }

    /// A change arrived: the newest micro-batch in flight is no longer the
    /// end of the stream.
    pub(crate) fn behind(&mut self) {
        if let Some(newest) = self.queue.back_mut() {
            newest.caught_up = false;
        }
    }

    /// Until the oldest micro-batch's tasks have all ended (never, when
    /// nothing is in flight). Cancel-safe.
    pub(crate) async fn head_ended(&mut self) {
        if !self.ended.is_empty() {
            return;
        }
        if self.queue.is_empty() {
            std::future::pending::<()>().await;
        }
        let ended = self.from_waiter.recv().await.unwrap_or_else(|| {
            Err(MeiliError::Unexpected {
                what: "waiting for tasks".into(),
                detail: "the waiter stopped".into(),
            })
        });
        self.ended.push_back(ended);
    }

    /// Settles the oldest micro-batch (waiting for its tasks if need be)
    /// and the following ones whose tasks ended too, as one group: each
    /// one's tasks in order (poison isolation included), then one
    /// version-exact acknowledgement of them all. The group ends after a
    /// micro-batch whose isolation sent documents again, so that no
    /// acknowledgement merges versions across such a late write, and once
    /// it holds `max_docs` documents to acknowledge: nothing else may be
    /// prepared or enqueued while it is settled (module documentation), so
    /// its size bounds that pause. Records their stages (`latency`).
    /// `None` when nothing is in flight.
    pub(crate) async fn settle_ended(
        &mut self,
        target: &Run<'_>,
        max_docs: usize,
    ) -> Result<Option<Settled>, ReconcileError> {
        if self.queue.is_empty() {
            return Ok(None);
        }
        if self.ended.is_empty() {
            self.head_ended().await;
        }
        while let Ok(ended) = self.from_waiter.try_recv() {
            self.ended.push_back(ended);
        }
        let settling = Instant::now();
        let mut group = Group::default();
        let mut settled = Settled::default();
        let mut members = 0;
        while let Some(ended) = self.ended.pop_front() {
            let (outcomes, seen) = ended?;
            let oldest = self
                .queue
                .pop_front()
                .expect("an ended wait has its micro-batch");
            members += 1;
            let tasks = TaskTimes::of(outcomes.iter().map(|o| &o.raw));
            let mut by_uid: HashMap<u64, TaskOutcome> =
                outcomes.into_iter().map(|o| (o.uid, o)).collect();
            let isolated = oldest
                .enqueued
                .settle_tasks(target, &mut by_uid, &mut group)
                .await?;
            latency::record(&self.settlings, &oldest.written, &oldest.times, tasks, seen);
            settled.token = oldest.token.or(settled.token);
            for (op, n) in oldest.by_op {
                *settled.by_op.entry(op).or_default() += n;
            }
            settled.newest = settled.newest.max(oldest.newest);
            settled.caught_up = oldest.caught_up;
            if isolated || group.accepted() >= max_docs {
                break;
            }
        }
        let acknowledged = group.accepted();
        group.acknowledge(target).await?;
        settled.caught_up &= self.queue.is_empty();
        tracing::debug!(
            micro_batches = members,
            acknowledged,
            ms = settling.elapsed().as_millis() as u64,
            "micro-batches settled"
        );
        self.settlings.settled(settling);
        Ok(Some(settled))
    }
}

/// The waiter: waits for each micro-batch's tasks in turn (`tasks`, in
/// the order enqueued) and reports them ended (`ended`); stops after an
/// error, which it reports.
async fn wait(
    meili: Meili,
    guard: Guard,
    mut tasks: mpsc::UnboundedReceiver<Vec<u64>>,
    ended: mpsc::UnboundedSender<TasksEnded>,
) {
    while let Some(batch) = tasks.recv().await {
        let waits = stream::iter(batch).then(|task| meili.wait_for_task(task, &guard));
        let report = waits.try_collect().await;
        let report = report.map(|outcomes| (outcomes, Instant::now()));
        let stop = report.is_err();
        if ended.send(report).is_err() || stop {
            return;
        }
    }
}
