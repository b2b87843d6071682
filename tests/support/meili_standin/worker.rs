//! The background worker: takes enqueued tasks strictly one at a time in uid
//! order, marks each `processing`, waits the simulated processing cost (see
//! the latency knobs), then applies it to the store atomically and records
//! `succeeded` (with final `details`) or `failed` (with `error`; documents
//! untouched). Injected failures (`/_standin/fail-next-tasks`) take the place
//! of the work.

use serde_json::{json, Map, Value};

use crate::clock;
use crate::documents;
use crate::errors::ErrorBody;
use crate::indexes;
use crate::ingest;
use crate::state::{AppState, Store};
use crate::tasks::{TaskStatus, Work};

/// Runs forever, processing tasks as they are enqueued.
pub async fn run(state: AppState) {
    loop {
        let Some((uid, epoch, work)) = start_next(&state) else {
            state.worker_wakeup.notified().await;
            continue;
        };
        let documents = match &work {
            Work::AddDocuments { documents, .. } => documents.len(),
            _ => 0,
        };
        let cost = state.knobs.processing_cost(documents);
        if !cost.is_zero() {
            tokio::time::sleep(cost).await;
        }
        let injected = state.knobs.take_injected_failure();
        let mut store = state.store();
        if store.epoch != epoch {
            continue; // the store was reset while this task was in flight
        }
        let index_uid = store.tasks[uid].index_uid.clone();
        let mut details = std::mem::take(&mut store.tasks[uid].details);
        let outcome = match injected {
            Some(error) => Err(error),
            None => apply(&mut store, index_uid.as_deref(), work, &mut details),
        };
        let finished_at = clock::now();
        let task = &mut store.tasks[uid];
        task.finished_at = Some(finished_at);
        match outcome {
            Ok(()) => task.status = TaskStatus::Succeeded,
            Err(error) => {
                task.status = TaskStatus::Failed;
                task.error = Some(error);
                // Counts the failed work never reached read as 0, as in Meilisearch.
                for key in ["indexedDocuments", "deletedDocuments"] {
                    if details.get(key) == Some(&Value::Null) {
                        details.insert(key.to_string(), json!(0));
                    }
                }
            }
        }
        let succeeded = task.status == TaskStatus::Succeeded;
        task.details = details;
        if succeeded {
            store.last_update = Some(finished_at);
        }
        store.next_to_process = uid + 1;
    }
}

/// Marks the next enqueued task `processing` and takes its work.
fn start_next(state: &AppState) -> Option<(usize, u64, Work)> {
    let mut store = state.store();
    let uid = store.next_to_process;
    let epoch = store.epoch;
    let task = store.tasks.get_mut(uid)?;
    task.status = TaskStatus::Processing;
    task.started_at = Some(clock::now());
    let work = task.work.take()?;
    Some((uid, epoch, work))
}

/// Applies `work`, filling in the counts of `details`.
fn apply(
    store: &mut Store,
    index_uid: Option<&str>,
    work: Work,
    details: &mut Map<String, Value>,
) -> Result<(), ErrorBody> {
    let uid = index_uid.unwrap_or_default();
    let mut record = |key: &str, count: usize| {
        details.insert(key.to_string(), json!(count));
    };
    match work {
        Work::CreateIndex { primary_key } => indexes::apply_create(store, uid, primary_key),
        Work::UpdateIndex { primary_key } => indexes::apply_update(store, uid, primary_key),
        Work::DeleteIndex => {
            indexes::apply_delete(store, uid).map(|deleted| record("deletedDocuments", deleted))
        }
        Work::SwapIndexes { swaps } => indexes::apply_swaps(store, &swaps),
        Work::AddDocuments {
            documents,
            primary_key,
            merge,
        } => ingest::apply_addition(store, uid, documents, primary_key, merge)
            .map(|indexed| record("indexedDocuments", indexed)),
        Work::DeleteDocuments { ids } => documents::apply_delete_ids(store, uid, &ids)
            .map(|deleted| record("deletedDocuments", deleted)),
        Work::DeleteByFilter { filter } => documents::apply_delete_by_filter(store, uid, &filter)
            .map(|deleted| record("deletedDocuments", deleted)),
        Work::ClearDocuments => {
            documents::apply_clear(store, uid).map(|deleted| record("deletedDocuments", deleted))
        }
        Work::UpdateSettings { changes } => {
            let index = store
                .indexes
                .entry(uid.to_string())
                .or_insert_with(|| crate::index::Index::new(uid, None));
            index.settings.apply(&changes);
            index.touch();
            Ok(())
        }
    }
}
