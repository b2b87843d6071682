//! `reindex --in-place` resets the flags and re-sends every document into
//! the live index: it ends with exactly the expected documents and flags —
//! a stale version Meilisearch held while the flag said "indexed" is
//! replaced, a ghost is deleted — without building, swapping or deleting
//! any index.

use crate::support;

use meili_reconciler::mongo::Collection;
use meili_reconciler::reconcile::{RebuildReason, ReindexOptions};
use mongodb::bson::{doc, Document};
use serde_json::json;
use support::chat_data::{seed, server_now, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_reindex_resends_everything_into_the_live_index() {
    let env = Env::new("ri_inplace").await;
    seed(&env, 2_000, 200).await;
    env.run().await.expect("initial reconciliation");
    let live = env.uid(Collection::Messages);

    // Drift a normal run would not see: the text changed in MongoDB without
    // the flag being cleared, and a ghost sits in Meilisearch.
    env.db
        .collection::<Document>("messages")
        .update_one(
            doc! { "messageId": "msg-0" },
            doc! { "$set": { "text": "changed behind the flag's back" } },
        )
        .await
        .unwrap();
    env.put_docs(&live, &[json!({"messageId": "ghost", "user": "user-1"})])
        .await;
    // The newest task on the index so far (tasks are listed newest first).
    let last_before = env
        .meili
        .tasks(&format!("indexUids={live}&limit=1"))
        .await
        .unwrap()["results"][0]["uid"]
        .as_u64()
        .unwrap();

    let summary = env
        .reindex(&ReindexOptions {
            only: Some(Collection::Messages),
            in_place: true,
        })
        .await
        .expect("in-place reindex");
    println!("{summary}");
    assert_eq!(summary.collections.len(), 1, "only the messages index");
    let m = &summary.collections[0];
    assert_eq!(m.rebuilt, Some(RebuildReason::Forced));
    assert!(m.flags_cleared > 0 && m.indexed >= m.flags_cleared);
    assert_eq!(m.deleted, 1, "the ghost");

    let in_meili = env.meili_docs(Collection::Messages).await;
    assert_eq!(
        in_meili["msg-0"]["text"],
        json!("changed behind the flag's back")
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    // The live index was written to, never replaced.
    assert!(env
        .meili
        .index(&env.build_uid(Collection::Messages))
        .await
        .unwrap()
        .is_none());
    let tasks = env
        .meili
        .tasks(&format!("indexUids={live}&limit=1000"))
        .await
        .unwrap();
    let during: Vec<_> = tasks["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["uid"].as_u64().unwrap() > last_before)
        .collect();
    assert!(!during.is_empty(), "the reindex wrote to the live index");
    for t in during {
        assert!(
            !["indexSwap", "indexDeletion", "indexCreation"].contains(&t["type"].as_str().unwrap()),
            "unexpected task {t}"
        );
    }
    env.cleanup().await;
}
