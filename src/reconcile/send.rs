//! The sender and the acknowledger (docs/design.md §4.6): batches are
//! enqueued in Meilisearch within the in-flight budget, each task is settled
//! (poison documents isolated by [`super::rejects`]), and the accepted
//! documents are acknowledged version-exactly ([`super::ack`]) beside the
//! sender. Every feed hands its batches here: the pipelined indexer
//! (`sync`), follow mode's documents (`apply`) and the exact comparison's
//! repairs (`exact`); what the sender did is a [`Tally`].

use std::collections::VecDeque;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use mongodb::bson::Bson;
use tokio::sync::{mpsc, watch};

use super::ack::{self, Tally};
use super::batch::{ndjson_line, Batch, BatchDoc};
use super::ctx::Ctx;
use super::error::ReconcileError;
use super::options::SyncOptions;
use super::packed::Packed;
use super::phases::Phase;
use super::rejects::{self, Rejected};
use crate::librechat::searchable;
use crate::meili::TaskOutcome;
use crate::mongo;

/// Most `_id`s of documents changed while in flight a pass keeps to send
/// again (five batches' worth): beyond that the next pass reads the
/// collection instead, so memory stays bounded by the settings whatever
/// others edit during a run.
pub(crate) fn max_changed_ids(opts: &SyncOptions) -> usize {
    5 * opts.batch_docs.max(1)
}

/// Batches whose accepted documents wait for their acknowledgement: a
/// bounded queue between the sender and the acknowledger.
const ACK_QUEUE_BATCHES: usize = 4;

/// What the sender tells the reader that feeds it (docs/design.md §4.6,
/// Reader): how many batches it has taken off the queue, and whether it has
/// room to enqueue another right now. The reader begins a page only when
/// the sender has taken every batch handed to it and has room, so a run the
/// budget holds back never holds a finished batch — up to `sync.batch_bytes`
/// of NDJSON — waiting for room: a batch is built when it can be sent.
/// Before anything is sent (the default): room, nothing taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Demand {
    /// Batches taken off the queue so far.
    taken: u64,
    /// No room in Meilisearch (the budget and `in_flight`) for one more.
    full: bool,
}

impl Demand {
    /// Whether a reader that has handed over `handed` batches should read on.
    pub(crate) fn wants_more_after(&self, handed: u64) -> bool {
        self.taken == handed && !self.full
    }
}

/// Sends batches, keeping at most `max_bytes_in_flight` bytes of NDJSON (and
/// `in_flight` tasks) enqueued in Meilisearch and not yet ended, so that
/// Meilisearch finds several tasks of the index enqueued and merges them into
/// one indexing batch; settles each task (wait, isolate rejects) and, when
/// `acknowledge`, hands its accepted documents to the acknowledger, which
/// runs beside the sender. `demand`, when given, tells the reader when to
/// build the next batch ([`Demand`]).
pub(crate) async fn send_batches(
    ctx: &Ctx<'_>,
    acknowledge: bool,
    rx: mpsc::Receiver<Batch>,
    demand: Option<watch::Sender<Demand>>,
) -> Result<Tally, ReconcileError> {
    let (ack_tx, ack_rx) = mpsc::channel::<Packed>(ACK_QUEUE_BATCHES);
    let sending = enqueue_and_settle(ctx, rx, acknowledge, ack_tx, demand);
    let (mut settled, mut acked) = tokio::try_join!(sending, acknowledge_queue(ctx, ack_rx))?;
    // What it indexed, not flags set on documents the index already held.
    acked.flags_set = 0;
    settled.add(acked);
    Ok(settled)
}

