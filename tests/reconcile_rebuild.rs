//! Rebuilds: a missing index and an index with the wrong primary key are
//! (re)created with the right key and refilled, flags reset first; a run
//! interrupted during the flag reset is resumed by the next run.

use crate::support;

use std::time::Duration;

use meili_reconciler::lease::{Guard, LeaseLost};
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reconcile, RebuildReason, ReconcileError};
use mongodb::bson::{doc, Document};
use serde_json::json;
use support::chat_data::{seed, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_index_is_created_and_filled_even_when_flags_say_indexed() {
    let env = Env::new("rb_missing").await;
    let now = seed(&env, 2_000, 200).await;
    // LibreChat believes everything is indexed; Meilisearch has no index.
    for c in Collection::ALL {
        env.db
            .collection::<Document>(c.name())
            .update_many(doc! {}, doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } })
            .await
            .unwrap();
    }
    let summary = env.run().await.expect("run");
    for (c, s) in Collection::ALL.iter().zip(&summary.collections) {
        assert_eq!(s.rebuilt, Some(RebuildReason::IndexMissing));
        let info = env.meili.index(&env.uid(*c)).await.unwrap().unwrap();
        assert_eq!(info.primary_key.as_deref(), Some(c.primary_key()));
    }
    env.assert_in_step(now, &[]).await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_primary_key_is_rebuilt() {
    let env = Env::new("rb_pk").await;
    let now = seed(&env, 2_000, 200).await;
    let messages = env.uid(Collection::Messages);
    env.create_index(&messages, "id").await;
    env.put_docs(&messages, &[json!({"id": "x1", "user": "u"})])
        .await;
    let summary = env.run().await.expect("run");
    assert_eq!(
        summary.collections[0].rebuilt,
        Some(RebuildReason::WrongPrimaryKey {
            actual: Some("id".into())
        })
    );
    let info = env.meili.index(&messages).await.unwrap().unwrap();
    assert_eq!(info.primary_key.as_deref(), Some("messageId"));
    env.assert_in_step(now, &[]).await;
    env.cleanup().await;
}

/// The state a crash in the middle of a flag reset leaves behind: the index
/// recreated (right key, empty) while part of the flags are still set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_the_flag_reset_is_resumed() {
    let env = Env::new("rb_crash").await;
    let now = seed(&env, 2_000, 200).await;
    for c in Collection::ALL {
        env.create_index(&env.uid(c), c.primary_key()).await;
        // Half of the documents (by _id) still carry their flag.
        let docs = env.mongo_docs(c).await;
        let middle = docs[docs.len() / 2].get("_id").unwrap().clone();
        env.db
            .collection::<Document>(c.name())
            .update_many(
                doc! { "_id": { "$lt": middle } },
                doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } },
            )
            .await
            .unwrap();
    }
    let summary = env.run().await.expect("run");
    for s in &summary.collections {
        assert!(
            matches!(
                s.rebuilt,
                Some(RebuildReason::IndexLost {
                    meili_documents: 0,
                    ..
                })
            ),
            "{:?}",
            s.rebuilt
        );
    }
    env.assert_in_step(now, &[]).await;
    env.cleanup().await;
}

/// A real interruption: the run is stopped (lease lost) once the flag reset
/// has started; the next run completes the rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_rebuild_completes_on_the_next_run() {
    let env = Env::new("rb_stop").await;
    // Three ranges of the flag reset (2,000 each): the stop falls inside it.
    let now = seed(&env, 6_000, 200).await;
    let messages = env.uid(Collection::Messages);
    env.create_index(&messages, "id").await;
    env.db
        .collection::<Document>("messages")
        .update_many(doc! {}, doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } })
        .await
        .unwrap();

    let guard = Guard::unfenced();
    let progress = Progress::new();
    let watcher = {
        let (guard, progress) = (guard.clone(), progress.clone());
        tokio::spawn(async move {
            loop {
                let s = progress.snapshot();
                if s.phase.starts_with("reset flags") && s.done > 0 || s.phase.starts_with("index")
                {
                    guard.cancel(LeaseLost::TakenOver);
                    return s;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let first = reconcile(&env.db, &env.meili, &env.opts, &guard, &progress).await;
    let stopped_at = tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("the run was stopped during its rebuild, not left to finish")
        .unwrap();
    println!("stopped during {stopped_at:?}");
    assert!(
        matches!(first, Err(ReconcileError::LeaseLost(LeaseLost::TakenOver))),
        "{first:?}"
    );

    let summary = env.run().await.expect("second run");
    println!("{summary}");
    env.assert_in_step(now, &[]).await;
    env.cleanup().await;
}
