//! End to end on seeded data: afterwards Meilisearch holds exactly the
//! expected projection of every indexable document, all of them flagged, and
//! nothing else — including stale entries put into Meilisearch beforehand.

use crate::support;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Document};
use serde_json::json;
use support::chat_data::{seed, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meilisearch_ends_equal_to_the_indexable_projection() {
    let mut env = Env::new("e2e").await;
    // Four batches of messages, sent pipelined.
    env.opts.batch_docs = 1_000;
    let now = seed(&env, 4_000, 400).await;
    // Two messages Meilisearch must refuse (invalid ids).
    env.db
        .collection::<Document>("messages")
        .update_many(
            doc! { "messageId": { "$in": ["msg-100", "msg-200"] } },
            doc! { "$set": { "messageId": "bad|id" } },
        )
        .await
        .unwrap();
    env.db
        .collection::<Document>("messages")
        .update_one(
            doc! { "messageId": "bad|id" },
            doc! { "$set": { "messageId": "bad id 2" } },
        )
        .await
        .unwrap();

    // Stale state: ghosts, non-indexable documents, an outdated version.
    let messages = env.uid(Collection::Messages);
    let convos = env.uid(Collection::Conversations);
    env.create_index(&messages, "messageId").await;
    env.create_index(&convos, "conversationId").await;
    let mut stale: Vec<_> = (0..50)
        .map(|i| json!({"messageId": format!("ghost-{i}"), "user": "user-1", "text": "gone"}))
        .collect();
    for id in ["msg-3", "msg-5", "msg-8", "msg-9"] {
        stale.push(json!({"messageId": id, "user": "user-1", "text": "not indexable any more"}));
    }
    stale.push(json!({"messageId": "msg-0", "user": "user-0", "text": "OLD VERSION"}));
    env.put_docs(&messages, &stale).await;
    env.put_docs(
        &convos,
        &[
            json!({"conversationId": "ghost-conv", "user": "u", "title": "gone"}),
            json!({"conversationId": "conv-4", "user": "u", "title": "temporary now"}),
        ],
    )
    .await;
    env.db
        .collection::<Document>("messages")
        .update_many(
            doc! { "messageId": { "$in": ["msg-3", "msg-5", "msg-8", "msg-9"] } },
            doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } },
        )
        .await
        .unwrap();

    let summary = env.run().await.expect("reconcile");
    println!("{summary}");

    env.assert_in_step(now, &["bad|id", "bad id 2"]).await;
    let m = &summary.collections[0];
    assert_eq!(m.collection, "messages");
    let mut rejected: Vec<_> = m
        .rejected
        .iter()
        .map(|r| (r.id.clone().unwrap(), r.code.clone()))
        .collect();
    rejected.sort();
    assert_eq!(
        rejected,
        vec![
            ("bad id 2".to_string(), "invalid_document_id".to_string()),
            ("bad|id".to_string(), "invalid_document_id".to_string())
        ]
    );
    assert!(
        m.deleted >= 54,
        "ghosts and non-indexable documents deleted: {}",
        m.deleted
    );
    assert!(summary.collections[1].deleted >= 2);
    assert!(summary.to_string().contains("completed with 2 rejects"));
    env.cleanup().await;
}
