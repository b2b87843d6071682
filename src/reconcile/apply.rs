//! Applying given documents to an index, for follow mode (docs/design.md
//! §4.12): the change stream decides *which* documents changed, the engine
//! does the rest exactly as a reconciliation does.
//!
//! [`index_documents`] sends MongoDB documents through the sync's own sender
//! ([`send_batches`]): the same projection, batches cut by
//! `sync.batch_docs` / `sync.batch_bytes`, poison documents isolated, and
//! each accepted document acknowledged version-exactly by [`super::ack`] —
//! including its handling of documents deleted, made unindexable or edited
//! while their batch was in flight. There is no second acknowledgement.
//!
//! Follow mode's pipeline (`follow::pipeline`) needs the same steps apart,
//! so that it can enqueue the next micro-batch while this one's tasks are
//! still processing: [`enqueue_documents`] enqueues one micro-batch's
//! additions and deletions of an index and returns at once;
//! [`settle_enqueued`], given the ended tasks, does what the sender does
//! after waiting (poison isolation) and gathers the accepted documents;
//! [`acknowledge_accepted`] acknowledges them version-exactly — those of
//! several micro-batches at once, the latest version of each document.
//! When each runs (and what must not run in between) is the pipeline's
//! business.
//!
//! [`repair_id_drift`] is the id-set comparison of a reconciliation
//! ([`super::orphans`]), for deletes whose Meilisearch id is unknown.

use std::cmp::Ordering;
use std::collections::HashMap;

use mongodb::bson::{Bson, DateTime, Document};
use tokio::sync::mpsc;

use super::ack::{self, Tally};
use super::batch::{ndjson_line, Batch, BatchDoc};
use super::ctx::Ctx;
use super::error::ReconcileError;
use super::orphans;
use super::send::{self, send_batches};
use crate::librechat::searchable;
use crate::meili::TaskOutcome;
use crate::mongo::id_key;

/// Sends `docs` (full MongoDB documents read with their version fields,
/// each searchable at MongoDB's time `now`) into `ctx.uid` and acknowledges
/// each accepted one version-exactly. Returns what the sender did.
pub(crate) async fn index_documents(
    ctx: &Ctx<'_>,
    docs: Vec<Document>,
    now: DateTime,
) -> Result<Tally, ReconcileError> {
    if docs.is_empty() {
        return Ok(Tally::default());
    }
    let batches = batches_of(ctx, docs, now)?;
    let (tx, rx) = mpsc::channel(batches.len().max(1));
    for batch in batches {
        tx.try_send(batch)
            .expect("the channel holds every batch of the call");
    }
    drop(tx);
    send_batches(ctx, true, rx, None).await
}

/// `docs` as the batches the sender takes: grouped for the acknowledgement
/// (sorted by `_id`, one BSON type each), cut by `sync.batch_docs` /
/// `sync.batch_bytes`, each document with the retention branch it is
/// searchable in at `now` (those searchable in none are left out).
fn batches_of(
    ctx: &Ctx<'_>,
    docs: Vec<Document>,
    now: DateTime,
) -> Result<Vec<Batch>, ReconcileError> {
    let rules = &ctx.opts.rules;
    let mut batches = Vec::new();
    for run in acknowledgement_runs(docs) {
        let mut batch = Batch::default();
        for doc in &run {
            let Some(branch) = searchable::searchable_branch(rules, ctx.collection, doc, now)
            else {
                continue;
            };
            let line = ndjson_line(ctx.collection, doc)?;
            if batch.is_full_for(line.len(), ctx.opts) {
                batches.push(std::mem::take(&mut batch));
            }
            batch.push_document(ctx.collection, doc, branch, &line);
        }
        if !batch.is_empty() {
            batches.push(batch);
        }
    }
    Ok(batches)
}

/// One index's share of a follow-mode micro-batch, enqueued in Meilisearch
/// and not yet settled: its additions (the documents of each batch, without
/// their NDJSON) and its deletion tasks.
pub(crate) struct Enqueued {
    additions: Vec<send::Enqueued>,
    deletions: Vec<u64>,
}

impl Enqueued {
    /// Every task enqueued, deletions first.
    pub(crate) fn tasks(&self) -> Vec<u64> {
        self.deletions
            .iter()
            .copied()
            .chain(self.additions.iter().map(|a| a.task))
            .collect()
    }
}

