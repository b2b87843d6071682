//! A slow acknowledgement never stops the sender from enqueueing while the
//! in-flight budget has room (docs/design.md §4.6, Sender): settled batches
//! wait in the sender, still counted against the budget, instead of the
//! sender waiting for room in the acknowledger's short queue. Otherwise,
//! when Meilisearch ends a merged indexing batch (all its tasks at once),
//! Meilisearch would be left with nothing enqueued until most of them were
//! acknowledged. The slow MongoDB is the server's own `failCommand`
//! (`blockConnection` on `update`, the acknowledgement's command), scoped by
//! `appName` to the `once` under test.

use crate::support;

use std::time::Duration;

use mongodb::bson::{doc, Bson, Document};
use support::chat_data::{seed, server_now, Env};
use support::cli::{wait_exit, Target};
use support::faults::{uri_with_app, FailCommand};
use support::unique_name;

/// Documents per batch: 600 messages make about 30 message batches.
const BATCH_DOCS: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueueing_goes_on_while_acknowledgements_are_slow() {
    let app = unique_name("ack_handoff");
    let Some(faults) = FailCommand::new(&app).await else {
        return;
    };
    let target = Target::new("ack_handoff")
        .set("MONGO_URI", &uri_with_app(&app))
        .set("RECONCILER__SYNC__BATCH_DOCS", &BATCH_DOCS.to_string());
    let env = Env::for_target(&target).await;
    seed(&env, 600, 20).await;
    let messages_uid = format!("{}messages", target.prefix);
    let messages = env.db.collection::<Document>("messages");

    // Every acknowledgement command of the run waits 500 ms on the server.
    faults
        .block(&["update"], 500, Bson::String("alwaysOn".into()))
        .await;
    let mut replica = target.spawn("once-slow-ack", &["once"]);
    // Largest number of message tasks enqueued beyond the batches already
    // acknowledged, sampled until the run ends.
    let mut most_ahead = 0i64;
    while replica
        .child
        .try_wait()
        .expect("poll the process")
        .is_none()
    {
        let tasks = target
            .meili_get(&format!(
                "/tasks?indexUids={messages_uid}&types=documentAdditionOrUpdate&limit=1000"
            ))
            .await["results"]
            .as_array()
            .map_or(0, Vec::len) as i64;
        let flagged = messages
            .count_documents(doc! { "_meiliIndex": true })
            .await
            .expect("count flagged messages");
        let acknowledged_batches = flagged.div_ceil(BATCH_DOCS) as i64;
        most_ahead = most_ahead.max(tasks - acknowledged_batches);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    faults.off().await;
    let status = wait_exit(&mut replica, Duration::from_secs(5));
    assert!(status.success(), "once failed: {}", replica.stderr_so_far());

    // Waiting on the acknowledger's queue (4 batches), the sender stays
    // within 1 being acknowledged + 4 queued + 1 in hand (+ the tasks not yet
    // seen ended) of the acknowledgements: 9 and 11 in two runs of that code.
    assert!(
        most_ahead >= 15,
        "Meilisearch got at most {most_ahead} message tasks ahead of the acknowledgements"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    target.cleanup().await;
}
