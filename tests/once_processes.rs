//! Three `meili-reconciler once` processes started together on the same data
//! (a rolling deploy): one indexes, the other two wait and exit 0 when it
//! completes, and the data ends fully reconciled.

mod support;

use std::time::Duration;

use mongodb::bson::{doc, Document};
use support::cli::{output_of, wait_exit, Target};
use support::seeder::{seed, SeedSpec};

#[tokio::test(flavor = "multi_thread")]
async fn three_once_processes_one_indexes_two_wait_all_exit_zero() {
    let target = Target::new("once_three");
    let db = target.db().await;
    let report = seed(
        &db,
        &SeedSpec {
            messages: 3000,
            conversations: 300,
            ..SeedSpec::default()
        },
    )
    .await
    .unwrap();

    let mut children: Vec<_> = ["once-a", "once-b", "once-c"]
        .iter()
        .map(|owner| target.spawn(owner, &["once", "--wait-timeout", "2m"]))
        .collect();
    let mut outputs = Vec::new();
    for child in children.iter_mut() {
        let status = wait_exit(child, Duration::from_secs(180));
        assert_eq!(status.code(), Some(0), "every `once` exits 0");
    }
    for child in children {
        outputs.push(output_of(child));
    }
    let ran: Vec<&(String, String)> = outputs
        .iter()
        .filter(|(out, _)| out.contains("docs/s"))
        .collect();
    let waited = outputs
        .iter()
        .filter(|(out, _)| out.contains("done by once-"))
        .count();
    assert_eq!(
        ran.len(),
        1,
        "exactly one process ran the reconciliation: {outputs:#?}"
    );
    assert_eq!(waited, 2, "two processes waited for it: {outputs:#?}");

    let lease = target.lease().await.unwrap();
    assert_eq!(lease.get_str("status").unwrap(), "completed");
    assert_eq!(lease.get_i64("epoch").unwrap(), 1, "one claim, one epoch");

    // Final state: exactly the indexable documents are in Meilisearch and flagged.
    for (collection, index, counts) in [
        ("messages", "messages", &report.messages),
        ("conversations", "convos", &report.conversations),
    ] {
        assert_eq!(
            target.meili_count(index).await,
            counts.indexable as u64,
            "{index}"
        );
        let flagged = db
            .collection::<Document>(collection)
            .count_documents(doc! { "_meiliIndex": true })
            .await
            .unwrap();
        assert_eq!(flagged, counts.indexable as u64, "{collection} flags");
    }
    target.cleanup().await;
}
