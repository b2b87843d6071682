//! The background worker: takes enqueued tasks in batches, by default one
//! task at a time in uid order; with the benchmark model on
//! ([`crate::model`]), document tasks in Meilisearch's auto-batches
//! ([`crate::autobatch`]). It marks the batch's tasks `processing` (one
//! `batchUid` and `startedAt`), waits the simulated processing cost (the
//! model's, or the latency knobs'), then applies every task of the batch to
//! the store in uid order under one lock and records each `succeeded` (with
//! final `details`) or `failed` (with `error`; documents untouched), with one
//! `finishedAt`. Injected failures (`/_standin/fail-next-tasks`) take the
//! place of a task's work; held document additions
//! (`/_standin/hold-additions`) wait while later tasks pass them.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::autobatch;
use crate::clock;
use crate::documents;
use crate::errors::ErrorBody;
use crate::indexes;
use crate::ingest;
use crate::state::{AppState, Store};
use crate::tasks::{TaskStatus, Work};

/// Tasks being processed together.
struct Batch {
    /// The store's epoch when the batch started (a reset drops the batch).
    epoch: u64,
    /// Uids (ascending) and the work each carries.
    tasks: Vec<(usize, Work)>,
    /// Simulated processing time.
    cost: Duration,
}

/// Runs forever, processing tasks as they are enqueued.
pub async fn run(state: AppState) {
    loop {
        let Some(batch) = start_next_batch(&state) else {
            state.worker_wakeup.notified().await;
            continue;
        };
        if !batch.cost.is_zero() {
            tokio::time::sleep(batch.cost).await;
        }
        finish(&state, batch);
    }
}

/// Picks the next batch, marks its tasks `processing` and takes their work.
fn start_next_batch(state: &AppState) -> Option<Batch> {
    let mut store = state.store();
    // Held additions stay enqueued, and later tasks pass them (the knob
    // wakes the worker on release).
    let held = state.knobs.additions_held();
    let head = (store.next_to_process..store.tasks.len()).find(|&uid| {
        let task = &store.tasks[uid];
        task.status == TaskStatus::Enqueued
            && !(held && matches!(task.work, Some(Work::AddDocuments { .. })))
    })?;
    let model = state.knobs.model();
    let modelled = !held && model.enabled && autobatch::is_batchable(&store.tasks[head]);
    let uids = if modelled {
        autobatch::select(&store, head, &model)
    } else {
        vec![head]
    };
    let cost = if modelled {
        let indexed = store.tasks[head]
            .index_uid
            .as_ref()
            .and_then(|uid| store.indexes.get(uid))
            .map_or(0, |index| index.documents.len());
        let documents = uids
            .iter()
            .map(|&uid| autobatch::documents_of(&store.tasks[uid]))
            .sum();
        model.batch_cost(indexed, documents)
    } else {
        let documents = match &store.tasks[head].work {
            Some(Work::AddDocuments { documents, .. }) => documents.len(),
            _ => 0,
        };
        state.knobs.processing_cost(documents)
    };
    let batch_uid = store.next_batch_uid;
    store.next_batch_uid += 1;
    let started_at = clock::now();
    let mut tasks = Vec::with_capacity(uids.len());
    for uid in uids {
        let task = &mut store.tasks[uid];
        task.status = TaskStatus::Processing;
        task.started_at = Some(started_at);
        task.batch_uid = Some(batch_uid);
        if let Some(work) = task.work.take() {
            tasks.push((uid, work));
        }
    }
    Some(Batch {
        epoch: store.epoch,
        tasks,
        cost,
    })
}

/// Applies a batch's tasks in order and records their outcomes.
fn finish(state: &AppState, batch: Batch) {
    let injected: Vec<Option<ErrorBody>> = batch
        .tasks
        .iter()
        .map(|_| state.knobs.take_injected_failure())
        .collect();
    let mut store = state.store();
    if store.epoch != batch.epoch {
        return; // the store was reset while this batch was in flight
    }
    let mut outcomes = Vec::with_capacity(batch.tasks.len());
    for ((uid, work), injected) in batch.tasks.into_iter().zip(injected) {
        let index_uid = store.tasks[uid].index_uid.clone();
        let mut details = std::mem::take(&mut store.tasks[uid].details);
        let outcome = match injected {
            Some(error) => Err(error),
            None => apply(&mut store, index_uid.as_deref(), work, &mut details),
        };
        outcomes.push((uid, details, outcome));
    }
    let finished_at = clock::now();
    for (uid, mut details, outcome) in outcomes {
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
    }
    while store
        .tasks
        .get(store.next_to_process)
        .is_some_and(|task| task.status.is_finished())
    {
        store.next_to_process += 1;
    }
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
