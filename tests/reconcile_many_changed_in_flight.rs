//! When more documents change while in flight than a pass keeps `_id`s of
//! (`sync::max_changed_ids`: five batches' worth), the next pass reads the
//! unindexed documents of the collection again instead: memory stays bounded
//! by the settings, and the run still ends with every latest version indexed.

use crate::support;

use std::time::Duration;

use mongodb::bson::{doc, Document};
use support::chat_data::{seed, server_now, Env};
use support::cli::{eventually, output_of, wait_exit, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mass_edit_during_the_run_is_found_by_reading_the_collection_again() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    // Batches of 10, 8 in flight: up to 80 documents sent and not yet
    // acknowledged, more than the 50 `_id`s a pass keeps.
    let target = Target::new("many_changed")
        .with_meili(&standin.host, &standin.key)
        .set("RECONCILER__SYNC__BATCH_DOCS", "10")
        .set("RECONCILER__SYNC__IN_FLIGHT", "8");
    let env = Env::for_target(&target).await;
    seed(&env, 600, 20).await;
    knobs.set_latency(300).await;
    let mut once = target.spawn("once", &["once"]);
    let path = format!("/indexes/{}messages/documents", target.prefix);
    eventually(
        Duration::from_secs(60),
        "8 message batches sent",
        || async {
            let posts = knobs
                .requests()
                .await
                .iter()
                .filter(|r| r["method"] == "POST" && r["path"] == path.as_str())
                .count();
            (posts >= 8).then_some(())
        },
    )
    .await;
    // The application edits every message (a migration, say) while those
    // batches wait in Meilisearch.
    env.db
        .collection::<Document>("messages")
        .update_many(doc! {}, doc! { "$currentDate": { "updatedAt": true } })
        .await
        .unwrap();
    knobs.set_latency(0).await;
    let status = wait_exit(&mut once, support::timing::RUN_BOUND);
    let (_, log) = output_of(once);
    assert!(status.success(), "{status}: {log}");
    assert!(
        log.contains("many documents changed while in flight"),
        "more changed than a pass keeps: {log}"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
