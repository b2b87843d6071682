//! Idempotence: a second run right after a complete one changes nothing and
//! says so; and a run counts each collection once.

use crate::support;

use meili_reconciler::lease::Guard;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::reconcile;
use support::chat_data::{indexed, message, seed, Env};
use support::faults::{monitored_client, Sent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_changes_nothing() {
    let env = Env::new("idem").await;
    let now = seed(&env, 3_000, 300).await;
    let first = env.run().await.expect("first run");
    assert!(!first.nothing_to_do);
    assert!(indexed(&first) > 0);
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
    assert_eq!(indexed(&second), 0);
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

/// The count aggregations among `sent`, per collection: the aggregations
/// that `$group` (what `mongo::counts` runs, reading every searchable
/// document) — not the driver's `count_documents` of the excluded documents
/// pending cleanup (`$match` then `$group` over the exclusion path's
/// documents only, which LibreChat's partial indexes serve).
fn count_aggregations(sent: &[Sent]) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Collection::ALL
        .iter()
        .map(|c| (c.name().to_string(), 0))
        .collect();
    let reads_every_searchable_document = |sent: &&Sent| {
        let first_match = sent
            .command
            .get_array("pipeline")
            .ok()
            .and_then(|p| p.first())
            .and_then(|stage| stage.as_document()?.get_document("$match").ok());
        // The searchable filter asks for a user; the cleanup's does not.
        first_match.is_some_and(|m| m.contains_key("user"))
    };
    for sent in sent
        .iter()
        .filter(|s| s.name == "aggregate")
        .filter(reads_every_searchable_document)
    {
        let on = sent.collection().unwrap_or_default();
        match counts.iter_mut().find(|(name, _)| name == on) {
            Some((_, n)) => *n += 1,
            None => panic!("an aggregation on {on}: {:?}", sent.command),
        }
    }
    counts
}

/// The plan's counts decide the drift check and the threshold when no
/// settings task ran since: a run does not count a collection twice (the
/// count aggregation reads every document of it). Both with nothing to do
/// and with a backlog to index, and the backlog still ends indexed exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_counts_each_collection_once() {
    let env = Env::new("count-once").await;
    let now = seed(&env, 3_000, 300).await;
    env.run().await.expect("first run");
    let (client, log) = monitored_client("count-once", true, None).await;
    let db = client.database(env.db.name());
    let (guard, progress) = (Guard::unfenced(), Progress::new());
    let run = || reconcile(&db, &env.meili, &env.opts, &guard, &progress);

    let idle = run().await.expect("run with nothing to do");
    assert!(idle.nothing_to_do, "{idle}");
    let once_each = vec![
        ("messages".to_string(), 1),
        ("conversations".to_string(), 1),
    ];
    assert_eq!(count_aggregations(&log.all()), once_each);

    // A backlog above the threshold (1,000): new messages, never indexed
    // (none of them flagged: a flag without its document in Meilisearch is
    // drift, which is repaired and then counted again).
    let backlog = (3_000..5_000).map(|i| {
        let mut d = message(i, now);
        d.insert("_meiliIndex", false);
        d
    });
    env.insert(Collection::Messages, backlog.collect()).await;
    let before = log.all().len();
    let busy = run().await.expect("run with a backlog");
    assert!(indexed(&busy) >= 1_000, "{busy}");
    assert_eq!(count_aggregations(&log.all()[before..]), once_each);
    env.assert_in_step(now, &[]).await;
    env.cleanup().await;
}
