//! The Meilisearch stand-in's benchmark model (`--model-meilisearch`,
//! `/_standin/model`; testkit/meili_standin/model.rs and autobatch.rs):
//! document tasks enqueued together are processed as Meilisearch's
//! auto-batches (one `batchUid`, `startedAt`, `finishedAt`), a batch takes the
//! time the cost formula gives, and without the flag every task is its own
//! batch as before. Each test runs its own stand-in; against a real
//! Meilisearch they skip (it has no knobs).
//!
//! To get several tasks enqueued while the worker is busy (the worker starts
//! on a task the moment it is enqueued, as Meilisearch does), a test first
//! enqueues a slow "blocker" batch on an index of its own and enqueues the
//! tasks under test while the blocker is still processing — which it checks,
//! so a machine too slow for the premise fails with that message.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::standin::{private_standin_with, PrivateStandin};

/// How long the blocker batch takes: ample time to enqueue the tasks under test.
const BLOCKER_MS: f64 = 1_500.0;

/// The test's stand-in, started in benchmark mode, seen through raw HTTP.
struct Standin {
    process: PrivateStandin,
    http: reqwest::Client,
}

impl Standin {
    fn start(args: &[&str]) -> Option<Self> {
        let process = private_standin_with(args)?;
        Some(Self {
            process,
            http: reqwest::Client::new(),
        })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.process.host))
            .bearer_auth(&self.process.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("send request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("read body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Enqueues a task; its uid.
    async fn enqueue(&self, method: reqwest::Method, path: &str, body: Value) -> u64 {
        let (status, answer) = self.call(method, path, Some(body)).await;
        assert_eq!(status, 202, "{path} answered {status}: {answer}");
        answer["taskUid"].as_u64().expect("taskUid")
    }

    /// Adds `count` documents `{id, text}` with ids from `first` (add or replace).
    async fn add(&self, index: &str, first: usize, count: usize) -> u64 {
        let documents: Vec<Value> = (first..first + count)
            .map(|id| json!({ "id": id, "text": format!("document {id}") }))
            .collect();
        self.enqueue(
            reqwest::Method::POST,
            &format!("/indexes/{index}/documents?primaryKey=id"),
            Value::Array(documents),
        )
        .await
    }

    async fn task(&self, uid: u64) -> Value {
        let (status, task) = self
            .call(reqwest::Method::GET, &format!("/tasks/{uid}"), None)
            .await;
        assert_eq!(status, 200, "GET /tasks/{uid}: {task}");
        task
    }

    /// Polls until task `uid` has `status` in `wanted`; the task.
    async fn wait_status(&self, uid: u64, wanted: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let task = self.task(uid).await;
            if wanted.iter().any(|w| task["status"] == *w) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {uid} never became {wanted:?}: {task}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for every task in `uids` to succeed; them, in order.
    async fn wait_succeeded(&self, uids: &[u64]) -> Vec<Value> {
        let mut tasks = Vec::new();
        for &uid in uids {
            let task = self.wait_status(uid, &["succeeded", "failed"]).await;
            assert_eq!(task["status"], "succeeded", "task {uid}: {task}");
            tasks.push(task);
        }
        tasks
    }

    /// Sets the model (enabled) with `settings`.
    async fn model(&self, settings: Value) -> Value {
        let mut body = json!({ "enabled": true, "perIndexedDocUs": 0, "perBatchDocUs": 0 });
        body.as_object_mut()
            .unwrap()
            .extend(settings.as_object().unwrap().clone());
        self.process.knobs().set_model(body).await
    }

    /// Starts a `BLOCKER_MS` batch on index `blocker`, then sets the model to
    /// `settings` for the batches after it; the blocker's uid.
    async fn block(&self, settings: Value) -> u64 {
        self.model(json!({ "fixedMs": BLOCKER_MS })).await;
        let blocker = self.add("blocker", 0, 1).await;
        self.wait_status(blocker, &["processing"]).await;
        self.model(settings).await;
        blocker
    }

    /// Asserts the blocker is still processing: the tasks enqueued since were
    /// all waiting together when the worker took its next batch.
    async fn assert_still_blocked(&self, blocker: u64) {
        let task = self.task(blocker).await;
        assert_eq!(
            task["status"], "processing",
            "the tasks under test were enqueued too slowly (the {BLOCKER_MS} ms blocker \
             finished first), so they were not all waiting together: {task}"
        );
    }

    async fn document_count(&self, index: &str) -> u64 {
        let (status, stats) = self
            .call(
                reqwest::Method::GET,
                &format!("/indexes/{index}/stats"),
                None,
            )
            .await;
        assert_eq!(status, 200, "stats of {index}: {stats}");
        stats["numberOfDocuments"].as_u64().unwrap()
    }
}

fn batch_of(task: &Value) -> u64 {
    task["batchUid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no batchUid: {task}"))
}

/// A task's `duration` (`PT1.234567S`) in seconds.
fn duration_secs(task: &Value) -> f64 {
    let text = task["duration"].as_str().expect("duration");
    text.trim_start_matches("PT")
        .trim_end_matches('S')
        .parse()
        .unwrap_or_else(|_| panic!("unexpected duration {text}"))
}

#[tokio::test]
async fn consecutive_additions_of_one_index_share_one_batch_uid_and_times() {
    let Some(standin) = Standin::start(&["--model-meilisearch"]) else {
        return;
    };
    let blocker = standin.block(json!({ "fixedMs": 50 })).await;
    let first = standin.add("messages", 0, 10).await;
    let second = standin
        .enqueue(
            reqwest::Method::PUT,
            "/indexes/messages/documents",
            json!([{ "id": 10, "text": "merged" }, { "id": 11 }]),
        )
        .await;
    let third = standin.add("messages", 20, 5).await;
    standin.assert_still_blocked(blocker).await;

    let tasks = standin.wait_succeeded(&[first, second, third]).await;
    let blocker = standin.task(blocker).await;
    let batch = batch_of(&tasks[0]);
    assert_ne!(
        batch,
        batch_of(&blocker),
        "the blocker is a batch of its own"
    );
    for task in &tasks {
        assert_eq!(batch_of(task), batch, "one batch for the run: {tasks:?}");
        assert_eq!(task["startedAt"], tasks[0]["startedAt"], "{tasks:?}");
        assert_eq!(task["finishedAt"], tasks[0]["finishedAt"], "{tasks:?}");
        assert_eq!(task["duration"], tasks[0]["duration"], "{tasks:?}");
    }
    assert_eq!(tasks[0]["details"]["indexedDocuments"], 10);
    assert_eq!(tasks[1]["details"]["indexedDocuments"], 2);
    assert_eq!(standin.document_count("messages").await, 17);
}

#[tokio::test]
async fn a_settings_task_ends_the_run_and_other_indexes_are_passed_over() {
    let Some(standin) = Standin::start(&["--model-meilisearch"]) else {
        return;
    };
    let blocker = standin.block(json!({ "fixedMs": 50 })).await;
    let messages_1 = standin.add("messages", 0, 3).await;
    let convos = standin.add("convos", 0, 3).await;
    let messages_2 = standin.add("messages", 3, 3).await;
    let settings = standin
        .enqueue(
            reqwest::Method::PATCH,
            "/indexes/messages/settings",
            json!({ "filterableAttributes": ["text"] }),
        )
        .await;
    let messages_3 = standin.add("messages", 6, 3).await;
    let messages_4 = standin.add("messages", 9, 3).await;
    standin.assert_still_blocked(blocker).await;

    let uids = [
        messages_1, convos, messages_2, settings, messages_3, messages_4,
    ];
    let tasks = standin.wait_succeeded(&uids).await;
    let batch: Vec<u64> = tasks.iter().map(batch_of).collect();
    // As Meilisearch: a batch takes the enqueued tasks of its index in order;
    // the conversations task neither joins nor ends it, the settings task ends it.
    assert_eq!(
        batch[0], batch[2],
        "messages 1 and 2 share a batch: {tasks:#?}"
    );
    assert!(
        batch[0] < batch[1] && batch[1] < batch[3] && batch[3] < batch[4],
        "batches run messages 1+2, convos, settings, messages 3+4: {batch:?}"
    );
    assert_eq!(
        batch[4], batch[5],
        "messages 3 and 4 share a batch: {tasks:#?}"
    );
    assert_eq!(standin.document_count("messages").await, 12);
    assert_eq!(standin.document_count("convos").await, 3);
}

#[tokio::test]
async fn deletions_by_id_join_additions_but_a_deletion_by_filter_ends_the_run() {
    let Some(standin) = Standin::start(&["--model-meilisearch"]) else {
        return;
    };
    standin.model(json!({ "fixedMs": 0 })).await;
    let setup = standin.add("messages", 0, 10).await;
    let filterable = standin
        .enqueue(
            reqwest::Method::PATCH,
            "/indexes/messages/settings",
            json!({ "filterableAttributes": ["id"] }),
        )
        .await;
    standin.wait_succeeded(&[setup, filterable]).await;

    let blocker = standin.block(json!({ "fixedMs": 50 })).await;
    let addition = standin.add("messages", 10, 5).await;
    let by_id = standin
        .enqueue(
            reqwest::Method::POST,
            "/indexes/messages/documents/delete-batch",
            json!([0, 1]),
        )
        .await;
    let by_filter = standin
        .enqueue(
            reqwest::Method::POST,
            "/indexes/messages/documents/delete",
            json!({ "filter": "id = 2" }),
        )
        .await;
    let after = standin.add("messages", 20, 1).await;
    standin.assert_still_blocked(blocker).await;

    let tasks = standin
        .wait_succeeded(&[addition, by_id, by_filter, after])
        .await;
    let batch: Vec<u64> = tasks.iter().map(batch_of).collect();
    assert_eq!(
        batch[0], batch[1],
        "an addition and a deletion by id: {tasks:#?}"
    );
    assert!(
        batch[1] < batch[2] && batch[2] < batch[3],
        "the deletion by filter and the addition after it are batches of their own: {batch:?}"
    );
    assert_eq!(standin.document_count("messages").await, 10 + 5 - 3 + 1);
}

#[tokio::test]
async fn the_task_and_document_caps_cut_batches() {
    let Some(standin) = Standin::start(&["--model-meilisearch"]) else {
        return;
    };
    let blocker = standin
        .block(json!({ "fixedMs": 20, "maxTasks": 3, "maxDocs": 25 }))
        .await;
    // Documents per task; batches: 10+1+1 (the task cap: 3), then 10+10 (not
    // 10 more: 30 > 25 documents), then 10.
    let sizes = [10, 1, 1, 10, 10, 10];
    let (mut uids, mut next_id) = (Vec::new(), 0);
    for size in sizes {
        uids.push(standin.add("messages", next_id, size).await);
        next_id += size;
    }
    standin.assert_still_blocked(blocker).await;
    let tasks = standin.wait_succeeded(&uids).await;
    let batch: Vec<u64> = tasks.iter().map(batch_of).collect();
    assert!(
        batch[0] == batch[1] && batch[1] == batch[2],
        "the first three share a batch: {batch:?}"
    );
    assert_ne!(batch[2], batch[3], "at most 3 tasks a batch: {batch:?}");
    assert_eq!(batch[3], batch[4], "{batch:?}");
    assert_ne!(
        batch[4], batch[5],
        "at most 25 documents a batch: {batch:?}"
    );

    // `null` lifts a cap.
    let model = standin
        .process
        .knobs()
        .set_model(json!({ "maxTasks": null, "maxDocs": null }))
        .await;
    assert_eq!(model["maxTasks"], Value::Null, "{model}");
    assert_eq!(model["maxDocs"], Value::Null, "{model}");
}

#[tokio::test]
async fn a_batch_takes_fixed_plus_per_indexed_plus_per_batch_document_times_scale() {
    let Some(standin) = Standin::start(&["--model-meilisearch"]) else {
        return;
    };
    // A first batch of 4,000 documents into an empty index: 100 ms + 4,000 × 50 µs = 300 ms.
    let costs = json!({ "fixedMs": 100, "perIndexedDocUs": 25, "perBatchDocUs": 50, "scale": 1.0 });
    standin.model(costs.clone()).await;
    let first = standin.add("messages", 0, 4_000).await;
    let first = &standin.wait_succeeded(&[first]).await[0];

    // Then two tasks of 1,000 in one batch, on top of 4,000 indexed, at scale 2:
    // 2 × (100 ms + 4,000 × 25 µs + 2,000 × 50 µs) = 600 ms.
    let mut scaled = costs.clone();
    scaled["scale"] = json!(2.0);
    let blocker = standin.block(scaled).await;
    let second = standin.add("messages", 4_000, 1_000).await;
    let third = standin.add("messages", 5_000, 1_000).await;
    standin.assert_still_blocked(blocker).await;
    let batch = standin.wait_succeeded(&[second, third]).await;
    assert_eq!(batch_of(&batch[0]), batch_of(&batch[1]));

    // The sleep never ends early; the slack allows for a loaded machine.
    for (task, expected) in [(first, 0.300), (&batch[0], 0.600)] {
        let took = duration_secs(task);
        assert!(
            took >= expected - 0.002 && took < expected + 0.350,
            "expected {expected} s by the formula, the batch took {took} s: {task}"
        );
    }
}

#[tokio::test]
async fn without_the_flag_every_task_is_a_batch_of_its_own() {
    let Some(standin) = Standin::start(&[]) else {
        return;
    };
    let model = standin.process.knobs().model().await;
    assert_eq!(model["enabled"], false, "off unless asked for: {model}");
    let mut uids = Vec::new();
    for n in 0..4 {
        uids.push(standin.add("messages", n * 10, 10).await);
    }
    let tasks = standin.wait_succeeded(&uids).await;
    for (task, uid) in tasks.iter().zip(&uids) {
        assert_eq!(
            batch_of(task),
            *uid,
            "one batch per task, numbered like tasks: {task}"
        );
    }
}

#[tokio::test]
async fn the_model_knob_checks_its_settings_and_reset_restores_the_start_up_ones() {
    let Some(standin) = Standin::start(&["--model-meilisearch", "--model-scale", "0.25"]) else {
        return;
    };
    let knobs = standin.process.knobs();
    let start = knobs.model().await;
    assert_eq!(start["enabled"], true, "{start}");
    assert_eq!(start["scale"], 0.25, "{start}");
    assert_eq!(start["fixedMs"], 1800.0, "calibrated default: {start}");
    assert_eq!(start["perIndexedDocUs"], 3.3, "calibrated default: {start}");
    assert_eq!(start["perBatchDocUs"], 156.0, "calibrated default: {start}");

    for (bad, field) in [
        (json!({ "scale": -1 }), "scale"),
        (json!({ "fixedMs": -5 }), "fixedMs"),
        (json!({ "maxTasks": 0 }), "maxTasks"),
    ] {
        let (status, error) = standin
            .call(reqwest::Method::POST, "/_standin/model", Some(bad.clone()))
            .await;
        assert_eq!(status, 400, "{bad} must be refused: {error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "the error names {field}: {error}");
    }
    assert_eq!(
        knobs.model().await,
        start,
        "a refused change changes nothing"
    );

    let changed = knobs
        .set_model(json!({ "enabled": false, "fixedMs": 10 }))
        .await;
    assert_eq!(changed["enabled"], false, "{changed}");
    assert_eq!(changed["fixedMs"], 10.0, "{changed}");
    assert_eq!(changed["scale"], 0.25, "untouched fields stay: {changed}");
    knobs.reset().await;
    assert_eq!(
        knobs.model().await,
        start,
        "reset restores the start-up model"
    );
}
