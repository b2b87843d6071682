//! LibreChat as shipped: the index we build is the one LibreChat's own data
//! layer would build, and LibreChat's own progress check agrees with us.
//!
//! Each test writes a chat history through LibreChat's published models
//! (`@librechat/data-schemas`, driven by `tests/librechat/librechat.cjs`):
//! first with search off (no hooks), then with search on (its save hooks
//! index new writes, edits and deletes) — every content part kind, `|` in
//! conversation ids, subagent records, temporary, expiring and legacy
//! records. Then one of our modes runs (`once`, `run` following the change
//! stream while LibreChat keeps writing, `reindex`), and afterwards:
//! LibreChat's own `getSyncProgress()` reports both models complete, and
//! every Meilisearch document equals LibreChat's own
//! `preprocessObjectForIndex()` of its MongoDB document, compared document
//! by document (and no other document is in the index).
//!
//! One test runs LibreChat's own bulk sync (`syncWithMeili()`) first, and
//! shows what it leaves wrong that its progress check calls complete, and
//! that `once` (and `once --deep`) repairs it.
//!
//! LibreChat's hooks write the unprefixed indexes `messages` and `convos`
//! (their names are fixed in its models), so these tests use them too, one
//! at a time, and nothing else in the suite does.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::cli::{eventually, terminate, wait_exit, Target};
use support::timing::RUN_BOUND;

/// The tests share LibreChat's fixed index names: one at a time on a
/// Meilisearch, whichever process they run in.
async fn indexes_turn() -> support::turn::Turn {
    support::turn::take("librechat-indexes", &support::meili().host).await
}

fn harness_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/librechat"))
}

/// Runs a harness command against `target`'s database; its one JSON answer.
fn harness(target: &Target, args: &[&str]) -> Value {
    let modules = harness_dir().join("node_modules/@librechat/data-schemas");
    assert!(
        modules.exists(),
        "LibreChat's data layer is not installed: run `npm ci` in tests/librechat \
         (scripts/test does it)"
    );
    let output = Command::new("node")
        .arg(harness_dir().join("librechat.cjs"))
        .args(args)
        .env("MONGO_URI", &target.mongo_uri)
        .env("LIBRECHAT_DB", &target.database)
        .env("MEILI_HOST", &target.meili_host)
        .env("MEILI_MASTER_KEY", &target.meili_key)
        // LibreChat's hooks settle behind every task a shared Meilisearch
        // has queued: as long as a reconciliation may take.
        .env(
            "HARNESS_SETTLE_TIMEOUT_MS",
            RUN_BOUND.as_millis().to_string(),
        )
        .output()
        .expect("run node (Node.js must be on PATH)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "harness {args:?} failed ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("harness {args:?}: {e}: {stdout}"))
}

/// A target on LibreChat's own index names, with LibreChat's sync switched
/// off as our README recommends beside this service.
async fn librechat_target(tag: &str) -> Target {
    let mut target = Target::new(tag).set("MEILI_NO_SYNC", "true");
    target.prefix = String::new();
    delete_indexes(&target).await;
    target
}

async fn delete_indexes(target: &Target) {
    for index in ["messages", "convos"] {
        let _ = reqwest::Client::new()
            .delete(format!("{}/indexes/{index}", target.meili_host))
            .bearer_auth(&target.meili_key)
            .send()
            .await;
    }
    // Deletions are tasks, queued on a shared Meilisearch behind every
    // other test's: wait until the indexes are gone.
    eventually(RUN_BOUND, "the indexes to be deleted", || async {
        let mut gone = true;
        for index in ["messages", "convos"] {
            let answer = target.meili_get(&format!("/indexes/{index}")).await;
            gone &= answer["code"] == "index_not_found";
        }
        gone.then_some(())
    })
    .await;
}

/// Every document of `index`, by its primary key.
async fn meili_documents(target: &Target, index: &str, pk: &str) -> BTreeMap<String, Value> {
    let mut docs = BTreeMap::new();
    let mut offset = 0;
    loop {
        let page = target
            .meili_get(&format!(
                "/indexes/{index}/documents?limit=1000&offset={offset}"
            ))
            .await;
        let results = page["results"].as_array().cloned().unwrap_or_default();
        for doc in &results {
            let id = doc[pk].as_str().expect("a string primary key").to_string();
            docs.insert(id, doc.clone());
        }
        if results.len() < 1000 {
            return docs;
        }
        offset += results.len();
    }
}

