//! The lease on a replica set (docs/design.md §5.11, "Concerns and
//! ambiguous outcomes"): every lease write is `w: majority` with journaling
//! and a `wtimeout`, every lease read `readConcern: majority`; a write whose
//! outcome is unknown (write-concern error, lost reply) is resolved by
//! reading the document, never guessed. Faults are injected by the server
//! itself (`failCommand`, scoped to the test's client by `appName`) and by a
//! TCP proxy that swallows a reply after the server applied the write.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meili_reconciler::lease::{
    run_single_flight, Guard, LeaseError, LeaseLost, LeaseOptions, LeaseWriteConcern, Outcome,
};
use meili_reconciler::progress::Progress;
use mongodb::bson::Bson;
use mongodb::Database;
use rand::Rng;
use serde_json::json;
use support::faults::{monitored_client, times, CommandLog, FailCommand};
use support::lease_harness::*;
use support::timing::headroom;
use support::unique_name;
use tokio_util::sync::CancellationToken;

const JOBS: &str = "distributedJobs";

/// Runs `opts`'s job once on `db`: the job counts its runs in `runs` and
/// takes `work`; Err when `fail`.
async fn run_job(
    db: &Database,
    opts: &LeaseOptions,
    runs: &Arc<AtomicUsize>,
    work: Duration,
    fail: bool,
    shutdown: CancellationToken,
) -> Result<Outcome, LeaseError> {
    let runs = runs.clone();
    let mut job = move |guard: Guard, _progress: Progress| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::select! {
                _ = tokio::time::sleep(work) => {}
                _ = guard.cancelled() => {}
            }
            guard.check()?;
            if fail {
                anyhow::bail!("the job failed on purpose");
            }
            Ok::<_, anyhow::Error>(json!({ "ok": true }))
        }
    };
    run_single_flight(db, opts, &mut job, Progress::new(), shutdown).await
}

fn concern_of<'a>(
    sent: &'a support::faults::Sent,
    key: &str,
) -> Option<&'a mongodb::bson::Document> {
    sent.command.get_document(key).ok()
}

