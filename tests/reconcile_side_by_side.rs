//! Both collections are reconciled side by side (docs/design.md §4.2): the
//! conversations are sent while the messages are still being indexed, not
//! after them, and the messages do not wait for the conversations either.

mod support;

use meili_reconciler::mongo::Collection;
use meili_reconciler::reconcile::SyncOptions;
use support::chat_data::{seed, server_now, Env};

/// An RFC 3339 time, comparable.
fn rfc3339(at: &str) -> time::OffsetDateTime {
    time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{at}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_sent_while_messages_are_still_indexing() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let env = Env::on_standin(&standin, "side_by_side").await;
    seed(&env, 600, 200).await;
    // Twelve message batches and four of conversations, two in flight, each
    // document costing 3 ms: the messages take seconds, the conversations
    // under a second.
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
    // Nor did the messages wait for the conversations: their first batch was
    // posted before the conversations' last task had finished (one after the
    // other, the messages would be read only once that task was confirmed).
    let first_message_post = knobs
        .requests()
        .await
        .iter()
        .filter(|r| r["method"] == "POST")
        .find(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.contains("messages") && p.ends_with("/documents"))
        })
        .and_then(|r| r["startedAt"].as_str().map(str::to_string))
        .expect("messages were sent");
    let convos_tasks = env
        .meili
        .tasks(&format!(
            "indexUids={}&types=documentAdditionOrUpdate",
            env.uid(Collection::Conversations)
        ))
        .await
        .unwrap();
    let last_convos_finished = convos_tasks["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["finishedAt"].as_str())
        .map(rfc3339)
        .max()
        .expect("the conversations' tasks finished");
    println!("first message batch posted at {first_message_post}, conversations' last task finished at {last_convos_finished}");
    assert!(
        rfc3339(&first_message_post) < last_convos_finished,
        "the messages waited for the conversations: first message batch at {first_message_post}, {convos_tasks}"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