/// The sender: enqueues batches within the in-flight budget, settles their
/// tasks and hands the settled batches to the acknowledger.
///
/// It never waits on the acknowledger while it has room to enqueue: when
/// Meilisearch ends a merged indexing batch, all of its tasks end at once,
/// and handing them over one by one to a queue of [`ACK_QUEUE_BATCHES`]
/// would leave Meilisearch with nothing enqueued until most of them were
/// acknowledged. Settled batches wait in the sender instead, and their bytes
/// keep counting against `max_bytes_in_flight` until the acknowledger takes
/// them, so memory stays bounded by the budget either way; a slow
/// acknowledger still holds enqueueing back, through the budget.
///
/// Whether it has room is published in `demand` at every turn, and taken
/// away the moment it takes a batch, until that batch is enqueued and the
/// budget looked at again.
async fn enqueue_and_settle(
    ctx: &Ctx<'_>,
    mut rx: mpsc::Receiver<Batch>,
    acknowledge: bool,
    ack_tx: mpsc::Sender<Packed>,
    demand: Option<watch::Sender<Demand>>,
) -> Result<Tally, ReconcileError> {
    let max_tasks = ctx.opts.in_flight.max(1);
    let max_bytes = ctx.opts.max_bytes_in_flight.max(1);
    // NDJSON bytes of the tasks not yet ended plus those of `unhanded`.
    let mut bytes_held = 0usize;
    let mut pending = FuturesUnordered::new();
    // Settled batches the acknowledger has not taken yet, with their bytes.
    let mut unhanded: VecDeque<(usize, Packed)> = VecDeque::new();
    let mut settled = Tally::default();
    let mut open = true;
    while open || !pending.is_empty() || !unhanded.is_empty() {
        let room = open && pending.len() < max_tasks && bytes_held < max_bytes;
        if let Some(demand) = &demand {
            demand.send_if_modified(|d| std::mem::replace(&mut d.full, !room) == room);
        }
        let idle = match (room, unhanded.is_empty()) {
            (true, _) => Phase::PipelineWaited,
            (false, false) => Phase::AckWaited,
            (false, true) => Phase::MeiliWait,
        };
        let waiting = Instant::now();
        tokio::select! {
            Some(done) = pending.next(), if !pending.is_empty() => {
                ctx.phases.add(idle, waiting.elapsed());
                let done: Done = done?;
                settled.indexed += done.accepted.len() as u64;
                settled.rejected.extend(done.rejected);
                if acknowledge && !done.accepted.is_empty() {
                    unhanded.push_back((done.bytes, done.accepted));
                } else {
                    bytes_held -= done.bytes;
                    ctx.advance(done.accepted.len() as u64);
                }
            }
            permit = ack_tx.reserve(), if !unhanded.is_empty() => {
                ctx.phases.add(idle, waiting.elapsed());
                let Ok(permit) = permit else {
                    // The acknowledger stopped; its error is reported.
                    return Ok(settled);
                };
                let (bytes, docs) = unhanded.pop_front().expect("not empty");
                bytes_held -= bytes;
                permit.send(docs);
            }
            batch = rx.recv(), if room => {
                ctx.phases.add(idle, waiting.elapsed());
                match batch {
                    Some(batch) => {
                        if let Some(demand) = &demand {
                            demand.send_modify(|d| {
                                d.taken += 1;
                                d.full = true;
                            });
                        }
                        let enqueued = enqueue(ctx, batch).await?;
                        bytes_held += enqueued.bytes;
                        pending.push(settle(ctx, enqueued));
                    }
                    None => open = false,
                }
            }
        }
    }
    Ok(settled)
}

/// The acknowledger: acknowledges queued documents version-exactly, one
/// batch after another, until the sender is done.
async fn acknowledge_queue(
    ctx: &Ctx<'_>,
    mut rx: mpsc::Receiver<Packed>,
) -> Result<Tally, ReconcileError> {
    let mut total = Tally::default();
    while let Some(packed) = rx.recv().await {
        // A head start's first settled batch waits here for the plan's
        // counts (`Ctx::ack_gate`); closed, the run dropped the head start.
        if !ctx.ack_gate_open().await {
            return Ok(total);
        }
        let started = Instant::now();
        let docs = packed.unpack();
        let mut acked = ack::acknowledge(ctx, &docs).await?;
        ctx.phases.add(Phase::Ack, started.elapsed());
        if total.changed.len() + acked.changed.len() > max_changed_ids(ctx.opts) {
            total.changed_overflowed = true;
            acked.changed.clear();
        }
        total.add(acked);
        ctx.advance(docs.len() as u64);
    }
    Ok(total)
}

