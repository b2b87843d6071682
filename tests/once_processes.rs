//! Three `meili-reconciler once` processes started together on the same data
//! (a rolling deploy): one indexes, the other two wait and exit 0 when it
//! completes, and the data ends fully reconciled — also when all three are
//! given the same `lease.owner` (one `.env` shared by every replica).

use crate::support;

use mongodb::bson::{doc, Document};
use support::cli::{output_of, wait_exit, Target};
use support::seeder::{seed, SeedSpec};

#[tokio::test(flavor = "multi_thread")]
async fn three_once_processes_one_indexes_two_wait_all_exit_zero() {
    three_once_processes(
        "once_three",
        ["once-a", "once-b", "once-c"],
        "done by once-",
    )
    .await;
}

/// A replica that found the lease running under its own id would take it for
/// a claim of its own whose answer was lost and adopt it: each process's id
/// gets its own suffix, so the label's twins wait like any other follower.
#[tokio::test(flavor = "multi_thread")]
async fn three_once_processes_given_one_owner_label_still_run_once() {
    three_once_processes("once_twins", ["twin", "twin", "twin"], "done by twin:").await;
}

/// Starts three `once` with these `lease.owner` labels together; asserts
/// that one ran, two report `waited_for` (the owner named in their summary)
/// and everything is indexed and flagged exactly once.
async fn three_once_processes(name: &str, labels: [&str; 3], waited_for: &str) {
    let target = Target::new(name);
    let db = target.db().await;
    let report = seed(
        &db,
        &SeedSpec {
            messages: 1000,
            conversations: 100,
            ..SeedSpec::default()
        },
    )
    .await
    .unwrap();

    let wait = format!("{}s", support::timing::RUN_BOUND.as_secs());
    let mut children: Vec<_> = labels
        .iter()
        .map(|owner| target.spawn(owner, &["once", "--wait-timeout", &wait]))
        .collect();
    let mut outputs = Vec::new();
    for child in children.iter_mut() {
        let status = wait_exit(child, support::timing::RUN_BOUND);
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
        .filter(|(out, _)| out.contains(waited_for))
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