/// Enqueues `docs` (as [`index_documents`] would send them, searchable at
/// `now`) and the deletion of `remove` (Meilisearch ids, one task per
/// 10,000) in `ctx.uid`, side by side — they are different documents — and
/// returns once every task is enqueued, without waiting for any. Every
/// request checks the guard first.
pub(crate) async fn enqueue_documents(
    ctx: &Ctx<'_>,
    docs: Vec<Document>,
    now: DateTime,
    remove: &[String],
) -> Result<Enqueued, ReconcileError> {
    let batches = batches_of(ctx, docs, now)?;
    let additions = async {
        let mut enqueued = Vec::with_capacity(batches.len());
        for batch in batches {
            enqueued.push(send::enqueue(ctx, batch).await?);
        }
        Ok::<_, ReconcileError>(enqueued)
    };
    let deletions = async {
        let mut tasks = Vec::new();
        let (meili, uid, guard) = (ctx.meili, &ctx.uid, ctx.guard);
        for chunk in remove.chunks(10_000) {
            tasks.push(meili.delete_documents(uid, chunk, guard).await?);
        }
        Ok::<_, ReconcileError>(tasks)
    };
    let (additions, deletions) = tokio::try_join!(additions, deletions)?;
    Ok(Enqueued {
        additions,
        deletions,
    })
}

/// Accepted documents of one index awaiting their acknowledgement, at most
/// one version per document: the one Meilisearch was given last. Follow
/// mode gathers those of consecutive micro-batches whose tasks ended
/// together and acknowledges them at once, sorted by `_id`
/// ([`acknowledge_accepted`]); keyed by `_id`.
#[derive(Default)]
pub(crate) struct Accepted(HashMap<String, BatchDoc>);

