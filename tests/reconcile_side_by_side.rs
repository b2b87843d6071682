//! Both collections are reconciled side by side (docs/design.md §4.2): the
//! conversations are sent while the messages are still being indexed, not
//! after them.

mod support;

use meili_reconciler::reconcile::SyncOptions;
use support::chat_data::{seed, server_now, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_sent_while_messages_are_still_indexing() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let env = Env::on_standin(&standin, "side_by_side").await;
    seed(&env, 600, 60).await;
    // Twelve message batches, two in flight, each document costing 3 ms:
    // the messages take seconds; the conversations' one batch does not.
    knobs.set_per_document_cost(3_000).await;
    let opts = SyncOptions {
        batch_docs: 50,
        in_flight: 2,
        ..env.opts.clone()
    };
    env.run_with(&opts).await.expect("reconcile");
    knobs.set_per_document_cost(0).await;

    let posts: Vec<String> = knobs
        .requests()
        .await
        .iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/documents"))
        })
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();
    let first_convos = posts
        .iter()
        .position(|p| p.contains("convos"))
        .expect("conversations were sent");
    let last_messages = posts
        .iter()
        .rposition(|p| p.contains("messages"))
        .expect("messages were sent");
    assert!(
        first_convos < last_messages,
        "conversations waited for every message batch: {posts:?}"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
