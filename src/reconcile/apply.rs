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
//! [`repair_id_drift`] is the id-set comparison of a reconciliation
//! ([`super::orphans`]), for deletes whose Meilisearch id is unknown.

use std::cmp::Ordering;

use mongodb::bson::{Bson, DateTime, Document};
use tokio::sync::mpsc;

use super::batch::{ndjson_line, Batch};
use super::ctx::Ctx;
use super::error::ReconcileError;
use super::orphans;
use super::send::{send_batches, Settled};
use crate::librechat::searchable;

/// Sends `docs` (full MongoDB documents read with their version fields,
/// each searchable at MongoDB's time `now`) into `ctx.uid` and acknowledges
/// each accepted one version-exactly. Returns what the sender did.
pub(crate) async fn index_documents(
    ctx: &Ctx<'_>,
    docs: Vec<Document>,
    now: DateTime,
) -> Result<Settled, ReconcileError> {
    if docs.is_empty() {
        return Ok(Settled::default());
    }
    let rules = &ctx.opts.rules;
    let mut batches = Vec::new();
    for run in acknowledgement_runs(docs) {
        let mut batch = Batch::new();
        for doc in &run {
            let Some(branch) = searchable::searchable_branch(rules, ctx.collection, doc, now)
            else {
                continue;
            };
            let line = ndjson_line(ctx.collection, doc)?;
            if batch.is_full_for(line.len(), ctx.opts) {
                batches.push(std::mem::replace(&mut batch, Batch::new()));
            }
            batch.push_document(ctx.collection, doc, branch, &line);
        }
        if !batch.is_empty() {
            batches.push(batch);
        }
    }
    let (tx, rx) = mpsc::channel(batches.len().max(1));
    for batch in batches {
        tx.try_send(batch)
            .expect("the channel holds every batch of the call");
    }
    drop(tx);
    send_batches(ctx, true, rx).await
}

/// The id-set comparison of the index with the collection (a
/// reconciliation's drift repair). Returns (deleted, flags cleared).
pub(crate) async fn repair_id_drift(ctx: &Ctx<'_>) -> Result<(u64, u64), ReconcileError> {
    let outcome = orphans::repair(ctx).await?;
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
    ordered.sort_by(|a, b| {
        let (a, b) = (&a.get("_id").unwrap(), &b.get("_id").unwrap());
        type_rank(a)
            .cmp(&type_rank(b))
            .then_with(|| id_order(a, b).unwrap_or(Ordering::Equal))
    });
    let mut runs: Vec<Vec<Document>> = Vec::new();
    for doc in ordered {
        let same_type = runs.last().is_some_and(|run| {
            run[0].get("_id").map(Bson::element_type) == doc.get("_id").map(Bson::element_type)
        });
        match runs.last_mut() {
            Some(run) if same_type => run.push(doc),
            _ => runs.push(vec![doc]),
        }
    }
    runs.extend(unordered.into_iter().map(|doc| vec![doc]));
    runs
}

/// Groups `_id` types so that equal types sort together.
fn type_rank(id: &Bson) -> u8 {
    id.element_type() as u8
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
        want.sort_by_key(|run| type_rank(&run[0]));
        want.push(vec![Bson::Document(doc! { "compound": 1 })]);
        assert_eq!(ids(&runs), want);
    }
}
