//! Poison isolation: one document Meilisearch refuses among 1,000 → the 999
//! others are indexed and acknowledged, the one is reported with Meilisearch's
//! error code and left unacknowledged; the next run reports it again and
//! completes. A refused batch re-read down to one good document indexes it.

use crate::support;

use meili_reconciler::lease::Guard;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reconcile, SyncOptions};
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

/// A refused batch that re-reads as one document (the bad one fixed and the
/// other deleted while the task ran) is not judged by its batch's refusal:
/// the document is sent alone, indexed and acknowledged — not reported as
/// rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_that_re_reads_as_one_good_document_is_indexed() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let env = Env::on_standin(&standin, "poison_fixed").await;
    let now = server_now(&env.db).await;
    let (bad, good) = (plain_message(537, now), plain_message(1, now));
    env.insert(Collection::Messages, vec![bad.clone(), good.clone()])
        .await;
    // Widen the window between the refused task and the batch's re-read.
    knobs.set_latency(400).await;
    let run = {
        let (db, meili, opts) = (env.db.clone(), env.meili.clone(), env.opts.clone());
        tokio::spawn(async move {
            reconcile(&db, &meili, &opts, &Guard::unfenced(), &Progress::new()).await
        })
    };
    knobs.await_messages_batch(&run).await;
    // While the task runs: the application fixes the bad id and deletes the
    // other message.
    let messages = env.db.collection::<Document>("messages");
    let fixed_at = server_now(&env.db).await;
    messages
        .update_one(
            doc! { "_id": bad.get("_id").unwrap() },
            doc! { "$set": { "messageId": "fixed-537", "updatedAt": fixed_at } },
        )
        .await
        .unwrap();
    messages
        .delete_one(doc! { "_id": good.get("_id").unwrap() })
        .await
        .unwrap();
    let summary = run.await.unwrap().expect("run");
    println!("{summary}");
    let m = &summary.collections[0];
    assert!(m.rejected.is_empty(), "nothing left to reject: {summary}");
    let in_meili = env.meili_docs(Collection::Messages).await;
    assert!(in_meili.contains_key("fixed-537"), "{summary}");
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
