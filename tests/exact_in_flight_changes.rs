//! Documents of a batch changed while the batch is in flight are handled by
//! that same `once` (a real process): documents of the first batch deleted,
//! made temporary or expired; documents of the second batch (alone in their
//! batch, so nothing else betrays them) edited by an application whose clock
//! runs 30 s behind MongoDB's, the way LibreChat writes (new text,
//! `updatedAt` from its own clock, `_meiliIndex: false`). Afterwards, with no
//! further run, Meilisearch holds none of the removed documents and the
//! edited ones in their new version, and every document is exact.

use crate::support;

use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, DateTime, Document};
use serde_json::json;
use support::chat_data::{expected, seed, server_now, Env};
use support::cli::{eventually, output_of, wait_exit, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_to_a_batch_in_flight_are_handled_in_the_same_run() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let target = Target::new("inflight")
        .with_meili(&standin.host, &standin.key)
        .set("RECONCILER__SYNC__BATCH_DOCS", "200")
        .set("RECONCILER__SYNC__IN_FLIGHT", "1");
    let env = Env::for_target(&target).await;
    let seeded_at = seed(&env, 1_000, 100).await;
    // The batches: 200 indexable messages each, by `_id`.
    let docs = env.mongo_docs(Collection::Messages).await;
    let batches: Vec<&Document> = docs
        .iter()
        .filter(|d| expected(Collection::Messages, d, seeded_at).is_some())
        .take(400)
        .collect();
    let pick = |i: usize| batches[i].get("_id").unwrap().clone();
    let id_of = |i: usize| batches[i].get_str("messageId").unwrap().to_string();

    // Every task takes 1.5 s: the first batch stays in flight while we write.
    knobs.set_latency(1_500).await;
    let mut once = target.spawn("owner", &["once"]);
    let documents_path = format!("/indexes/{}messages/documents", target.prefix);
    let batches_sent = || async {
        knobs
            .requests()
            .await
            .iter()
            .filter(|r| r["method"] == "POST" && r["path"] == documents_path.as_str())
            .count()
    };
    eventually(Duration::from_secs(60), "the first batch sent", || async {
        (batches_sent().await == 1).then_some(())
    })
    .await;

    let messages = env.db.collection::<Document>("messages");
    let now = server_now(&env.db).await;
    let behind = DateTime::from_millis(now.timestamp_millis() - 30_000);
    let just_expired = DateTime::from_millis(now.timestamp_millis() - 1_000);
    for i in [10, 20, 30] {
        messages.delete_one(doc! { "_id": pick(i) }).await.unwrap();
    }
    for i in [40, 50] {
        let set = doc! { "isTemporary": true, "updatedAt": behind, "_meiliIndex": false };
        messages
            .update_one(doc! { "_id": pick(i) }, doc! { "$set": set })
            .await
            .unwrap();
    }
    for i in [60, 70] {
        let set = doc! { "expiredAt": just_expired, "updatedAt": behind, "_meiliIndex": false };
        messages
            .update_one(doc! { "_id": pick(i) }, doc! { "$set": set })
            .await
            .unwrap();
    }
    assert_eq!(
        batches_sent().await,
        1,
        "the first batch's changes must land while it is in flight"
    );
    eventually(Duration::from_secs(60), "the second batch sent", || async {
        (batches_sent().await == 2).then_some(())
    })
    .await;
    let now = server_now(&env.db).await;
    let behind = DateTime::from_millis(now.timestamp_millis() - 30_000);
    for i in [280, 290, 300] {
        let set = doc! { "text": format!("EDITED {i}"), "updatedAt": behind, "_meiliIndex": false };
        messages
            .update_one(
                doc! { "_id": pick(i) },
                doc! { "$set": set, "$unset": { "content": "" } },
            )
            .await
            .unwrap();
    }
    assert_eq!(
        batches_sent().await,
        2,
        "the edits must land while the second batch is in flight"
    );
    knobs.set_latency(0).await;

    let status = wait_exit(&mut once, support::timing::RUN_BOUND);
    let (out, err) = output_of(once);
    assert_eq!(status.code(), Some(0), "{out}{err}");

    // No further run: this one left the index exact.
    let in_meili = env.meili_docs(Collection::Messages).await;
    for i in [10, 20, 30, 40, 50, 60, 70] {
        assert!(
            !in_meili.contains_key(&id_of(i)),
            "{} was removed or made unindexable in flight, yet is searchable",
            id_of(i)
        );
    }
    for i in [280, 290, 300] {
        assert_eq!(
            in_meili[&id_of(i)]["text"],
            json!(format!("EDITED {i}")),
            "{}",
            id_of(i)
        );
    }
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    // The run saw it happen (it did not merely get lucky with timing).
    assert!(
        err.contains("documents changed while their batch was in flight"),
        "{err}"
    );
    env.cleanup().await;
}
