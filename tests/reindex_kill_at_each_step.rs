//! A `reindex` process killed (SIGKILL) right after each of its steps —
//! build, mark, swap, flags, index, drop — leaves a state the next ordinary
//! `once` makes exact, document by document, with no `<uid>_reindex` left
//! and the reindex marker cleared.
//!
//! While the build runs, the application changes documents the build has
//! already read, the way LibreChat does with its save hook: the new version
//! (or the removal) goes to the live index and the flag is set. After the
//! swap the new index holds the old versions under flags that say
//! "indexed": only an exact comparison finds them, and the marker is what
//! makes the next run do one when the reindex died before its flag step.
//! The kill point is deterministic: `RECONCILER_TEST_PAUSE_AFTER=<step>`
//! (test-only) makes the process wait right after that step, and the test
//! kills it there.

use crate::support;

use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Document};
use serde_json::Value;
use support::chat_data::{expected, seed, server_now, Env};
use support::cli::{eventually, Target};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn killed_after(step: &str) {
    if support::skip::skip_without_fault_injection() {
        return;
    }
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let target = Target::new(&format!("kill_{step}"))
        .with_meili(&standin.host, &standin.key)
        .set("RECONCILER__SYNC__BATCH_DOCS", "50")
        // Two tasks in flight at a time keep the build slow enough for the
        // changes below to land during it.
        .set("RECONCILER__SYNC__IN_FLIGHT", "2");
    let env = Env::for_target(&target).await;
    let seeded_at = seed(&env, 600, 60).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    // The build reads 50 documents at a time, each costing Meilisearch 3 ms.
    knobs.set_per_document_cost(3_000).await;
    let mut reindex = target
        .clone()
        .set("RECONCILER_TEST_PAUSE_AFTER", step)
        .spawn("reindexer", &["reindex"]);
    let build_path = format!("/indexes/{}messages_reindex/documents", target.prefix);
    eventually(
        Duration::from_secs(60),
        "the build's first batch",
        || async {
            knobs
                .requests()
                .await
                .iter()
                .any(|r| r["method"] == "POST" && r["path"] == build_path.as_str())
                .then_some(())
        },
    )
    .await;

    // The application changes three documents the build has read, with its
    // save hook writing to the live index.
    let docs = env.mongo_docs(Collection::Messages).await;
    let read: Vec<&Document> = docs
        .iter()
        .filter(|d| expected(Collection::Messages, d, seeded_at).is_some())
        .take(3)
        .collect();
    let messages = env.db.collection::<Document>("messages");
    let live = env.uid(Collection::Messages);
    let now = server_now(&env.db).await;
    let (edited, deleted, temporary) = (read[0], read[1], read[2]);
    let edited_id = edited.get("_id").unwrap();
    messages
        .update_one(
            doc! { "_id": edited_id },
            doc! { "$set": { "text": "EDITED DURING THE BUILD", "updatedAt": now, "_meiliIndex": false },
                   "$unset": { "content": "" } },
        )
        .await
        .unwrap();
    let new_version = messages
        .find_one(doc! { "_id": edited_id })
        .await
        .unwrap()
        .unwrap();
    env.put_docs(
        &live,
        &[expected(Collection::Messages, &new_version, now).unwrap().1],
    )
    .await;
    messages
        .update_one(
            doc! { "_id": edited_id },
            doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } },
        )
        .await
        .unwrap();
    messages
        .delete_one(doc! { "_id": deleted.get("_id").unwrap() })
        .await
        .unwrap();
    messages
        .update_one(
            doc! { "_id": temporary.get("_id").unwrap() },
            doc! { "$set": { "isTemporary": true, "updatedAt": now, "_meiliIndex": false } },
        )
        .await
        .unwrap();
    let gone: Vec<String> = [deleted, temporary]
        .iter()
        .map(|d| d.get_str("messageId").unwrap().to_string())
        .collect();
    env.delete_docs(&live, &gone).await;
    let swapped = knobs
        .requests()
        .await
        .iter()
        .any(|r| r["path"] == "/swap-indexes");
    assert!(!swapped, "the changes must land before the swap");
    knobs.set_per_document_cost(0).await;

    reindex.await_pause(step, support::timing::RUN_BOUND).await;
    reindex.child.kill().expect("SIGKILL the reindex");
    reindex.child.wait().unwrap();

    let plan = target.run("op", &["plan", "--json"]);
    let plan: Value = serde_json::from_slice(&plan.stdout).expect("plan --json");
    let messages_plan = &plan["indexes"][0];
    let marked = matches!(step, "mark" | "swap");
    assert_eq!(
        messages_plan["exactComparisonPending"], marked,
        "{messages_plan}"
    );
    let leftover = step != "drop";
    assert_eq!(
        messages_plan["leftoverBuildIndex"], leftover,
        "{messages_plan}"
    );

    // The next ordinary run (it takes over once the dead owner's lease expires).
    let out = target.run("next", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    for collection in Collection::ALL {
        let build = env.build_uid(collection);
        assert!(
            env.meili.index(&build).await.unwrap().is_none(),
            "{build} left behind after a kill after {step}"
        );
    }
    let state = env
        .db
        .collection::<Document>("distributedJobs")
        .find_one(doc! { "_id": "meili-index-sync:indexes" })
        .await
        .unwrap();
    let pending = state
        .as_ref()
        .and_then(|s| s.get_document("exactComparisonPending").ok())
        .map(|p| p.len())
        .unwrap_or(0);
    assert_eq!(pending, 0, "marker left set: {state:?}");
    let out = target.run("op", &["verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_build() {
    killed_after("build").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_mark() {
    killed_after("mark").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_swap() {
    killed_after("swap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_flags() {
    killed_after("flags").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_index() {
    killed_after("index").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_drop() {
    killed_after("drop").await;
}
