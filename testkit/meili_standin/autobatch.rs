//! Which enqueued tasks the benchmark model ([`crate::model`]) processes as
//! one batch: Meilisearch v1's auto-batching of document tasks
//! (`index-scheduler`'s `create_next_batch` and `autobatcher`), so that a
//! pipeline tried on the stand-in meets the batching it will meet for real.
//!
//! The batch starts at the oldest enqueued task. When that is a document
//! addition (`POST`/`PUT`) or deletion of index X, the batch goes on through
//! the later enqueued tasks *of X* in uid order — tasks of other indexes are
//! passed over, neither joining nor ending it, as Meilisearch batches from
//! the tasks of one index — and stops at the first task of X that cannot
//! join, or at the model's `maxTasks` / `maxDocs` cap. What joins, as in
//! Meilisearch:
//! - additions of both methods, and deletions by id, mixed (a deletion run
//!   takes additions only if X already exists);
//! - deletions by filter only with other deletions, never after an addition,
//!   and no addition after them;
//! - an addition naming a primary key other than the batch's (the index's, or
//!   the first one named) ends the batch.
//!
//! Settings, index creation, update, deletion and swaps naming X end it, and
//! are processed alone. Simplified: Meilisearch also merges consecutive
//! settings tasks, and lets a deletion of every document take in later
//! deletions; here those are processed alone too.

use crate::model::Model;
use crate::state::Store;
use crate::tasks::{Task, TaskStatus, Work};

/// Documents a task brings to a batch: added, or ids to delete.
pub fn documents_of(task: &Task) -> usize {
    match &task.work {
        Some(Work::AddDocuments { documents, .. }) => documents.len(),
        Some(Work::DeleteDocuments { ids }) => ids.len(),
        _ => 0,
    }
}

/// Whether the model batches (and prices) this task: a document addition or deletion.
pub fn is_batchable(task: &Task) -> bool {
    matches!(
        task.work,
        Some(
            Work::AddDocuments { .. } | Work::DeleteDocuments { .. } | Work::DeleteByFilter { .. }
        )
    )
}

/// Whether `task` concerns index `uid` (it is sent to it, or swaps it).
fn touches(task: &Task, uid: &str) -> bool {
    if task.index_uid.as_deref() == Some(uid) {
        return true;
    }
    match &task.work {
        Some(Work::SwapIndexes { swaps }) => swaps
            .iter()
            .any(|swap| swap.first == uid || swap.second == uid),
        _ => false,
    }
}

/// What the batch holds so far, to decide whether the next task may join.
struct Run {
    index_exists: bool,
    primary_key: Option<String>,
    has_addition: bool,
    has_filter_deletion: bool,
}

impl Run {
    /// Takes `work` in if it may join; false ends the batch.
    fn admit(&mut self, work: &Work) -> bool {
        match work {
            Work::AddDocuments { primary_key, .. } => {
                if self.has_filter_deletion || (!self.has_addition && !self.index_exists) {
                    return false;
                }
                match (primary_key, &self.primary_key) {
                    (Some(named), Some(batch)) if named != batch => return false,
                    (Some(named), None) => self.primary_key = Some(named.clone()),
                    _ => {}
                }
                self.has_addition = true;
                true
            }
            Work::DeleteDocuments { .. } => true,
            Work::DeleteByFilter { .. } if !self.has_addition => {
                self.has_filter_deletion = true;
                true
            }
            _ => false,
        }
    }
}

/// The uids of the batch that starts with `head` (the oldest enqueued task,
/// a batchable one: see [`is_batchable`]), in uid order.
pub fn select(store: &Store, head: usize, model: &Model) -> Vec<usize> {
    let first = &store.tasks[head];
    let uid = first.index_uid.as_deref().unwrap_or_default();
    let index = store.indexes.get(uid);
    let mut run = Run {
        index_exists: index.is_some(),
        primary_key: index.and_then(|index| index.primary_key.clone()),
        has_addition: false,
        has_filter_deletion: false,
    };
    let mut batch = vec![head];
    let mut documents = documents_of(first) as u64;
    match &first.work {
        Some(Work::AddDocuments { primary_key, .. }) => {
            // A primary key other than the index's: the task fails, alone.
            if let (Some(named), Some(existing)) = (primary_key, &run.primary_key) {
                if named != existing {
                    return batch;
                }
            }
            run.primary_key = run.primary_key.or_else(|| primary_key.clone());
            run.has_addition = true;
        }
        Some(Work::DeleteByFilter { .. }) => run.has_filter_deletion = true,
        _ => {}
    }
    let later = store.tasks[head + 1..]
        .iter()
        .enumerate()
        .map(|(offset, task)| (head + 1 + offset, task))
        .filter(|(_, task)| task.status == TaskStatus::Enqueued && touches(task, uid));
    for (task_uid, task) in later {
        if model.max_tasks.is_some_and(|cap| batch.len() as u64 >= cap) {
            break;
        }
        let task_documents = documents_of(task) as u64;
        if model
            .max_docs
            .is_some_and(|cap| documents + task_documents > cap)
        {
            break;
        }
        let Some(work) = &task.work else { break };
        if !run.admit(work) {
            break;
        }
        batch.push(task_uid);
        documents += task_documents;
    }
    batch
}
