//! Idempotence: a second run right after a complete one changes nothing and
//! says so.

mod support;

use meili_reconciler::mongo::Collection;
use support::chat_data::{seed, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_changes_nothing() {
    let env = Env::new("idem").await;
    let now = seed(&env, 3_000, 300).await;
    let first = env.run().await.expect("first run");
    assert!(!first.nothing_to_do);
    assert!(first.indexed() > 0);
    let our_tasks = format!(
        "indexUids={},{}&limit=1",
        env.uid(Collection::Messages),
        env.uid(Collection::Conversations)
    );
    let tasks_before = env.meili.tasks(&our_tasks).await.unwrap()["total"].as_u64();
    let before_docs = (
        env.meili_docs(Collection::Messages).await,
        env.mongo_docs(Collection::Messages).await,
    );

    let second = env.run().await.expect("second run");
    println!("{second}");
    assert!(second.nothing_to_do, "{second}");
    assert_eq!(second.indexed(), 0);
    assert!(second.to_string().contains("nothing to do"));
    for c in &second.collections {
        assert!(c.settings_changed.is_empty() && c.rebuilt.is_none());
        assert_eq!((c.deleted, c.flags_cleared), (0, 0));
        assert!(!c.compared_ids, "counts agree: no id comparison");
    }
    // Not a single Meilisearch task was enqueued by the second run.
    let tasks_after = env.meili.tasks(&our_tasks).await.unwrap()["total"].as_u64();
    assert!(tasks_before.is_some_and(|n| n > 0));
    assert_eq!(tasks_before, tasks_after);
    let after_docs = (
        env.meili_docs(Collection::Messages).await,
        env.mongo_docs(Collection::Messages).await,
    );
    assert_eq!(before_docs, after_docs);
    env.assert_in_step(now, &[]).await;
    env.cleanup().await;
}
