//! The lease in follow mode (docs/design.md §5.12): an owner that follows
//! change streams after its reconciliation keeps the lease (`status` reads
//! `completed` with `following: true`), which LibreChat's waiters read as
//! done; a replica that needs the lease (`once`, `reindex`) asks for a
//! handover and gets it, and no other replica steals it meanwhile.

use crate::support;

use std::future::Future;
use std::time::{Duration, Instant};

use meili_reconciler::lease::{
    run_single_flight, Guard, JobEnd, LeaseError, LeaseOptions, LeasedJob, Outcome,
};
use meili_reconciler::progress::Progress;
use mongodb::bson::{doc, Document};
use mongodb::Database;
use serde_json::json;
use support::lease_harness::*;
use support::librechat_double::{Ended, LibreChatReplica};
use tokio_util::sync::CancellationToken;

/// An owner that reconciles (instantly), then follows: saves a token every
/// 50 ms and hands the lease over when asked.
async fn follow_owner(
    db: Database,
    opts: LeaseOptions,
    shutdown: CancellationToken,
) -> Result<Outcome, LeaseError> {
    let mut job = Follows(move |guard: Guard, _progress: Progress| async move {
        let lease = guard
            .lease()
            .expect("an owner's guard has its lease")
            .clone();
        lease
            .hold_after_completion(&guard, Some(&json!({ "reconciled": true })))
            .await?;
        let mut n = 0_i64;
        loop {
            tokio::select! {
                _ = guard.cancelled() => guard.check()?,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            if let Some(to) = lease.handover_requested_by().await? {
                return Ok(JobEnd::HandOver { to });
            }
            n += 1;
            lease
                .write_job_fields(&guard, doc! {}, |now| {
                    doc! { "$set": { "followToken": { "_data": n }, "followTokenSavedAt": now } }
                })
                .await?;
        }
    });
    run_single_flight(&db, &opts, &mut job, Progress::new(), shutdown).await
}

/// A job that keeps the lease after its work and may end in a handover (a
/// closure only ever completes).
struct Follows<F>(F);

impl<F, Fut> LeasedJob for Follows<F>
where
    F: FnMut(Guard, Progress) -> Fut + Send,
    Fut: Future<Output = anyhow::Result<JobEnd<serde_json::Value>>> + Send,
{
    type Output = serde_json::Value;
    type Error = anyhow::Error;

    fn run(
        &mut self,
        guard: Guard,
        progress: Progress,
    ) -> impl Future<Output = Fut::Output> + Send {
        (self.0)(guard, progress)
    }
}

fn follow_options(job: &str, owner: &str) -> LeaseOptions {
    let mut opts = fast_options(job, owner);
    // A follower replica wants the lease itself: completions never satisfy it.
    opts.own_run_only = true;
    opts.librechat_clock_skew = Duration::from_millis(500);
    opts
}

async fn wait_for_following(
    db: &Database,
    opts: &LeaseOptions,
) -> meili_reconciler::lease::store::JobRecord {
    let started = Instant::now();
    loop {
        if let Some(record) = read_job(db, opts).await {
            if record.following {
                return record;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the owner starts following"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_following_owner_keeps_the_lease_and_reads_as_done() {
    let db = database("follow_keep").await;
    let opts = follow_options("follow-keep", "follower-a");
    let shutdown = CancellationToken::new();
    let owner = tokio::spawn(follow_owner(
        same_database(&db).await,
        opts.clone(),
        shutdown.clone(),
    ));
    let record = wait_for_following(&db, &opts).await;
    assert_eq!(
        record.status,
        meili_reconciler::lease::store::JobStatus::Completed
    );
    assert_eq!(record.epoch, Some(1));

    // Renewals keep it well past the ttl, and the token is saved under the fence.
    tokio::time::sleep(opts.ttl + support::timing::headroom()).await;
    let record = read_job(&db, &opts).await.unwrap();
    assert!(
        record.following && record.epoch == Some(1),
        "still following under epoch 1"
    );
    assert!(
        record.document.get_document("followToken").is_ok(),
        "the job's own field is written under the fence"
    );

    // Another follower replica waits (it does not take a following lease)...
    let mut other = follow_options("follow-keep", "follower-b");
    other.wait_timeout = Some(Duration::from_millis(800));
    let waited = run_single_flight(
        &same_database(&db).await,
        &other,
        &mut |_g: Guard, _p: Progress| async { Ok::<_, anyhow::Error>(json!({})) },
        Progress::new(),
        CancellationToken::new(),
    )
    .await;
    assert!(
        matches!(waited, Err(LeaseError::WaitTimedOut { .. })),
        "{waited:?}"
    );

    // ...a `once` that does not need the lease is done by the recorded run...
    let mut once = fast_options("follow-keep", "once-1");
    once.wait_timeout = Some(Duration::from_secs(5));
    let done: Result<Outcome, LeaseError> = run_single_flight(
        &same_database(&db).await,
        &once,
        &mut |_g: Guard, _p: Progress| async { panic!("must not run") },
        Progress::new(),
        CancellationToken::new(),
    )
    .await;
    assert!(
        matches!(done, Ok(Outcome::CompletedByOther { age: Some(_), .. })),
        "{done:?}"
    );

    // ...and LibreChat's waiters read the following lease as done.
    let jobs = same_database(&db)
        .await
        .collection::<Document>(&opts.collection);
    let lc = LibreChatReplica::new(jobs, &opts.job, 0);
    match lc
        .run(|| async { panic!("LibreChat must not run") })
        .await
        .unwrap()
    {
        Ended::Done(state) => assert_eq!(state.get_bool("following"), Ok(true)),
        other => panic!("LibreChat should be done, got {other:?}"),
    }

    shutdown.cancel();
    let stopped = owner.await.unwrap();
    assert!(
        matches!(stopped, Err(LeaseError::ShutDown { released: true })),
        "{stopped:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_needs_the_lease_gets_it_handed_over_and_nobody_steals_it() {
    let db = database("follow_handover").await;
    let opts = follow_options("follow-handover", "follower-a");
    let owner = tokio::spawn(follow_owner(
        same_database(&db).await,
        opts.clone(),
        CancellationToken::new(),
    ));
    wait_for_following(&db, &opts).await;

    // A second follower replica polls for the lease the whole time.
    let stop_b = CancellationToken::new();
    let b = tokio::spawn(follow_owner(
        same_database(&db).await,
        follow_options("follow-handover", "follower-b"),
        stop_b.clone(),
    ));

    // A forced `once` needs the lease: it asks, gets it, runs.
    let mut once = fast_options("follow-handover", "once-1");
    once.force = true;
    once.request_handover = true;
    once.wait_timeout = Some(Duration::from_secs(10));
    let asked = Instant::now();
    let ran = run_single_flight(
        &same_database(&db).await,
        &once,
        &mut |_g: Guard, _p: Progress| async { Ok::<_, anyhow::Error>(json!({ "by": "once-1" })) },
        Progress::new(),
        CancellationToken::new(),
    )
    .await;
    match ran {
        Ok(Outcome::Ran { epoch, .. }) => assert_eq!(epoch, 2, "claimed right after follower-a"),
        other => panic!("the once should run: {other:?}"),
    }
    // follower-a renews every renew_every until it hands over: a lease
    // taken by expiry could not be claimed before a ttl has passed.
    assert!(
        asked.elapsed() < once.ttl - once.renew_every,
        "handed over within a few polls, not by expiry: {:?}",
        asked.elapsed()
    );
    let handed = owner.await.unwrap();
    assert!(
        matches!(&handed, Ok(Outcome::HandedOver { to }) if to == "once-1"),
        "{handed:?}"
    );

    // Then a follower replica takes the lease back and follows again.
    let record = wait_for_following(&db, &opts).await;
    assert_eq!(record.owner.as_deref(), Some("follower-b"));
    assert_eq!(
        record.epoch,
        Some(3),
        "follower-b claimed only after once-1's run"
    );
    stop_b.cancel();
    let stopped = b.await.unwrap();
    assert!(
        matches!(stopped, Err(LeaseError::ShutDown { released: true })),
        "{stopped:?}"
    );
}