/// Waits for Meilisearch to finish what is enqueued on LibreChat's indexes
/// (LibreChat's hooks and our tasks), so what is read is settled. Other
/// indexes' tasks (other tests', on a shared Meilisearch) are not waited for.
async fn meili_settled(target: &Target) {
    eventually(
        RUN_BOUND,
        "Meilisearch's queue on LibreChat's indexes to drain",
        || async {
            let tasks = target
                .meili_get("/tasks?statuses=enqueued,processing&indexUids=messages,convos&limit=1")
                .await;
            (tasks["total"].as_u64() == Some(0)).then_some(())
        },
    )
    .await;
}

/// The differences between the index and LibreChat's own projection of
/// every document it counts as searchable (and ours: with a user, not
/// unfinished), one line each.
async fn differences(target: &Target) -> Vec<String> {
    meili_settled(target).await;
    let expected = harness(target, &["expected"]);
    let mut found = Vec::new();
    for (collection, index, pk) in [
        ("messages", "messages", "messageId"),
        ("conversations", "convos", "conversationId"),
    ] {
        let want: BTreeMap<String, Value> = expected[collection]
            .as_array()
            .expect("expected documents")
            .iter()
            .filter(|e| e["searchable"] == true && e["hasUser"] == true && e["unfinished"] == false)
            .map(|e| {
                (
                    e["doc"][pk].as_str().expect("a primary key").to_string(),
                    e["doc"].clone(),
                )
            })
            .collect();
        let have = meili_documents(target, index, pk).await;
        for (id, doc) in &want {
            match have.get(id) {
                None => found.push(format!("{index}: missing {id}: {doc}")),
                Some(indexed) if indexed != doc => found.push(format!(
                    "{index}: {id} is {indexed}, LibreChat builds {doc}"
                )),
                Some(_) => {}
            }
        }
        for (id, doc) in &have {
            if !want.contains_key(id) {
                found.push(format!("{index}: unexpected {id}: {doc}"));
            }
        }
        assert!(
            !want.is_empty(),
            "{collection}: the history holds searchable documents"
        );
    }
    found
}

/// LibreChat's own verdict: both models complete.
fn librechat_progress(target: &Target) -> Value {
    harness(target, &["progress"])
}

fn complete(progress: &Value) -> bool {
    progress["messages"]["isComplete"] == true && progress["conversations"]["isComplete"] == true
}

