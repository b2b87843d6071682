//! The single-flight lease (docs/design.md §5) in one process: contention between
//! 16 clients, a task longer than the ttl, a stale owner, a partition, a
//! release on shutdown, failure backoff, freshness, timeouts and `status`.
//! Each replica is a separate MongoDB client; timings are short.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meili_reconciler::flag_retry;
use meili_reconciler::lease::store::{Fence, JobStatus, JobStore, RunEnd};
use meili_reconciler::lease::{
    clock, read_status, run_single_flight, Guard, LeaseError, LeaseLost, LeaseOptions, LeaseState,
    Outcome,
};
use meili_reconciler::progress::{Progress, ProgressSnapshot};
use mongodb::bson::{doc, DateTime, Document};
use mongodb::Database;
use serde_json::json;
use support::lease_harness::*;
use support::timing::headroom;
use tokio::sync::{oneshot, Barrier};
use tokio_util::sync::CancellationToken;

/// A replica whose job records its start (local and server time) and returns
/// `{"by": owner}` after `work`.
async fn run_recording(
    db: &Database,
    opts: &LeaseOptions,
    work: Duration,
    starts: Arc<std::sync::Mutex<Vec<(String, Instant, DateTime)>>>,
) -> Result<Outcome, LeaseError> {
    let owner = opts.owner.clone();
    let clock_db = db.clone();
    let mut job = move |guard: Guard, _progress: Progress| {
        let (owner, clock_db, starts) = (owner.clone(), clock_db.clone(), starts.clone());
        async move {
            let started = Instant::now();
            let server_time = clock::server_now(&clock_db).await?;
            starts
                .lock()
                .unwrap()
                .push((owner.clone(), started, server_time));
            tokio::select! {
                _ = guard.cancelled() => {}
                _ = tokio::time::sleep(work) => {}
            }
            guard.check()?;
            Ok::<_, anyhow::Error>(json!({ "by": owner }))
        }
    };
    run_single_flight(
        db,
        opts,
        &mut job,
        Progress::new(),
        CancellationToken::new(),
    )
    .await
}

type Starts = Arc<std::sync::Mutex<Vec<(String, Instant, DateTime)>>>;

/// What a round's job document looks like before the racers start.
async fn seed_round(db: &Database, opts: &LeaseOptions, round: usize) -> i64 {
    let jobs = db.collection::<mongodb::bson::Document>(&opts.collection);
    let now = server_now(db).await;
    let hour_ago = clock::earlier(now, Duration::from_secs(3600));
    let seeded = match round % 4 {
        0 => return 0, // no document: the racers' upserts collide (E11000)
        1 => {
            doc! { "_id": &opts.job, "owner": "old", "epoch": 7_i64, "status": "completed", "completedAt": hour_ago, "claimedAt": hour_ago }
        }
        2 => {
            // Ours, its lease ended a second ago.
            let mut crashed =
                doc! { "_id": &opts.job, "owner": "crashed", "epoch": 3_i64, "status": "running" };
            crashed.extend(our_expiry(
                opts,
                clock::earlier(now, Duration::from_secs(1)),
            ));
            crashed
        }
        _ => {
            doc! { "_id": &opts.job, "owner": "stopped", "epoch": 5_i64, "status": "released", "releasedAt": now }
        }
    };
    let epoch = seeded.get_i64("epoch").unwrap();
    jobs.insert_one(seeded).await.unwrap();
    epoch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_race_and_exactly_one_runs_per_round() {
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 50;
    let db = database("lease_contend").await;
    let mut replicas = Vec::new();
    for _ in 0..CLIENTS {
        replicas.push(same_database(&db).await);
    }
    for round in 0..ROUNDS {
        let job = format!("contend-{round}");
        let seed_opts = fast_options(&job, "seeder");
        let seeded_epoch = seed_round(&db, &seed_opts, round).await;
        let barrier = Arc::new(Barrier::new(CLIENTS));
        let runs = Arc::new(AtomicUsize::new(0));
        let active = Arc::new(AtomicUsize::new(0));
        let mut racers = tokio::task::JoinSet::new();
        for (i, replica) in replicas.iter().enumerate() {
            let mut opts = fast_options(&job, &format!("client-{i}"));
            opts.poll_every = Duration::from_millis(30);
            let (replica, barrier, runs, active) = (
                replica.clone(),
                barrier.clone(),
                runs.clone(),
                active.clone(),
            );
            racers.spawn(async move {
                let mut job = move |guard: Guard, _progress: Progress| {
                    let (runs, active) = (runs.clone(), active.clone());
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let concurrent = active.fetch_add(1, Ordering::SeqCst) + 1;
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        active.fetch_sub(1, Ordering::SeqCst);
                        guard.check()?;
                        Ok::<_, anyhow::Error>(json!({ "concurrent": concurrent }))
                    }
                };
                barrier.wait().await;
                run_single_flight(
                    &replica,
                    &opts,
                    &mut job,
                    Progress::new(),
                    CancellationToken::new(),
                )
                .await
            });
        }
        let mut ran = 0;
        while let Some(result) = racers.join_next().await {
            match result.unwrap() {
                Ok(Outcome::Ran { summary, .. }) => {
                    ran += 1;
                    assert_eq!(
                        summary["concurrent"], 1,
                        "round {round}: two jobs overlapped"
                    );
                }
                Ok(Outcome::CompletedByOther { .. }) => {}
                Ok(Outcome::HandedOver { to }) => panic!("round {round}: handed over to {to}"),
                Err(error) => panic!("round {round}: a racer failed: {error}"),
            }
        }
        assert_eq!(
            ran, 1,
            "round {round}: exactly one racer reports running the job"
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "round {round}: exactly one job ran"
        );
        let record = read_job(&db, &seed_opts).await.unwrap();
        assert_eq!(record.status, JobStatus::Completed);
        assert_eq!(
            record.epoch,
            Some(seeded_epoch + 1),
            "round {round}: exactly one claim happened"
        );
    }
}