/// The documents of a refused batch as they are now, with their NDJSON:
/// read back per run of one `_id` type (by range or list, `Ctx::read_back`), keeping those of
/// the batch that are still searchable (`searchable::searchable_branch` at MongoDB's
/// clock; whatever their flag, as every feed sends: a reindex's build and the
/// exact comparison's repairs send flagged documents too). A document deleted
/// or made unindexable meanwhile is left out: the refused task indexed
/// nothing, so nothing of it is searchable.
async fn reread(ctx: &Ctx<'_>, refused: &[BatchDoc]) -> Result<Batch, ReconcileError> {
    let now = mongo::server_time(ctx.db).await?;
    let mut batch = Batch::default();
    for run in ack::same_type_runs(refused) {
        let ids: Vec<Bson> = run.iter().map(|d| d.mongo_id()).collect();
        let rules = &ctx.opts.rules;
        let docs =
            mongo::read_documents(ctx.db, rules, ctx.collection, &ids, ctx.read_back).await?;
        for doc in &docs {
            let Some(branch) = searchable::searchable_branch(rules, ctx.collection, doc, now)
            else {
                continue;
            };
            let line = ndjson_line(ctx.collection, doc)?;
            batch.push_document(ctx.collection, doc, branch, &line);
        }
    }
    Ok(batch)
}

/// A batch whose task is enqueued: its documents, packed (the NDJSON went
/// with the request), the bytes it held, its task and when it was sent.
pub(crate) struct Enqueued {
    docs: Packed,
    bytes: usize,
    pub(crate) task: u64,
    pub(crate) sent: Instant,
}

/// Enqueues `batch` in Meilisearch (the guard checked first); its NDJSON is
/// freed when the request ends.
pub(crate) async fn enqueue(ctx: &Ctx<'_>, batch: Batch) -> Result<Enqueued, ReconcileError> {
    let sent = Instant::now();
    let (payload, docs) = batch.into_payload_and_docs();
    let docs = Packed::pack(docs);
    let bytes = payload.len();
    let (meili, uid, guard) = (ctx.meili, &ctx.uid, ctx.guard);
    let task = meili.add_documents_ndjson(uid, payload, guard).await?;
    ctx.phases.add(Phase::Send, sent.elapsed());
    Ok(Enqueued {
        docs,
        bytes,
        task,
        sent,
    })
}

/// A settled task: the bytes it held in flight, the documents Meilisearch
/// accepted (in `_id` order, packed) and those it rejected.
pub(crate) struct Done {
    bytes: usize,
    pub(crate) accepted: Packed,
    pub(crate) rejected: Vec<Rejected>,
}

/// Waits for a batch's task; on a document error isolates the rejected
/// documents.
async fn settle(ctx: &Ctx<'_>, enqueued: Enqueued) -> Result<Done, ReconcileError> {
    super::test_hook::pause_after("batch-enqueued").await;
    let outcome = ctx.meili.wait_for_task(enqueued.task, ctx.guard).await?;
    settle_outcome(ctx, enqueued, outcome).await
}

/// What a batch's ended task means (its latency counted): every document
/// accepted, or — on a document error — the batch read again from MongoDB
/// (its NDJSON was dropped when it was enqueued: the current versions of
/// the documents still to index) and bisected (§4.8), the rejected ones
/// set apart. Any other failure is an error.
pub(crate) async fn settle_outcome(
    ctx: &Ctx<'_>,
    enqueued: Enqueued,
    outcome: TaskOutcome,
) -> Result<Done, ReconcileError> {
    crate::metrics::batch_latency(enqueued.sent.elapsed());
    let Enqueued {
        docs, bytes, task, ..
    } = enqueued;
    let Some(error) = &outcome.error else {
        // Everything accepted: the documents stay packed for the acknowledger.
        return Ok(Done {
            bytes,
            accepted: docs,
            rejected: Vec::new(),
        });
    };
    if !rejects::is_document_error(&error.code) {
        return Err(outcome.into_result("add documents").unwrap_err().into());
    }
    tracing::warn!(index = %ctx.uid, task, code = %error.code, docs = docs.len(),
        "a batch was refused; isolating the documents Meilisearch rejects");
    let batch = reread(ctx, &docs.unpack()).await?;
    // Tests stop here to change a document after it was read again
    // (`refused-batch-reread`, `reconcile::test_hook`).
    super::test_hook::pause_after("refused-batch-reread").await;
    let verdicts = rejects::isolate(ctx, &batch).await?;
    let mut accepted = Vec::with_capacity(batch.len());
    let mut rejected = Vec::new();
    for (doc, verdict) in batch.docs.into_iter().zip(verdicts) {
        match verdict {
            None => accepted.push(doc),
            Some(error) => rejected.push(Rejected::new(&doc, error)),
        }
    }
    let accepted = Packed::pack(accepted);
    Ok(Done {
        bytes,
        accepted,
        rejected,
    })
}