/// After a mode ran: LibreChat agrees (its progress, and our `status`
/// showing its view), and the index is LibreChat's own, document by document.
async fn assert_librechat_agrees(target: &Target, after: &str) {
    let progress = librechat_progress(target);
    assert!(
        complete(&progress),
        "after {after}, LibreChat's getSyncProgress() says incomplete: {progress}"
    );
    let differences = differences(target).await;
    assert!(
        differences.is_empty(),
        "after {after}, {} index documents differ from LibreChat's own:\n{}",
        differences.len(),
        differences.join("\n")
    );
    let status = target.run("status", &["status", "--json"]);
    assert!(
        status.status.success(),
        "status: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: Value = serde_json::from_slice(&status.stdout).expect("status --json");
    for view in status["collections"]
        .as_array()
        .expect("status shows the collections")
    {
        assert_eq!(
            view["librechat"]["complete"], true,
            "status shows LibreChat's view: {view}"
        );
        assert_eq!(view["ours"]["unindexed"], 0, "and ours: {view}");
    }
}

/// History written with search off, then more with LibreChat's hooks on.
fn write_history(target: &Target) {
    let off = harness(target, &["history", "--phase", "off", "--seed", "1"]);
    let on = harness(target, &["history", "--phase", "on", "--seed", "2"]);
    assert_eq!(on["settled"], true, "LibreChat's hooks settled: {on}");
    let progress = librechat_progress(target);
    assert!(
        !complete(&progress),
        "the history written with search off leaves LibreChat incomplete: {progress} ({off})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_leaves_the_index_librechat_would_build_and_its_progress_complete() {
    let _one_at_a_time = indexes_turn().await;
    let target = librechat_target("lc_once").await;
    write_history(&target);

    let once = target.run("once", &["once"]);
    assert!(
        once.status.success(),
        "once: {}",
        String::from_utf8_lossy(&once.stderr)
    );
    // What LibreChat's own hooks left stale stays stale: its
    // `updateMessageText` is a plain `updateOne` that keeps the flag, so no
    // count, id or marker shows it. `verify` finds exactly those, and
    // `once --deep` repairs them.
    let progress = librechat_progress(&target);
    assert!(
        complete(&progress),
        "after once, LibreChat's getSyncProgress() says incomplete: {progress}"
    );
    let left = differences(&target).await;
    assert!(
        left.iter().all(|d| d.contains(", LibreChat builds ")),
        "once left documents missing or unexpected, not only LibreChat's stale ones:\n{}",
        left.join("\n")
    );
    let (stale, report) = verify_stale_only(&target);
    assert_eq!(
        stale,
        left.len() as u64,
        "verify names what LibreChat left stale: {report}"
    );
    let deep = target.run("once", &["once", "--deep"]);
    assert!(
        deep.status.success(),
        "once --deep: {}",
        String::from_utf8_lossy(&deep.stderr)
    );
    assert_librechat_agrees(
        &target,
        "once, then once --deep for LibreChat's stale documents",
    )
    .await;

    // Nothing is sent again: every document is processed, ours and those
    // LibreChat's hooks indexed.
    let again = target.run("once", &["once", "--force"]);
    let log = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "second once: {log}");
    let lease = target.lease().await.expect("the lease document");
    let summary = lease.get_document("summary").expect("the run's summary");
    for collection in summary.get_array("collections").expect("collections") {
        let collection = collection.as_document().unwrap();
        let indexed = collection
            .get("indexed")
            .and_then(|n| n.as_i64().or(n.as_i32().map(i64::from)));
        assert_eq!(
            indexed,
            Some(0),
            "a second run re-sent documents: {collection}"
        );
    }

    // Raising the schema version re-sends every document (LibreChat's way
    // of rolling out a projection change), and marks them with it.
    let raised = target.clone().set("RECONCILER__SYNC__SCHEMA_VERSION", "2");
    let plan = raised.run("plan", &["plan", "--json"]);
    let plan: Value = serde_json::from_slice(&plan.stdout).expect("plan --json");
    for index in plan["indexes"].as_array().unwrap() {
        assert_eq!(
            index["documentsToIndex"], index["mongo"]["indexable"],
            "a new schema version means everything is sent again: {index}"
        );
        // LibreChat's view at the configured version: nothing processed yet.
        assert_eq!(
            index["librechat"]["processed"], 0,
            "LibreChat's view is shown: {index}"
        );
    }
    // (Forced: the run just before completed within `lease.reuse_completion_for`.)
    let bumped = raised.run("once", &["once", "--force"]);
    let log = String::from_utf8_lossy(&bumped.stderr);
    assert!(bumped.status.success(), "once at schema version 2: {log}");
    let db = target.db().await;
    for collection in ["messages", "conversations"] {
        let at_one = db
            .collection::<mongodb::bson::Document>(collection)
            .count_documents(
                mongodb::bson::doc! { "_meiliIndex": true, "_meiliIndexSchemaVersion": 1 },
            )
            .await
            .unwrap();
        assert_eq!(
            at_one, 0,
            "{collection}: every flagged document moved to schema version 2"
        );
    }
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_builds_the_index_librechat_would_build() {
    let _one_at_a_time = indexes_turn().await;
    let target = librechat_target("lc_reindex").await;
    write_history(&target);

    let reindex = target.run("reindex", &["reindex"]);
    assert!(
        reindex.status.success(),
        "reindex: {}",
        String::from_utf8_lossy(&reindex.stderr)
    );
    assert_librechat_agrees(&target, "reindex").await;
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_while_librechat_writes_ends_as_librechat_would_index() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let _one_at_a_time = indexes_turn().await;
    let target = librechat_target("lc_follow").await;
    harness(&target, &["history", "--phase", "off", "--seed", "1"]);

    let port = support::cli::free_port();
    let listen = format!("127.0.0.1:{port}");
    let base = format!("http://{listen}");
    let run_target = target
        .clone()
        .set("RECONCILER__SERVE__LISTEN", &listen)
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "1s");
    let mut replica = run_target.spawn("follower", &["run"]);
    let state = eventually(
        RUN_BOUND,
        "the replica to follow (or say it cannot)",
        || async {
            let status = support::follow::status(&base).await;
            let state = status["follow"]["state"].as_str().map(str::to_string);
            state.filter(|s| s == "following" || s == "unsupported")
        },
    )
    .await;
    assert_eq!(
        state, "following",
        "change streams are served here: the replica follows"
    );

    // LibreChat keeps writing while we follow: through its hooks, and
    // without them (only the follower indexes those).
    harness(&target, &["history", "--phase", "on", "--seed", "2"]);
    harness(&target, &["history", "--phase", "off", "--seed", "3"]);
    let outcome = eventually(RUN_BOUND, "LibreChat's progress to be complete", || async {
        let progress = librechat_progress(&target);
        complete(&progress).then_some(progress)
    })
    .await;
    eventually(RUN_BOUND, "the index to be LibreChat's own", || async {
        differences(&target).await.is_empty().then_some(())
    })
    .await;
    terminate(&replica);
    let exit = wait_exit(&mut replica, Duration::from_secs(60));
    assert!(
        exit.success(),
        "run exits 0 after SIGTERM: {}",
        replica.stderr_so_far()
    );
    assert!(
        replica.stderr_so_far().matches("reconciliation finished").count() == 1,
        "the writes reached Meilisearch through the stream, not a second reconciliation ({outcome})"
    );
    assert_librechat_agrees(&target, "following").await;
    target.cleanup().await;
}

/// LibreChat's own bulk sync (`syncWithMeili()`, run with `MEILI_NO_SYNC`
/// unset at every API start) on chats written with search off, where one
/// conversation id holds `|`. Its `processSyncBatch()` sends the documents'
/// raw fields — not its own `preprocessObjectForIndex()`, which rewrites `|`
/// as `--` and joins content parts into `text` — enqueues each page of 100
/// and flags the page `_meiliIndex: true` without looking at the task's
/// outcome. Meilisearch rejects that page's task whole (`invalid_document_id`:
/// ids hold only a-z A-Z 0-9 - _), so 100 conversations are flagged indexed
/// and absent, and LibreChat's `getSyncProgress()` says complete; every
/// message is held, the answers with their content parts raw. Then `once`
/// on the same database: its drift check finds the 100 flagged documents
/// Meilisearch lacks and sends them as LibreChat projects them (the `|` id
/// as `--`); the raw messages, flagged as current, are what `verify` names
/// stale and `once --deep` repairs, after which the index is LibreChat's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librechat_sync_flags_a_rejected_batch_indexed_and_once_repairs_it_and_once_deep_its_raw_documents(
) {
    /// Two of LibreChat's sync pages of conversations: the one holding the
    /// `|` id has 100 documents, whichever order the server returns.
    const CONVERSATIONS: u64 = 200;
    let _one_at_a_time = indexes_turn().await;
    let target = librechat_target("lc_sync").await;
    let seeded = harness(
        &target,
        &[
            "chats",
            "--seed",
            "7",
            "--conversations",
            &CONVERSATIONS.to_string(),
            "--pipe-at",
            "57",
        ],
    );
    let pipe = seeded["pipe"].as_str().expect("a conversation id with |");
    let pipe_sent = pipe.replace('|', "--");
    let messages = seeded["messages"].as_u64().expect("messages written");

    // LibreChat's own sync.
    let sync = harness(&target, &["sync"]);
    let failed = sync["failed_tasks"]
        .as_array()
        .expect("failed tasks listed");
    assert_eq!(
        failed.len(),
        1,
        "Meilisearch failed one of LibreChat's tasks: {sync}"
    );
    assert_eq!(failed[0]["indexUid"], "convos", "{sync}");
    assert_eq!(failed[0]["code"], "invalid_document_id", "{sync}");
    assert_eq!(
        failed[0]["receivedDocuments"], 100,
        "the rejected task is a whole page of LibreChat's sync: {sync}"
    );
    let progress = librechat_progress(&target);
    assert!(
        complete(&progress),
        "LibreChat's getSyncProgress() calls its sync complete: {progress}"
    );

    // What it left: flags on conversations Meilisearch does not hold.
    meili_settled(&target).await;
    let expected = harness(&target, &["expected"]);
    let projected = |collection: &str, pk: &str| -> BTreeMap<String, (String, Value)> {
        expected[collection]
            .as_array()
            .expect("expected documents")
            .iter()
            .filter(|e| e["searchable"] == true)
            .map(|e| {
                let id = e["_id"].as_str().unwrap().to_string();
                let key = e["doc"][pk].as_str().unwrap().to_string();
                (id, (key, e["doc"].clone()))
            })
            .collect()
    };
    let conversations = projected("conversations", "conversationId");
    assert_eq!(conversations.len() as u64, CONVERSATIONS);
    let flagged: Vec<String> = target
        .db()
        .await
        .collection::<mongodb::bson::Document>("conversations")
        .distinct("_id", mongodb::bson::doc! { "_meiliIndex": true })
        .await
        .unwrap()
        .iter()
        .map(|id| id.as_object_id().expect("an ObjectId").to_hex())
        .collect();
    assert_eq!(
        flagged.len() as u64,
        CONVERSATIONS,
        "LibreChat flags every conversation indexed"
    );
    let held = meili_documents(&target, "convos", "conversationId").await;
    let absent: Vec<&String> = flagged
        .iter()
        .map(|id| &conversations[id].0)
        .filter(|key| !held.contains_key(*key))
        .collect();
    assert_eq!(
        absent.len(),
        100,
        "the rejected page's 100 conversations are flagged and absent"
    );
    assert!(
        absent.contains(&&pipe_sent),
        "the conversation with | is among them"
    );
    // And messages held as LibreChat's hooks would never send them.
    let answers = messages / 2;
    let held_messages = meili_documents(&target, "messages", "messageId").await;
    assert_eq!(
        held_messages.len() as u64,
        messages,
        "every message is held"
    );
    let raw: Vec<&Value> = projected("messages", "messageId")
        .values()
        .filter_map(|(key, doc)| held_messages.get(key).filter(|held| *held != doc))
        .collect();
    let with_content = raw
        .iter()
        .filter(|held| held.get("content").is_some())
        .count() as u64;
    let with_pipe = raw
        .iter()
        .filter(|held| held["conversationId"].as_str() == Some(pipe))
        .count();
    assert_eq!(
        with_content, answers,
        "every answer is held with its content parts raw: {raw:?}"
    );
    assert_eq!(
        with_pipe, 2,
        "the |-conversation's messages are held with | in conversationId"
    );
    assert_eq!(
        raw.len() as u64,
        answers + 1,
        "nothing else differs (the |-conversation's answer is one of the answers)"
    );

    // This service's `once` on the same database: the rejected page is sent.
    let once = target.run("once", &["once"]);
    assert!(
        once.status.success(),
        "once: {}",
        String::from_utf8_lossy(&once.stderr)
    );
    let left = differences(&target).await;
    assert!(
        left.iter()
            .all(|d| d.starts_with("messages: ") && d.contains(", LibreChat builds ")),
        "once left conversations wrong, or messages missing or unexpected:\n{}",
        left.join("\n")
    );
    assert_eq!(
        left.len(),
        raw.len(),
        "once leaves exactly the raw messages LibreChat flagged as current:\n{}",
        left.join("\n")
    );
    let convos = meili_documents(&target, "convos", "conversationId").await;
    assert_eq!(
        convos[&pipe_sent]["conversationId"], pipe_sent,
        "the | id is sent as --"
    );
    let (stale, report) = verify_stale_only(&target);
    assert_eq!(stale, raw.len() as u64, "verify names them: {report}");
    let deep = target.run("once", &["once", "--deep"]);
    assert!(
        deep.status.success(),
        "once --deep: {}",
        String::from_utf8_lossy(&deep.stderr)
    );
    assert_librechat_agrees(&target, "LibreChat's sync, then once and once --deep").await;
    target.cleanup().await;
}

/// `verify --json`: asserts nothing is missing or unexpected in either index,
/// and returns how many documents it found stale, with its report.
fn verify_stale_only(target: &Target) -> (u64, Value) {
    let verify = target.run("verify", &["verify", "--json"]);
    let report: Value = serde_json::from_slice(&verify.stdout).expect("verify --json");
    let stale = report["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(i["missing"]["count"], 0, "{i}");
            assert_eq!(i["unexpected"]["count"], 0, "{i}");
            i["stale"]["count"].as_u64().unwrap()
        })
        .sum();
    (stale, report)
}
