//! A document edited between its read and its acknowledgement is not
//! acknowledged by the stale batch: it is re-read and re-sent, and
//! Meilisearch ends with its latest version.

use crate::support;

use meili_reconciler::lease::Guard;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reconcile, SyncOptions};
use mongodb::bson::{doc, Document};
use serde_json::json;
use support::chat_data::{seed, server_now, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_during_the_task_ends_in_meilisearch() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let env = Env::on_standin(&standin, "edit").await;
    seed(&env, 1_000, 10).await;
    // Widen the read → ack window: every task takes 400 ms.
    knobs.set_latency(400).await;
    let first = env.mongo_docs(Collection::Messages).await.remove(0);
    let first_id = first.get_str("messageId").unwrap().to_string();
    let opts = SyncOptions {
        batch_docs: 200,
        in_flight: 1,
        ..env.opts.clone()
    };
    let run = {
        let (db, meili) = (env.db.clone(), env.meili.clone());
        tokio::spawn(async move {
            reconcile(&db, &meili, &opts, &Guard::unfenced(), &Progress::new()).await
        })
    };
    // Wait until the first batch (which holds the first document) is sent.
    knobs.await_messages_batch(&run).await;
    // The application edits it, as LibreChat does: new text, new updatedAt,
    // flag cleared.
    let edited_at = server_now(&env.db).await;
    env.db
        .collection::<Document>("messages")
        .update_one(
            doc! { "_id": first.get("_id").unwrap() },
            doc! { "$set": { "text": "EDITED", "updatedAt": edited_at, "_meiliIndex": false } },
        )
        .await
        .unwrap();
    let summary = run.await.unwrap().expect("run");
    println!("{summary}");

    // The stale batch did not acknowledge the edited document: a later pass
    // re-read and re-sent it, so it was confirmed twice...
    let now = server_now(&env.db).await;
    let indexable = env
        .mongo_docs(Collection::Messages)
        .await
        .iter()
        .filter(|d| support::chat_data::expected(Collection::Messages, d, now).is_some())
        .count() as u64;
    assert_eq!(summary.collections[0].indexed, indexable + 1);
    // ...and Meilisearch holds its latest version.
    let in_meili = env.meili_docs(Collection::Messages).await;
    assert_eq!(in_meili[&first_id]["text"], json!("EDITED"));
    env.assert_in_step(now, &[]).await;
    env.cleanup().await;
}
