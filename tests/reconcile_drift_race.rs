//! The drift repair reads Meilisearch's ids first and MongoDB's after
//! (docs/design.md §4.4): a message LibreChat saves and indexes in between
//! is in Meilisearch but was not listed, and must not be taken for an
//! orphan; a message deleted in between was listed and is not claimed by
//! MongoDB, so it goes. The pause between the two reads is deterministic
//! (`RECONCILER_TEST_PAUSE_AFTER=drift-meili-ids`, resumed by a file).

use crate::support;

use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::doc;
use serde_json::json;
use support::chat_data::{expected, message, seed, server_now, Env};
use support::cli::{output_of, wait_exit, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_saved_and_indexed_during_the_id_comparison_is_not_deleted_as_an_orphan() {
    if support::skip::skip_without_fault_injection() {
        return;
    }
    let target = Target::new("drift_race");
    let env = Env::for_target(&target).await;
    seed(&env, 300, 30).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // An orphan from before the run (its MongoDB document is gone).
    let uid = env.uid(Collection::Messages);
    let ghost = json!({"messageId": "ghost-early", "user": "user-1", "text": "gone"});
    env.put_docs(&uid, &[ghost]).await;

    let resume = tempfile::tempdir().unwrap();
    let resume_file = resume.path().join("resume");
    let mut forced = target.spawn_with(
        "forced",
        &["once", "--force"],
        &[
            ("RECONCILER_TEST_PAUSE_AFTER", "drift-meili-ids"),
            ("RECONCILER_TEST_RESUME_FILE", resume_file.to_str().unwrap()),
        ],
    );
    forced
        .await_pause("drift-meili-ids", Duration::from_secs(60))
        .await;

    // LibreChat saves a message and its save hook indexes it and sets the
    // flag — after the repair listed Meilisearch's ids, before it reads MongoDB's.
    let now = server_now(&env.db).await;
    let mut late = message(10_001, now);
    late.insert("messageId", "msg-late");
    late.insert("_meiliIndex", true);
    late.insert("_meiliIndexSchemaVersion", 1);
    env.insert(Collection::Messages, vec![late.clone()]).await;
    let (_, projection) = expected(Collection::Messages, &late, now).expect("indexable");
    env.put_docs(&uid, &[projection]).await;
    // And an indexed message is deleted without a hook (it was listed).
    let gone = env
        .db
        .collection::<mongodb::bson::Document>("messages")
        .delete_one(doc! { "messageId": "msg-0" })
        .await
        .unwrap();
    assert_eq!(gone.deleted_count, 1);
    std::fs::write(&resume_file, b"").unwrap();

    let status = wait_exit(&mut forced, support::timing::RUN_BOUND);
    let (stdout, stderr) = output_of(forced);
    assert!(status.success(), "{status}: {stdout}{stderr}");
    let in_meili = env.meili_docs(Collection::Messages).await;
    assert!(
        in_meili.contains_key("msg-late"),
        "the message saved during the comparison was deleted as an orphan: {stderr}"
    );
    assert!(!in_meili.contains_key("ghost-early"), "the orphan stays");
    assert!(
        !in_meili.contains_key("msg-0"),
        "the message deleted during the comparison stays searchable"
    );
    let flagged = env
        .db
        .collection::<mongodb::bson::Document>("messages")
        .count_documents(doc! { "messageId": "msg-late", "_meiliIndex": true })
        .await
        .unwrap();
    assert_eq!(flagged, 1, "it ends flagged, as the save hook left it");
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}

/// With a memory budget too small for every id, the comparison runs in
/// hash partitions and repairs exactly what one pass repairs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_repaired_alike_when_the_ids_are_compared_in_partitions() {
    let env = Env::new("drift_parts").await;
    seed(&env, 400, 40).await;
    env.run().await.expect("first run");
    let uid = env.uid(Collection::Messages);
    let ghosts: Vec<_> = (0..30)
        .map(|i| json!({"messageId": format!("ghost-{i}"), "user": "user-1", "text": "gone"}))
        .collect();
    env.put_docs(&uid, &ghosts).await;
    // Twenty flagged messages vanish from Meilisearch.
    let lost: Vec<String> = env
        .meili_docs(Collection::Messages)
        .await
        .into_keys()
        .filter(|id| id.starts_with("msg-"))
        .take(20)
        .collect();
    env.delete_docs(&uid, &lost).await;

    // 9 bytes an id: 900 bytes hold 100 ids, so ~400 ids take 4+ partitions.
    let opts = meili_reconciler::reconcile::SyncOptions {
        force: true,
        compare_memory: 900,
        ..env.opts.clone()
    };
    let summary = env.run_with(&opts).await.expect("forced run");
    let m = &summary.collections[0];
    assert!(
        m.comparison_partitions >= 4,
        "900 bytes hold 100 ids: {summary}"
    );
    assert_eq!(m.deleted, 30, "every ghost deleted once: {summary}");
    assert_eq!(
        m.flags_cleared, 20,
        "every lost message unflagged once: {summary}"
    );
    assert_eq!(m.indexed, 20, "and sent again: {summary}");
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