#[tokio::test]
async fn a_job_longer_than_the_ttl_keeps_the_lease() {
    let db = database("lease_long").await;
    let opts = fast_options("long", "owner"); // renew every 250 ms
    let long = opts.ttl * 2;
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let owner_db = same_database(&db).await;
    let owner_opts = opts.clone();
    let owner = tokio::spawn(async move {
        let mut started = Some(started_tx);
        let mut job = move |guard: Guard, progress: Progress| {
            let started = started.take();
            async move {
                progress.phase("long", 100);
                if let Some(started) = started {
                    let _ = started.send(());
                }
                let until = Instant::now() + long;
                while Instant::now() < until {
                    guard.check()?;
                    progress.advance(1);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok::<_, anyhow::Error>(json!({ "long": true }))
            }
        };
        run_single_flight(
            &owner_db,
            &owner_opts,
            &mut job,
            Progress::new(),
            CancellationToken::new(),
        )
        .await
    });
    started_rx.await.unwrap();

    let starts: Starts = Default::default();
    let mut followers = Vec::new();
    for name in ["follower-a", "follower-b"] {
        let (db, opts, starts) = (
            same_database(&db).await,
            fast_options("long", name),
            starts.clone(),
        );
        followers.push(tokio::spawn(async move {
            run_recording(&db, &opts, Duration::ZERO, starts).await
        }));
    }

    // While it runs, renewals keep moving expiresAt and carry the progress.
    let mut expiries = Vec::new();
    let mut saw_progress = false;
    while !owner.is_finished() {
        if let Some(record) = read_job(&db, &opts).await {
            if record.status == JobStatus::Running {
                assert_eq!(record.epoch, Some(1), "nobody else claimed");
                expiries.push(record.lease_expires_at.unwrap());
                saw_progress |= record
                    .progress
                    .as_ref()
                    .is_some_and(|p| p.phase == "long" && p.done > 0);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let outcome = owner.await.unwrap().expect("the owner completes");
    assert!(
        matches!(outcome, Outcome::Ran { epoch: 1, .. }),
        "{outcome:?}"
    );
    for follower in followers {
        let outcome = follower.await.unwrap().unwrap();
        assert!(
            matches!(
                outcome,
                Outcome::CompletedByOther {
                    epoch: Some(1),
                    age: None,
                    ..
                }
            ),
            "{outcome:?}"
        );
    }
    assert!(starts.lock().unwrap().is_empty(), "no follower ran the job");
    expiries.dedup();
    assert!(
        expiries.len() >= 5,
        "the lease was renewed throughout: {expiries:?}"
    );
    assert!(
        saw_progress,
        "renewals wrote the job's progress into the lease"
    );
}

#[tokio::test]
async fn a_stale_owner_cannot_renew_complete_fail_or_release() {
    let db = database("lease_stale").await;
    let opts = fast_options("stale", "a");
    let a = JobStore::new(
        &same_database(&db).await,
        // Live while b tries twice (a few round trips, each up to a
        // headroom late on a loaded machine), then soon expired.
        &LeaseOptions {
            ttl: headroom() * 2,
            ..opts.clone()
        },
    );
    let b = JobStore::new(
        &same_database(&db).await,
        &LeaseOptions {
            ttl: Duration::from_secs(60),
            ..opts.clone()
        },
    );

    let now = a.server_now().await.unwrap();
    let Some(claimed) = a.claim("a", now, None).await.unwrap() else {
        panic!("a claims a fresh lease")
    };
    assert_eq!(claimed.epoch, Some(1));
    let stale = Fence {
        owner: "a".into(),
        epoch: 1,
    };

    // b cannot claim the live lease, neither as it is nor as absent.
    let now = b.server_now().await.unwrap();
    let live = b.read().await.unwrap().unwrap();
    assert_eq!(b.claim("b", now, Some(&live)).await.unwrap(), None);
    assert_eq!(b.claim("b", now, None).await.unwrap(), None);

    // Once it expired (by the server's clock), b takes over.
    let now = loop {
        let now = b.server_now().await.unwrap();
        if now >= claimed.lease_expires_at.unwrap() {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let expired = b.read().await.unwrap().unwrap();
    let Some(taken) = b.claim("b", now, Some(&expired)).await.unwrap() else {
        panic!("b takes over the expired lease")
    };
    assert_eq!(taken.epoch, Some(2));
    let before = read_job(&db, &opts).await.unwrap();

    let now = a.server_now().await.unwrap();
    let progress = ProgressSnapshot::default();
    assert!(
        !a.renew(&stale, now, &progress).await.unwrap(),
        "renew must match nothing"
    );
    assert!(
        !a.end(&stale, now, RunEnd::Completed(&json!({}), &progress))
            .await
            .unwrap(),
        "complete must match nothing"
    );
    assert!(
        !a.end(&stale, now, RunEnd::Failed("boom", 1, now))
            .await
            .unwrap(),
        "fail must match nothing"
    );
    assert!(
        !a.end(&stale, now, RunEnd::Released(&progress, None))
            .await
            .unwrap(),
        "release must match nothing"
    );
    // Even with b's epoch, a is not the owner.
    let wrong_owner = Fence {
        owner: "a".into(),
        epoch: 2,
    };
    assert!(!a
        .end(&wrong_owner, now, RunEnd::Released(&progress, None))
        .await
        .unwrap());
    assert_eq!(
        read_job(&db, &opts).await.unwrap(),
        before,
        "b's lease is untouched"
    );

    // b, the owner, can.
    let fence = Fence {
        owner: "b".into(),
        epoch: 2,
    };
    assert!(b
        .end(
            &fence,
            now,
            RunEnd::Completed(&json!({ "ok": 1 }), &progress)
        )
        .await
        .unwrap());
}

#[tokio::test]
async fn an_owner_whose_lease_was_taken_over_stops_and_reports_it() {
    let db = database("lease_taken").await;
    let opts = fast_options("taken", "a");
    let effects = Effects::default();
    let (owner, guard, _shutdown) = start_endless_owner(&db, opts.clone(), effects.clone()).await;

    // Another replica's claim, as it would land after an expiry.
    let now = server_now(&db).await;
    let jobs = db.collection::<mongodb::bson::Document>(&opts.collection);
    jobs.update_one(
        doc! { "_id": &opts.job },
        doc! { "$set": { "owner": "b", "epoch": 2_i64, "claimedAt": now, "expiresAt": clock::later(now, Duration::from_secs(60)) } },
    )
    .await
    .unwrap();
    let taken = read_job(&db, &opts).await.unwrap();

    tokio::time::timeout(opts.ttl, guard.cancelled())
        .await
        .expect("the next renewal notices the takeover and cancels the job");
    let cancelled_at = Instant::now();
    let result = owner.await.unwrap();
    assert!(
        matches!(
            result,
            Err(LeaseError::LeaseLost {
                epoch: 1,
                reason: LeaseLost::TakenOver
            })
        ),
        "{result:?}"
    );
    assert!(
        effects.all().iter().all(|at| *at < cancelled_at),
        "no side effect after the loss"
    );
    assert_eq!(
        read_job(&db, &opts).await.unwrap(),
        taken,
        "the stale owner wrote nothing"
    );
}

#[tokio::test]
async fn a_partitioned_owner_stops_before_its_lease_expires() {
    let db = database("lease_partition").await;
    let proxy = MongoProxy::start_opaque(primary_address(&db).await).await;
    let owner_db = client_via(&proxy).await.database(db.name());
    // The safety margin (a headroom) leaves room to read the lease over the
    // healthy connection after the owner stopped, before it expires.
    let opts = fast_options("partition", "cut-off");

    let effects = Effects::default();
    let shutdown = CancellationToken::new();
    let (started_tx, started_rx) = oneshot::channel();
    let owner_opts = opts.clone();
    let owner_effects = effects.clone();
    let owner = tokio::spawn(async move {
        let mut started = Some(started_tx);
        let mut job = move |guard: Guard, progress: Progress| {
            run_until_stopped(guard, progress, started.take(), owner_effects.clone())
        };
        run_single_flight(&owner_db, &owner_opts, &mut job, Progress::new(), shutdown).await
    });
    let Ok(guard) = started_rx.await else {
        panic!("the owner's job did not start: {:?}", owner.await);
    };
    // Once a renewal has gone through the proxy, cut the network.
    tokio::time::timeout(opts.ttl, async {
        loop {
            let record = read_job(&db, &opts).await.unwrap();
            if record.renewed_at > record.claimed_at {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a renewal lands");
    proxy.cut();
    let cut_at = Instant::now();

    tokio::time::timeout(opts.ttl, guard.cancelled())
        .await
        .expect("the owner self-fences");
    let cancelled_at = Instant::now();
    // Read over the healthy connection, after the cancellation: the lease
    // must still be unexpired by the server's clock.
    let record = read_job(&db, &opts).await.unwrap();
    let now = server_now(&db).await;
    assert_eq!(record.owner.as_deref(), Some("cut-off"));
    let expires_at = record.lease_expires_at.unwrap();
    assert!(
        now < expires_at,
        "cancelled at server time {now}, after expiresAt {expires_at}"
    );

    let result = tokio::time::timeout(opts.ttl, owner)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            result,
            Err(LeaseError::LeaseLost {
                epoch: 1,
                reason: LeaseLost::SelfFenced
            })
        ),
        "{result:?}"
    );
    let count = effects.len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(effects.len(), count, "the job stopped");
    let all = effects.all();
    assert!(
        all.iter().any(|at| *at > cut_at),
        "the job kept working during the grace period"
    );
    assert!(
        all.iter().all(|at| *at < cancelled_at),
        "no side effect after the cancellation"
    );
}

#[tokio::test]
async fn a_released_lease_is_claimed_within_one_poll() {
    let db = database("lease_release").await;
    let mut opts = fast_options("release", "leaving");
    // A ttl far longer than the test: only the release can explain a takeover.
    opts.ttl = Duration::from_secs(60);
    opts.safety_margin = Duration::from_secs(10);
    opts.renew_every = Duration::from_secs(5);
    let effects = Effects::default();
    let (owner, _guard, shutdown) = start_endless_owner(&db, opts.clone(), effects.clone()).await;

    let mut follower_opts = opts.clone();
    follower_opts.owner = "next".into();
    follower_opts.poll_every = Duration::from_millis(300);
    let starts: Starts = Default::default();
    let follower = {
        let (db, opts, starts) = (
            same_database(&db).await,
            follower_opts.clone(),
            starts.clone(),
        );
        tokio::spawn(async move { run_recording(&db, &opts, Duration::ZERO, starts).await })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        starts.lock().unwrap().is_empty(),
        "the follower waits while the owner runs"
    );

    shutdown.cancel();
    let result = owner.await.unwrap();
    let released_at = Instant::now();
    assert!(
        matches!(result, Err(LeaseError::ShutDown { released: true })),
        "{result:?}"
    );
    assert!(effects.all().iter().all(|at| *at < released_at));

    let outcome = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(outcome, Outcome::Ran { epoch: 2, .. }),
        "{outcome:?}"
    );
    let (_, started, _) = starts.lock().unwrap()[0].clone();
    // The claim and the job's start themselves, on a loaded machine.
    let slack = headroom();
    assert!(
        started.duration_since(released_at) <= follower_opts.poll_every + slack,
        "claimed {:?} after the release",
        started.duration_since(released_at)
    );
}

#[tokio::test]
async fn a_failed_job_is_retried_only_after_retry_at() {
    let db = database("lease_fail").await;
    let mut opts = fast_options("failing", "first");
    opts.failure_backoff = Duration::from_secs(1);
    opts.failure_backoff_max = Duration::from_millis(1500);
    opts.poll_every = Duration::from_millis(50);
    let starts: Starts = Default::default();

    let failing = |opts: LeaseOptions, starts: Starts| {
        let db = db.clone();
        async move {
            let clock_db = db.clone();
            let me = opts.owner.clone();
            let mut job = move |_guard: Guard, _progress: Progress| {
                let (clock_db, starts, owner) = (clock_db.clone(), starts.clone(), me.clone());
                async move {
                    let server_time = clock::server_now(&clock_db).await?;
                    starts
                        .lock()
                        .unwrap()
                        .push((owner, Instant::now(), server_time));
                    Err::<serde_json::Value, _>(anyhow::anyhow!("meilisearch said no"))
                }
            };
            run_single_flight(
                &db,
                &opts,
                &mut job,
                Progress::new(),
                CancellationToken::new(),
            )
            .await
        }
    };

    // 1. The first failure records the error and a 1 s backoff.
    let first = failing(opts.clone(), starts.clone()).await.unwrap_err();
    let LeaseError::JobFailed {
        attempt: 1,
        retry_at,
        ref error,
        ..
    } = first
    else {
        panic!("{first:?}")
    };
    assert!(error.to_string().contains("meilisearch said no"));
    assert!(first.to_string().contains("meilisearch said no"));
    let record = read_job(&db, &opts).await.unwrap();
    assert_eq!(record.status, JobStatus::Failed);
    assert_eq!(record.attempt, 1);
    assert_eq!(record.retry_at, Some(retry_at));
    assert_eq!(
        clock::millis_between(record.failed_at.unwrap(), retry_at),
        1000
    );

    // 2. A replica started at once waits for retryAt, retries, fails again:
    //    the backoff doubles, capped at 1.5 s.
    let mut second = opts.clone();
    second.owner = "second".into();
    let again = failing(second, starts.clone()).await.unwrap_err();
    let LeaseError::JobFailed {
        attempt: 2,
        retry_at: retry_at_2,
        ..
    } = again
    else {
        panic!("{again:?}")
    };
    let second_start = starts.lock().unwrap()[1].2;
    assert!(
        second_start >= retry_at,
        "retried at {second_start}, before retryAt {retry_at}"
    );
    let record = read_job(&db, &opts).await.unwrap();
    assert_eq!(
        clock::millis_between(record.failed_at.unwrap(), retry_at_2),
        1500
    );

    // 3. Three replicas: exactly one retries, after retryAt; it succeeds and
    //    the failure count resets.
    let retries: Starts = Default::default();
    let mut replicas = Vec::new();
    for name in ["r1", "r2", "r3"] {
        let mut replica_opts = opts.clone();
        replica_opts.owner = name.into();
        let (db, retries) = (same_database(&db).await, retries.clone());
        replicas.push(tokio::spawn(async move {
            run_recording(&db, &replica_opts, Duration::from_millis(50), retries).await
        }));
    }
    let mut ran = 0;
    for replica in replicas {
        if let Outcome::Ran { .. } = replica.await.unwrap().unwrap() {
            ran += 1;
        }
    }
    assert_eq!(ran, 1);
    let retries = retries.lock().unwrap().clone();
    assert_eq!(retries.len(), 1);
    assert!(retries[0].2 >= retry_at_2, "retried before retryAt");
    let record = read_job(&db, &opts).await.unwrap();
    assert_eq!(
        (record.status, record.attempt, record.error),
        (JobStatus::Completed, 0, None)
    );

    // 4. --force retries a failed job before its retryAt.
    let mut stale_ok = opts.clone();
    stale_ok.reuse_completion_for = Duration::ZERO;
    stale_ok.owner = "third".into();
    let LeaseError::JobFailed {
        retry_at: retry_at_3,
        ..
    } = failing(stale_ok, starts.clone()).await.unwrap_err()
    else {
        panic!("the job fails again")
    };
    let mut forced = opts.clone();
    forced.force = true;
    forced.owner = "forced".into();
    let forced_starts: Starts = Default::default();
    let outcome = run_recording(&db, &forced, Duration::ZERO, forced_starts.clone())
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Ran { .. }));
    assert!(
        forced_starts.lock().unwrap()[0].2 < retry_at_3,
        "--force does not wait for retryAt"
    );
}

#[tokio::test]
async fn a_fresh_completion_is_reused_unless_forced() {
    let db = database("lease_fresh").await;
    let opts = fast_options("fresh", "first"); // reuse_completion_for 60 s
    let starts: Starts = Default::default();
    let outcome = run_recording(&db, &opts, Duration::ZERO, starts.clone())
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Ran { epoch: 1, .. }));

    let mut later = opts.clone();
    later.owner = "later".into();
    let outcome = run_recording(&db, &later, Duration::ZERO, starts.clone())
        .await
        .unwrap();
    let Outcome::CompletedByOther {
        owner,
        epoch: Some(1),
        age: Some(_),
        summary,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(owner.as_deref(), Some("first"));
    assert_eq!(summary, Some(json!({ "by": "first" })));
    assert_eq!(
        starts.lock().unwrap().len(),
        1,
        "the later replica did not run"
    );

    later.force = true;
    let outcome = run_recording(&db, &later, Duration::ZERO, starts.clone())
        .await
        .unwrap();
    assert!(
        matches!(outcome, Outcome::Ran { epoch: 2, .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_bounded_wait_times_out_while_the_owner_runs() {
    let db = database("lease_wait").await;
    let opts = fast_options("wait", "owner");
    let (owner, _guard, shutdown) =
        start_endless_owner(&db, opts.clone(), Effects::default()).await;
    let mut waiting = opts.clone();
    waiting.owner = "waiter".into();
    waiting.wait_timeout = Some(Duration::from_millis(600));
    let starts: Starts = Default::default();
    let result = run_recording(&db, &waiting, Duration::ZERO, starts.clone()).await;
    let Err(LeaseError::WaitTimedOut { .. }) = result else {
        panic!("{result:?}")
    };
    assert!(starts.lock().unwrap().is_empty());
    shutdown.cancel();
    owner.await.unwrap().unwrap_err();
}

#[tokio::test]
async fn an_unreachable_mongodb_is_reported_as_such() {
    let db = mongodb::Client::with_uri_str(
        "mongodb://127.0.0.1:1/?directConnection=true&serverSelectionTimeoutMS=200",
    )
    .await
    .unwrap()
    .database("nowhere");
    let mut opts = fast_options("unreachable", "lonely");
    opts.unreachable_timeout = Duration::from_millis(500);
    let result = run_recording(&db, &opts, Duration::ZERO, Default::default()).await;
    let Err(LeaseError::MongoUnavailable(_)) = result else {
        panic!("{result:?}")
    };
}

#[tokio::test]
async fn status_shows_the_owner_expiry_progress_and_summary() {
    let db = database("lease_status").await;
    let opts = fast_options("status", "owner");
    let before = read_status(&db, &opts, |_| Default::default())
        .await
        .unwrap();
    assert_eq!(before.state, LeaseState::NeverRun);

    let (owner, _guard, shutdown) =
        start_endless_owner(&db, opts.clone(), Effects::default()).await;
    // Wait for a renewal to carry the progress.
    let status = loop {
        let status = read_status(&db, &opts, |_| Default::default())
            .await
            .unwrap();
        if status
            .progress
            .as_ref()
            .is_some_and(|p| p.phase == "endless")
        {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.state, LeaseState::Running);
    assert_eq!(status.owner.as_deref(), Some("owner"));
    assert_eq!(status.epoch, Some(1));
    let expires_in = status.expires_in_secs.unwrap();
    assert!(
        expires_in > 0.0 && expires_in <= opts.ttl.as_secs_f64(),
        "{expires_in}"
    );
    let text = status.to_string();
    assert!(
        text.contains("running") && text.contains("owner") && text.contains("progress:   endless"),
        "{text}"
    );
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["state"], "running");
    assert_eq!(json["epoch"], 1);

    shutdown.cancel();
    owner.await.unwrap().unwrap_err();
    // Released on shutdown: where it stopped, not a live progress.
    let text = read_status(&db, &opts, |_| Default::default())
        .await
        .unwrap()
        .to_string();
    assert!(
        text.contains("stopped at: endless") && !text.contains("progress:"),
        "{text}"
    );
    let mut next = opts.clone();
    next.owner = "next".into();
    run_recording(&db, &next, Duration::ZERO, Default::default())
        .await
        .unwrap();
    let status = read_status(&db, &opts, |_| Default::default())
        .await
        .unwrap();
    assert_eq!(status.state, LeaseState::Completed);
    assert_eq!(status.summary, Some(json!({ "by": "next" })));
    let text = status.to_string();
    assert!(text.contains("summary"), "{text}");
    assert!(
        !text.contains("progress:") && !text.contains("stopped at:"),
        "a completed run shows its summary, not a progress: {text}"
    );
}

/// An owner whose job sends one write to the "effects" collection, taking
/// `write_takes` to land (the server time it landed at is its `at`), and
/// waits for it; the receiver fires once it is sent.
fn owner_with_a_write_in_flight(
    db: Database,
    opts: LeaseOptions,
    write_takes: Duration,
    shutdown: CancellationToken,
) -> (
    tokio::task::JoinHandle<Result<Outcome, LeaseError>>,
    oneshot::Receiver<()>,
) {
    let (sent_tx, sent_rx) = oneshot::channel();
    let owner = tokio::spawn(async move {
        let mut sent = Some(sent_tx);
        let effects_db = db.clone();
        let mut job = move |guard: Guard, _progress: Progress| {
            let (effects_db, sent) = (effects_db.clone(), sent.take());
            async move {
                guard.check()?;
                // Sent: the server applies it whatever happens to us now.
                let write = tokio::spawn(async move {
                    tokio::time::sleep(write_takes).await;
                    let at = clock::server_now(&effects_db).await.unwrap();
                    effects_db
                        .collection::<mongodb::bson::Document>("effects")
                        .insert_one(doc! { "at": at })
                        .await
                        .unwrap();
                });
                if let Some(sent) = sent {
                    let _ = sent.send(());
                }
                write.await?;
                guard.check()?;
                Ok::<_, anyhow::Error>(json!({}))
            }
        };
        run_single_flight(&db, &opts, &mut job, Progress::new(), shutdown).await
    });
    (owner, sent_rx)
}

/// An owner (ttl 60 s) shut down once its write, taking `write_takes`, is
/// sent; `drain_patience` overrides the default. Returns its database,
/// options and result.
async fn shut_down_during_a_write(
    job: &str,
    write_takes: Duration,
    drain_patience: Option<Duration>,
) -> (Database, LeaseOptions, Result<Outcome, LeaseError>) {
    let db = database(&format!("lease_{job}")).await;
    let mut opts = fast_options(job, "draining");
    opts.ttl = Duration::from_secs(60);
    opts.safety_margin = Duration::from_secs(10);
    opts.renew_every = Duration::from_secs(5);
    if let Some(patience) = drain_patience {
        opts.drain_patience = patience;
    }
    let shutdown = CancellationToken::new();
    let (owner, sent) = owner_with_a_write_in_flight(
        same_database(&db).await,
        opts.clone(),
        write_takes,
        shutdown.clone(),
    );
    sent.await.unwrap();
    shutdown.cancel();
    let result = owner.await.unwrap();
    (db, opts, result)
}

/// The `at` of the owner's write, once it has landed.
async fn landed_write(db: &Database) -> DateTime {
    let effect = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(e) = db
                .collection::<mongodb::bson::Document>("effects")
                .find_one(doc! {})
                .await
                .unwrap()
            {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the write lands");
    *effect.get_datetime("at").unwrap()
}

/// A write the owner already sent when shutdown comes (an acknowledgement
/// `update_many` the server is still applying) lands before the release, not
/// after it, when another replica may already own the work.
#[tokio::test]
async fn shutdown_lets_a_write_already_sent_land_before_the_release() {
    let (db, opts, result) =
        shut_down_during_a_write("drain", Duration::from_millis(800), None).await;
    assert!(
        matches!(result, Err(LeaseError::ShutDown { released: true })),
        "{result:?}"
    );

    let lease = db
        .collection::<mongodb::bson::Document>(&opts.collection)
        .find_one(doc! { "_id": &opts.job })
        .await
        .unwrap()
        .unwrap();
    let released = *lease.get_datetime("releasedAt").unwrap();
    let landed = landed_write(&db).await;
    assert!(
        landed <= released,
        "the write landed at {landed} after the release at {released}"
    );
}

/// A job that does not stop within `drain_patience` of shutdown may still
/// have a write on the server: the owner does not release its lease then
/// (a follower would claim at once and work beside that write) but leaves it
/// to expire, so the write lands while the lease still keeps followers out.
#[tokio::test]
async fn shutdown_leaves_the_lease_to_expire_when_a_write_outlasts_the_drain() {
    let (db, opts, result) = shut_down_during_a_write(
        "drain_late",
        Duration::from_millis(1500),
        Some(Duration::from_millis(200)),
    )
    .await;
    assert!(
        matches!(result, Err(LeaseError::ShutDown { released: false })),
        "{result:?}"
    );

    let landed = landed_write(&db).await;
    let lease = read_job(&db, &opts).await.expect("the job document");
    assert_eq!(lease.status, JobStatus::Running, "{lease:?}");
    assert_eq!(lease.owner.as_deref(), Some("draining"), "{lease:?}");
    let expires = lease.lease_expires_at.expect("a lease end");
    assert!(
        landed < expires,
        "the write landed at {landed}, after the lease it was sent under ended at {expires}"
    );
    let mut follower = opts.clone();
    follower.owner = "follower".into();
    follower.wait_timeout = Some(Duration::from_millis(300));
    let waited = run_recording(&db, &follower, Duration::ZERO, Default::default()).await;
    assert!(
        matches!(&waited, Err(LeaseError::WaitTimedOut { owner: Some(owner), .. }) if owner == "draining"),
        "a follower waits for the unreleased lease: {waited:?}"
    );
}

/// Creates `name` with a validator no lease document passes, asked again
/// (what a lost reply may have created dropped first) when no answer came:
/// DocumentDB's gateway (0.106), which refuses validators, now and then
/// fails to send that refusal over TLS on a loaded machine (its log:
/// "Couldn't reply with error … bad write retry") and drops the connection.
async fn create_validated_collection(db: &Database, name: &str) -> mongodb::error::Result<()> {
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        let created = db
            .create_collection(name)
            .validator(doc! { "$jsonSchema": { "required": ["aFieldNoLeaseHas"] } })
            .await;
        match created {
            Err(error) if attempt < ATTEMPTS && flag_retry::is_transient(&error) => {
                eprintln!("create the validated collection, attempt {attempt}: {error}; again");
                let _ = db.collection::<Document>(name).drop().await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// A claim MongoDB refuses for good (here a validator on `distributedJobs`
/// that no lease document passes; a missing privilege alike) ends the wait
/// with that refusal (exit 1), instead of a claim sent again on every poll
/// until the wait times out. A server without validators (DocumentDB)
/// refuses a user who may only read instead (code 13 Unauthorized).
#[tokio::test]
async fn a_claim_mongodb_refuses_ends_the_wait_with_the_refusal() {
    let db = database("lease_refused").await;
    let mut opts = fast_options("refused", "refused-owner");
    opts.wait_timeout = Some(Duration::from_secs(30));
    let validated = create_validated_collection(&db, &opts.collection).await;
    let reader = match validated {
        Ok(()) => None,
        Err(error) if support::server::is_unsupported(&error) => {
            Some(reader_of_every_database(&db).await)
        }
        Err(error) => panic!("create the validated collection: {error}"),
    };
    let claimer = match &reader {
        Some((_, client)) => client.database(db.name()),
        None => db.clone(),
    };
    let result = run_recording(&claimer, &opts, Duration::ZERO, Default::default()).await;
    if let Some((user, _)) = &reader {
        db.client()
            .database("admin")
            .run_command(doc! { "dropUser": user })
            .await
            .expect("dropUser");
    }
    let Err(error @ LeaseError::Refused { .. }) = &result else {
        panic!("the refusal ends the wait: {result:?}")
    };
    let message = error.to_string();
    assert!(
        message.contains("claim") && message.contains(&opts.collection),
        "{message}"
    );
    assert!(read_job(&db, &opts).await.is_none(), "nothing was written");
}

/// A user (in `admin`) who may read every database and write none, and a
/// client logged in as it.
async fn reader_of_every_database(db: &Database) -> (String, mongodb::Client) {
    let user = format!("reader_{}", db.name());
    let password = "reader-pass-1234";
    db.client()
        .database("admin")
        .run_command(doc! {
            "createUser": &user,
            "pwd": password,
            "roles": [{ "role": "readAnyDatabase", "db": "admin" }],
        })
        .await
        .expect("createUser");
    let uri = support::server::uri_with_credentials(support::mongo_uri(), &user, password, "admin");
    let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
    (user, client)
}

/// However short the wait, the lease is looked at once: `--wait-timeout 0s`
/// claims a free lease (and gives up at once on a held one).
#[tokio::test]
async fn a_zero_wait_timeout_still_claims_a_free_lease() {
    let db = database("lease_zero_wait").await;
    let mut opts = fast_options("zero_wait", "impatient");
    opts.wait_timeout = Some(Duration::ZERO);
    let result = run_recording(&db, &opts, Duration::ZERO, Default::default()).await;
    assert!(matches!(result, Ok(Outcome::Ran { .. })), "{result:?}");

    let mut held = fast_options("zero_wait_held", "impatient");
    held.wait_timeout = Some(Duration::ZERO);
    let holder = JobStore::new(
        &db,
        &LeaseOptions {
            ttl: Duration::from_secs(60),
            ..held.clone()
        },
    );
    let now = holder.server_now().await.unwrap();
    let claimed = holder.claim("holder", now, None).await.unwrap();
    assert!(claimed.is_some());
    let result = run_recording(&db, &held, Duration::ZERO, Default::default()).await;
    assert!(
        matches!(result, Err(LeaseError::WaitTimedOut { .. })),
        "a held lease is not waited for: {result:?}"
    );
}