impl Accepted {
    /// Adds documents sent after those already here: a document already
    /// here is replaced by its later version. Acknowledging only that one
    /// is acknowledging both: a statement for the earlier version either
    /// names the same version or no longer matches MongoDB, and the
    /// read-back of the later one repairs whatever changed.
    fn add(&mut self, docs: Vec<BatchDoc>) {
        for doc in docs {
            self.0.insert(id_key(&doc.mongo_id()), doc);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// What [`settle_enqueued`] found.
#[derive(Debug, Default)]
pub(crate) struct SettledTasks {
    /// Documents Meilisearch confirmed.
    pub(crate) indexed: u64,
    pub(crate) rejected: Vec<super::Rejected>,
    /// A batch was refused and bisected: parts of it were sent again just
    /// now, after whatever was enqueued since.
    pub(crate) isolated: bool,
    /// Meilisearch ids deleted by its deletions.
    pub(crate) deleted: u64,
}

/// Settles what [`enqueue_documents`] enqueued, once every one of its tasks
/// ended (`outcomes`, by task uid): a failed deletion is an error; each
/// addition is settled as the sender settles a batch — on a document error
/// the batch is read again and bisected, re-sending parts of it (§4.8) —
/// and its accepted documents go to `accepted`, to be acknowledged
/// ([`acknowledge_accepted`]).
pub(crate) async fn settle_enqueued(
    ctx: &Ctx<'_>,
    enqueued: Enqueued,
    outcomes: &mut HashMap<u64, TaskOutcome>,
    accepted: &mut Accepted,
) -> Result<SettledTasks, ReconcileError> {
    let mut outcome_of = |task: u64| {
        let early = || format!("task {task} of a micro-batch was settled before it ended");
        outcomes
            .remove(&task)
            .ok_or_else(|| ReconcileError::Other(early()))
    };
    let mut done = SettledTasks::default();
    for task in &enqueued.deletions {
        outcome_of(*task)?.into_result("delete documents")?;
    }
    for addition in enqueued.additions {
        let outcome = outcome_of(addition.task)?;
        done.isolated |= outcome.error.is_some();
        let settled = send::settle_outcome(ctx, addition, outcome).await?;
        done.indexed += settled.accepted.len() as u64;
        done.rejected.extend(settled.rejected);
        accepted.add(settled.accepted.unpack());
    }
    done.deleted = enqueued.deletions.len() as u64;
    Ok(done)
}

/// Acknowledges `accepted` version-exactly (§4.7), with the
/// acknowledgement's own repairs of documents changed while in flight;
/// sorted first, so that each run read back holds one `_id` type.
pub(crate) async fn acknowledge_accepted(
    ctx: &Ctx<'_>,
    accepted: Accepted,
) -> Result<Tally, ReconcileError> {
    let mut docs: Vec<BatchDoc> = accepted.0.into_values().collect();
    if docs.is_empty() {
        return Ok(Tally::default());
    }
    docs.sort_by(|a, b| id_cmp(&a.mongo_id(), &b.mongo_id()));
    ack::acknowledge(ctx, &docs).await
}

/// The id-set comparison of the index with the collection (a
/// reconciliation's drift repair). Returns (deleted, flags cleared).
pub(crate) async fn repair_id_drift(ctx: &Ctx<'_>) -> Result<(u64, u64), ReconcileError> {
    let (outcome, _) = orphans::repair(ctx).await?;
    Ok((outcome.deleted, outcome.flags_cleared))
}

/// Groups documents the way the acknowledgement needs them: it reads a
/// chunk that did not all match back by the `_id` range from its first to
/// its last document, so each group is sorted by `_id` and holds one BSON
/// type. Documents whose `_id` type has no order here travel alone (a range
/// of one).
fn acknowledgement_runs(docs: Vec<Document>) -> Vec<Vec<Document>> {
    let (mut ordered, unordered): (Vec<Document>, Vec<Document>) = docs
        .into_iter()
        .partition(|d| d.get("_id").is_some_and(|id| id_order(id, id).is_some()));
    ordered.sort_by(|a, b| id_cmp(a.get("_id").unwrap(), b.get("_id").unwrap()));
    let id_type = |d: &Document| d.get("_id").map(Bson::element_type);
    let mut runs: Vec<Vec<Document>> = Vec::new();
    for doc in ordered {
        match runs.last_mut() {
            Some(run) if id_type(&run[0]) == id_type(&doc) => run.push(doc),
            _ => runs.push(vec![doc]),
        }
    }
    runs.extend(unordered.into_iter().map(|doc| vec![doc]));
    runs
}

/// The order the acknowledgement wants `_id`s in: equal types together,
/// each in MongoDB's order as far as [`id_order`] knows it.
fn id_cmp(a: &Bson, b: &Bson) -> Ordering {
    let type_rank = |id: &Bson| id.element_type() as u8;
    type_rank(a)
        .cmp(&type_rank(b))
        .then_with(|| id_order(a, b).unwrap_or(Ordering::Equal))
}

/// MongoDB's order of two `_id`s of the same BSON type, for the types an
/// `_id` usually has; `None` for other or mixed types.
fn id_order(a: &Bson, b: &Bson) -> Option<Ordering> {
    match (a, b) {
        (Bson::ObjectId(a), Bson::ObjectId(b)) => Some(a.bytes().cmp(&b.bytes())),
        // Without a collation MongoDB compares strings by their UTF-8 bytes.
        (Bson::String(a), Bson::String(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (Bson::Int32(a), Bson::Int32(b)) => Some(a.cmp(b)),
        (Bson::Int64(a), Bson::Int64(b)) => Some(a.cmp(b)),
        (Bson::Double(a), Bson::Double(b)) => a.partial_cmp(b),
        (Bson::DateTime(a), Bson::DateTime(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, oid::ObjectId};

    fn ids(runs: &[Vec<Document>]) -> Vec<Vec<Bson>> {
        runs.iter()
            .map(|run| run.iter().map(|d| d.get("_id").unwrap().clone()).collect())
            .collect()
    }

    #[test]
    fn runs_are_sorted_by_id_and_never_mix_types() {
        let (o1, o2) = (ObjectId::new(), ObjectId::new());
        let docs = vec![
            doc! { "_id": o2 },
            doc! { "_id": 3 },
            doc! { "_id": "b" },
            doc! { "_id": o1 },
            doc! { "_id": 1 },
            doc! { "_id": "a" },
            doc! { "_id": { "compound": 1 } },
        ];
        let runs = acknowledgement_runs(docs);
        let mut want = vec![
            vec![Bson::Int32(1), Bson::Int32(3)],
            vec![Bson::String("a".into()), Bson::String("b".into())],
            vec![Bson::ObjectId(o1), Bson::ObjectId(o2)],
        ];
        want.sort_by(|a, b| id_cmp(&a[0], &b[0]));
        want.push(vec![Bson::Document(doc! { "compound": 1 })]);
        assert_eq!(ids(&runs), want);
    }
}