/// Every lease write in `log` carries `w` (and `j: true`, a `wtimeout`), every
/// lease read `readConcern.level = read`; returns (writes, reads) seen.
fn assert_concerns(log: &CommandLog, w: Bson, read: &str) -> (usize, usize) {
    let (mut writes, mut reads) = (0, 0);
    for sent in log.on(JOBS) {
        match sent.name.as_str() {
            "findAndModify" | "update" => {
                writes += 1;
                let wc = concern_of(&sent, "writeConcern").unwrap_or_else(|| {
                    panic!("{} without writeConcern: {:?}", sent.name, sent.command)
                });
                assert_eq!(wc.get("w"), Some(&w), "{:?}", sent.command);
                assert_eq!(wc.get_bool("j"), Ok(true), "{:?}", sent.command);
                assert!(wc.get("wtimeout").is_some(), "{:?}", sent.command);
            }
            "find" => {
                reads += 1;
                let rc = concern_of(&sent, "readConcern")
                    .unwrap_or_else(|| panic!("find without readConcern: {:?}", sent.command));
                assert_eq!(rc.get_str("level"), Ok(read), "{:?}", sent.command);
            }
            other => panic!("unexpected lease command {other}: {:?}", sent.command),
        }
    }
    (writes, reads)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_lease_write_is_majority_journaled_and_every_read_majority() {
    let app = unique_name("rs_concerns");
    let (client, log) = monitored_client(&app, true, None).await;
    let db = client.database(&app);
    let runs = Arc::new(AtomicUsize::new(0));
    let mut opts = fast_options("concerns", "a");
    opts.force = true;

    // Claim, renewals (the job outlives two renewal periods), completion.
    let done = run_job(
        &db,
        &opts,
        &runs,
        opts.renew_every * 3,
        false,
        CancellationToken::new(),
    )
    .await;
    assert!(matches!(done, Ok(Outcome::Ran { .. })), "{done:?}");
    // A failure.
    let failed = run_job(
        &db,
        &opts,
        &runs,
        Duration::ZERO,
        true,
        CancellationToken::new(),
    )
    .await;
    assert!(
        matches!(failed, Err(LeaseError::JobFailed { .. })),
        "{failed:?}"
    );
    // A release on shutdown.
    let shutdown = CancellationToken::new();
    let (stop, counter) = (shutdown.clone(), runs.clone());
    let started = counter.load(Ordering::SeqCst);
    tokio::spawn(async move {
        // Once the job runs, the claim has landed: shut down then.
        while counter.load(Ordering::SeqCst) == started {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.cancel();
    });
    let released = run_job(&db, &opts, &runs, Duration::from_secs(30), false, shutdown).await;
    assert!(
        matches!(released, Err(LeaseError::ShutDown { released: true })),
        "{released:?}"
    );

    let (writes, reads) = assert_concerns(&log, Bson::String("majority".into()), "majority");
    // 3 claims, ≥ 2 renewals, a completion, a failure, a release.
    assert!(writes >= 8 && reads >= 3, "{writes} writes, {reads} reads");

    // `lease.write_concern = 1`: w: 1, and reads at `local`.
    let app = unique_name("rs_w1");
    let (client, log) = monitored_client(&app, true, None).await;
    let db = client.database(&app);
    opts.write_concern = LeaseWriteConcern::Nodes(1);
    let done = run_job(
        &db,
        &opts,
        &runs,
        Duration::ZERO,
        false,
        CancellationToken::new(),
    )
    .await;
    assert!(matches!(done, Ok(Outcome::Ran { .. })), "{done:?}");
    let (writes, reads) = assert_concerns(&log, Bson::Int32(1), "local");
    assert!(writes >= 2 && reads >= 1, "{writes} writes, {reads} reads");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_applied_but_answered_with_a_write_concern_error_is_won() {
    let app = unique_name("rs_claim_wce");
    let Some(faults) = FailCommand::new(&app).await else {
        return;
    };
    let (client, log) = monitored_client(&app, true, None).await;
    let db = client.database(&app);
    let opts = fast_options("claim-wce", "a");
    let runs = Arc::new(AtomicUsize::new(0));

    faults
        .write_concern_error(&["findAndModify"], times(1))
        .await;
    let started = Instant::now();
    let outcome = run_job(
        &db,
        &opts,
        &runs,
        Duration::ZERO,
        false,
        CancellationToken::new(),
    )
    .await;
    faults.off().await;

    let claims = log
        .on(JOBS)
        .into_iter()
        .filter(|s| s.name == "findAndModify")
        .collect::<Vec<_>>();
    assert!(
        claims[0].write_concern_failed(),
        "the fault hit the claim: {:?}",
        claims[0].reply
    );
    match outcome {
        Ok(Outcome::Ran { epoch, .. }) => {
            assert_eq!(epoch, 1, "the claim that was applied is ours")
        }
        other => panic!("expected to run as the owner of epoch 1, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        claims.len(),
        1,
        "adopted after a re-read, not claimed again"
    );
    assert!(
        started.elapsed() < opts.ttl,
        "adopted at once, not after waiting out the lease ({:?})",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_whose_reply_is_lost_is_won() {
    if support::server::mongo_uses_tls().await {
        return support::skip::skip(
            "the test MongoDB speaks TLS: the proxy that loses the claim's reply \
             cannot see which message is the claim",
        );
    }
    // Without the driver's retry (our own re-read decides) and with it (the
    // retried claim collides with the applied one: E11000, then a re-read).
    for retry_writes in [false, true] {
        let app = unique_name("rs_claim_lost");
        let seed = database(&app).await;
        let proxy = MongoProxy::start(primary_address(&seed).await).await;
        let (client, log) = monitored_client(&app, retry_writes, Some(proxy.addr)).await;
        let db = client.database(seed.name());
        let opts = fast_options("claim-lost", "a");
        let runs = Arc::new(AtomicUsize::new(0));

        proxy.lose_reply_to("findAndModify");
        let started = Instant::now();
        let outcome = run_job(
            &db,
            &opts,
            &runs,
            Duration::ZERO,
            false,
            CancellationToken::new(),
        )
        .await;
        assert_eq!(proxy.replies_lost(), 1, "the claim's reply was swallowed");
        match outcome {
            Ok(Outcome::Ran { epoch, .. }) => {
                assert_eq!(
                    epoch, 1,
                    "retry_writes={retry_writes}: the lost claim is ours"
                )
            }
            other => panic!("retry_writes={retry_writes}: expected to own epoch 1, got {other:?}"),
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(
            started.elapsed() < opts.ttl,
            "adopted at once ({:?})",
            started.elapsed()
        );
        let record = read_job(&seed, &opts).await.unwrap();
        assert_eq!(
            (record.owner.as_deref(), record.epoch),
            (Some("a"), Some(1))
        );
        drop(log);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_answered_with_an_error_does_not_extend_the_local_deadline() {
    let app = unique_name("rs_renew_wce");
    let Some(faults) = FailCommand::new(&app).await else {
        return;
    };
    let (client, _log) = monitored_client(&app, true, None).await;
    let db = client.database(&app);
    let opts = fast_options("renew-wce", "a");
    let effects = Effects::default();
    let (owner, guard, _shutdown) = start_endless_owner_on(db.clone(), opts.clone(), effects).await;

    // From now on every renewal is applied but answered with an error.
    faults
        .write_concern_error(&["update"], Bson::String("alwaysOn".into()))
        .await;
    let armed = Instant::now();
    let renewed_before = read_job(&db, &opts).await.unwrap().renewed_at;
    tokio::time::timeout(opts.ttl * 2, guard.cancelled())
        .await
        .expect("the owner stops itself");
    let stopped_after = armed.elapsed();
    faults.off().await;
    let holds_for = opts.ttl - opts.safety_margin;

    let lost = owner.await.unwrap();
    assert!(
        matches!(
            lost,
            Err(LeaseError::LeaseLost {
                epoch: 1,
                reason: LeaseLost::SelfFenced
            })
        ),
        "{lost:?}"
    );
    // The server did extend the lease: the renewals landed, unconfirmed.
    let record = read_job(&db, &opts).await.unwrap();
    assert!(
        record.renewed_at > renewed_before,
        "renewals were applied server-side"
    );
    // Yet the owner's deadline stayed ttl - safety_margin after a renewal
    // sent before the fault (only those were confirmed): a renewal sent
    // since, answered with an error, would have put it past
    // `armed + holds_for`. Exact, however late the timers fire.
    let deadline = guard.deadline().expect("an owner's guard has a deadline");
    assert!(
        deadline < armed + holds_for,
        "the deadline is {:?} after the fault, beyond ttl - safety_margin ({holds_for:?}): \
         an unconfirmed renewal moved it",
        deadline - armed
    );
    // And it stopped at that deadline (late by at most a headroom on a
    // loaded machine), not at the fault.
    assert!(
        stopped_after <= holds_for + headroom(),
        "stopped {stopped_after:?} after the fault, past its deadline"
    );
    assert!(
        armed + stopped_after >= deadline,
        "stopped {stopped_after:?} after the fault, before its deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_with_write_concern_errors_on_a_fifth_of_lease_writes_keeps_one_owner_per_epoch()
{
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 50;
    let app = unique_name("rs_chaos");
    let Some(faults) = FailCommand::new(&app).await else {
        return;
    };
    let db_name = app.clone();
    let mut replicas = Vec::new();
    let mut logs = Vec::new();
    for _ in 0..CLIENTS {
        let (client, log) = monitored_client(&app, true, None).await;
        replicas.push(client.database(&db_name));
        logs.push(log);
    }
    // The chaos: after each applied lease write, with probability 1/5 the
    // next one (whoever sends it) is applied and answered with a
    // write-concern error.
    let stop = CancellationToken::new();
    let chaos = {
        let stop = stop.clone();
        let logs = logs.clone();
        tokio::spawn(async move {
            // Lease writes answered so far that wrote something.
            let writes = |logs: &[CommandLog]| {
                logs.iter()
                    .map(|l| {
                        l.on(JOBS)
                            .iter()
                            .filter(|s| s.name != "find" && s.reply.is_some() && !s.duplicate_key())
                            .count()
                    })
                    .sum::<usize>()
            };
            let mut seen = 0;
            while !stop.is_cancelled() {
                let now = writes(&logs);
                let hit = (seen..now).any(|_| rand::rng().random_ratio(1, 5));
                seen = now;
                if hit {
                    faults
                        .write_concern_error(&["findAndModify", "update"], times(1))
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            faults.off().await;
        })
    };

    for round in 0..ROUNDS {
        let job = format!("chaos-{round}");
        let runs = Arc::new(AtomicUsize::new(0));
        let mut racers = tokio::task::JoinSet::new();
        for (i, replica) in replicas.iter().enumerate() {
            let mut opts = fast_options(&job, &format!("client-{i}"));
            opts.poll_every = Duration::from_millis(30);
            let (replica, runs) = (replica.clone(), runs.clone());
            racers.spawn(async move {
                run_job(
                    &replica,
                    &opts,
                    &runs,
                    Duration::from_millis(40),
                    false,
                    CancellationToken::new(),
                )
                .await
            });
        }
        let mut ran = Vec::new();
        while let Some(result) = racers.join_next().await {
            match result.unwrap() {
                Ok(Outcome::Ran { epoch, .. }) => ran.push(epoch),
                Ok(_) => {}
                Err(error) => panic!("round {round}: a racer failed: {error}"),
            }
        }
        assert_eq!(ran, vec![1], "round {round}: exactly one owner, of epoch 1");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "round {round}: the job ran once"
        );
        let record = read_job(&replicas[0], &fast_options(&job, "x"))
            .await
            .unwrap();
        assert_eq!(record.epoch, Some(1), "round {round}: one claim, one epoch");
        assert_eq!(
            record.status,
            meili_reconciler::lease::store::JobStatus::Completed
        );
    }
    stop.cancel();
    chaos.await.unwrap();

    // Of the lease writes that were applied (a claim that lost the race to
    // E11000 writes nothing, and no write-concern error can attach to it).
    let applied: Vec<_> = logs
        .iter()
        .flat_map(|l| l.on(JOBS))
        .filter(|s| s.name != "find" && !s.duplicate_key())
        .collect();
    let failed = applied.iter().filter(|s| s.write_concern_failed()).count();
    let share = failed as f64 / applied.len() as f64;
    eprintln!(
        "{failed} of {} applied lease writes answered with a write-concern error ({:.0}%)",
        applied.len(),
        share * 100.0
    );
    assert!(failed >= 5, "the chaos hit only {failed} lease writes");
}
