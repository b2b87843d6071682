//! A zero-downtime reindex into a deployment with no index yet (the live
//! index is created empty and swapped) isolates the documents Meilisearch
//! refuses: they are reported with Meilisearch's error code and left
//! unflagged, while every other document is indexed and flagged.

use crate::support;

use meili_reconciler::mongo::Collection;
use meili_reconciler::reconcile::ReindexOptions;
use mongodb::bson::{doc, Document};
use support::chat_data::{seed, server_now, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_documents_are_reported_and_left_unflagged() {
    let env = Env::new("ri_rejects").await;
    seed(&env, 1_000, 100).await;
    env.db
        .collection::<Document>("messages")
        .update_one(
            doc! { "messageId": "msg-100" },
            doc! { "$set": { "messageId": "bad|id" } },
        )
        .await
        .unwrap();
    for c in Collection::ALL {
        assert!(env.meili.index(&env.uid(c)).await.unwrap().is_none());
    }

    let summary = env
        .reindex(&ReindexOptions::default())
        .await
        .expect("reindex completes despite the reject");
    println!("{summary}");
    let m = &summary.collections[0];
    let rejected: Vec<_> = m
        .rejected
        .iter()
        .map(|r| (r.id.as_deref().unwrap(), r.code.as_str()))
        .collect();
    assert_eq!(rejected, vec![("bad|id", "invalid_document_id")]);
    assert!(summary.to_string().contains("completed with 1 rejects"));
    for c in Collection::ALL {
        let info = env.meili.index(&env.uid(c)).await.unwrap().unwrap();
        assert_eq!(info.primary_key.as_deref(), Some(c.primary_key()));
        assert!(env.meili.index(&env.build_uid(c)).await.unwrap().is_none());
        let settings = env.meili.settings(&env.uid(c)).await.unwrap();
        assert_eq!(
            settings["filterableAttributes"],
            serde_json::json!(["user"])
        );
    }
    env.assert_in_step(server_now(&env.db).await, &["bad|id"])
        .await;
    env.cleanup().await;
}
