//! Poison isolation: one document Meilisearch refuses among 1,000 → the 999
//! others are indexed and acknowledged, the one is reported with Meilisearch's
//! error code and left unacknowledged; the next run reports it again and
//! completes.

mod support;

use meili_reconciler::mongo::Collection;
use meili_reconciler::reconcile::SyncOptions;
use mongodb::bson::{doc, oid::ObjectId, DateTime, Document};
use support::chat_data::{server_now, Env};

fn plain_message(i: usize, now: DateTime) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "messageId": if i == 537 { "poison|id".to_string() } else { format!("ok-{i}") },
        "conversationId": "c1",
        "user": "u1",
        "sender": "User",
        "text": format!("text {i}"),
        "updatedAt": now,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_document_among_a_thousand() {
    let env = Env::new("poison").await;
    let now = server_now(&env.db).await;
    env.insert(
        Collection::Messages,
        (0..1000).map(|i| plain_message(i, now)).collect(),
    )
    .await;
    let opts = SyncOptions {
        batch_docs: 1000,
        ..env.opts.clone()
    };

    let summary = env
        .run_with(&opts)
        .await
        .expect("run completes despite the reject");
    println!("{summary}");
    let m = &summary.collections[0];
    assert_eq!(m.indexed, 999);
    assert_eq!(m.rejected.len(), 1);
    assert_eq!(m.rejected[0].id.as_deref(), Some("poison|id"));
    assert_eq!(m.rejected[0].code, "invalid_document_id");
    assert!(summary.to_string().contains("completed with 1 rejects"));
    assert!(!summary.nothing_to_do);

    let in_meili = env.meili_docs(Collection::Messages).await;
    assert_eq!(in_meili.len(), 999);
    assert!(!in_meili.contains_key("poison|id"));
    let flagged = env
        .db
        .collection::<Document>("messages")
        .count_documents(doc! { "_meiliIndex": true })
        .await
        .unwrap();
    assert_eq!(flagged, 999);
    let poison = env
        .db
        .collection::<Document>("messages")
        .find_one(doc! { "messageId": "poison|id" })
        .await
        .unwrap()
        .unwrap();
    assert_ne!(poison.get_bool("_meiliIndex").ok(), Some(true));

    // A later run (forced past the threshold) reports it again and completes.
    let again = env
        .run_with(&SyncOptions {
            force: true,
            ..opts.clone()
        })
        .await
        .expect("second run completes");
    assert_eq!(again.collections[0].indexed, 0);
    assert_eq!(again.collections[0].rejected.len(), 1);
    env.cleanup().await;
}
