//! Poison isolation (docs/design.md §4.8). Meilisearch fails a whole task when one
//! document is bad (e.g. `invalid_document_id`) and indexes none of it. The
//! failed batch is bisected — both halves sent, the failing halves split
//! again — until the rejected documents stand alone; everything else gets
//! indexed. Rejected documents are reported with Meilisearch's error code and
//! left unacknowledged, so each run reports them again without looping.

use std::ops::Range;

use serde::Serialize;

use super::batch::{Batch, BatchDoc};
use super::ctx::Ctx;
use super::error::ReconcileError;
use crate::meili::TaskError;
use crate::mongo::id_key;

/// A document Meilisearch refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// Its Meilisearch id (primary-key value), when it has one.
    pub id: Option<String>,
    /// Its MongoDB `_id`, as extended JSON.
    pub(crate) mongo_id: String,
    /// Meilisearch's error code, e.g. `invalid_document_id`.
    pub code: String,
    pub(crate) message: String,
    #[serde(skip)]
    pub(crate) mongo_id_key: String,
}

impl Rejected {
    pub(crate) fn new(doc: &BatchDoc, error: TaskError) -> Rejected {
        Rejected {
            id: doc.meili_id(),
            mongo_id: doc.mongo_id().into_relaxed_extjson().to_string(),
            code: error.code,
            message: error.message,
            mongo_id_key: id_key(&doc.mongo_id()),
        }
    }
}

/// The `_id` keys of `rejected`, which later sends of the run leave out.
pub(crate) fn keys(rejected: &[Rejected]) -> impl Iterator<Item = String> + '_ {
    rejected.iter().map(|r| r.mongo_id_key.clone())
}

/// Whether a failed task's error is about a document (so splitting the batch
/// isolates it) rather than about the index or the server.
pub(crate) fn is_document_error(code: &str) -> bool {
    code.starts_with("invalid_document")
        || code.starts_with("missing_document")
        || matches!(
            code,
            "max_fields_limit_exceeded" | "invalid_vectors" | "invalid_vector_dimensions"
        )
}

/// Verdict per document of `batch` (`Some(error)`: rejected), found by
/// bisection after the whole batch failed: its halves are sent, failing
/// halves split again, and a document is rejected only when it failed sent
/// alone. A batch re-read down to one document (the others were deleted or
/// indexed meanwhile, or it was edited) is sent once as it is: its earlier
/// batch's refusal says nothing of it.
pub(crate) async fn isolate(
    ctx: &Ctx<'_>,
    batch: &Batch,
) -> Result<Vec<Option<TaskError>>, ReconcileError> {
    let mut verdicts = vec![None; batch.len()];
    if batch.is_empty() {
        return Ok(verdicts);
    }
    let mut pending = vec![halves(0..batch.len())];
    let (meili, uid, guard) = (ctx.meili, &ctx.uid, ctx.guard);
    while let Some(group) = pending.pop() {
        // Enqueue the group before waiting so Meilisearch stays busy.
        let mut tasks = Vec::with_capacity(group.len());
        for range in &group {
            let payload = batch.payload_of(range.clone());
            tasks.push(meili.add_documents_ndjson(uid, payload, guard).await?);
        }
        for (range, task) in group.into_iter().zip(tasks) {
            let outcome = ctx.meili.wait_for_task(task, ctx.guard).await?;
            match &outcome.error {
                None => {}
                Some(e) if is_document_error(&e.code) && range.len() == 1 => {
                    verdicts[range.start] = Some(e.clone());
                }
                Some(e) if is_document_error(&e.code) => pending.push(halves(range)),
                Some(_) => return Err(outcome.into_result("add documents").unwrap_err().into()),
            }
        }
    }
    Ok(verdicts)
}

/// `range` in two halves, or itself when it holds one document.
fn halves(range: Range<usize>) -> Vec<Range<usize>> {
    if range.len() <= 1 {
        return vec![range];
    }
    let mid = range.start + range.len() / 2;
    vec![range.start..mid, mid..range.end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_errors_are_recognised() {
        assert!(is_document_error("invalid_document_id"));
        assert!(is_document_error("missing_document_id"));
        assert!(!is_document_error("index_not_found"));
        assert!(!is_document_error("internal"));
    }
}
