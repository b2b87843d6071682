//! The single-flight lease (docs/design.md §5) across OS processes: six processes
//! racing for 50 rounds, an owner killed with SIGKILL, and replicas whose wall
//! clocks are hours off (run under `faketime`).
//!
//! Child processes are this test binary re-executed on the ignored test
//! `lease_child` (see `support::lease_harness::ChildProcess`); they talk to
//! the parent with `@@ event` lines on stdout and take orders on stdin.

use crate::support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use meili_reconciler::lease::store::JobStatus;
use meili_reconciler::lease::{clock, run_single_flight, Guard, LeaseOptions, Outcome};
use meili_reconciler::progress::Progress;
use mongodb::bson::doc;
use mongodb::Database;
use nix::sys::signal::Signal;
use serde_json::json;
use support::lease_harness::*;
use support::timing::headroom;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

const CHILD: &str = "lease_processes::lease_child";

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Child timings: the suite's (`support::timing`), as the parent's.
fn child_options(job: &str, owner: &str) -> LeaseOptions {
    fast_options(job, owner)
}

/// The child side. Modes (`LEASE_MODE`):
/// - `contend`: for each round r, print `ready r`, wait for `go r` on stdin,
///   race for job `LEASE_JOB-r`; the job prints `ran r`; then `done r <kind>`;
/// - `own`: run a job that prints `started`, then `effect` lines (each after
///   `guard.check()`) until stopped; finally `result <debug>`;
/// - `follow`: run a job that prints `ran` and completes; `result <debug>`.
///
/// Every child first prints `pid <pid>` and `wallclock <unix ms>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process entry point, run by the other tests"]
async fn lease_child() {
    if std::env::var(CHILD_MODE).is_err() {
        return;
    }
    emit(format!("pid {}", std::process::id()));
    emit(format!("wallclock {}", wall_clock_ms()));
    let db = client().await.database(&child_env("LEASE_DB"));
    let job = child_env("LEASE_JOB");
    let owner = child_env("LEASE_OWNER");
    match child_env("LEASE_MODE").as_str() {
        "contend" => {
            let rounds: usize = child_env("LEASE_ROUNDS").parse().unwrap();
            let mut orders = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            for round in 0..rounds {
                emit(format!("ready {round}"));
                let order = orders.next_line().await.unwrap().unwrap();
                assert_eq!(order, format!("go {round}"));
                let mut opts = child_options(&format!("{job}-{round}"), &owner);
                opts.poll_every = Duration::from_millis(50);
                let mut work = move |guard: Guard, _progress: Progress| async move {
                    emit(format!("ran {round}"));
                    tokio::time::sleep(Duration::from_millis(60)).await;
                    guard.check()?;
                    Ok::<_, anyhow::Error>(json!({}))
                };
                let outcome = run_single_flight(
                    &db,
                    &opts,
                    &mut work,
                    Progress::new(),
                    CancellationToken::new(),
                )
                .await;
                let kind = match outcome {
                    Ok(Outcome::Ran { .. }) => "ran",
                    Ok(Outcome::CompletedByOther { age: None, .. }) => "other",
                    Ok(Outcome::CompletedByOther { age: Some(_), .. }) => "reused",
                    Ok(Outcome::HandedOver { to }) => panic!("round {round}: handed over to {to}"),
                    Err(error) => panic!("round {round}: {error}"),
                };
                emit(format!("done {round} {kind}"));
            }
        }
        "own" => {
            let opts = child_options(&job, &owner);
            let mut work = |guard: Guard, _progress: Progress| async move {
                emit("started");
                loop {
                    guard.check()?;
                    emit(format!("effect {}", wall_clock_ms()));
                    tokio::select! {
                        _ = guard.cancelled() => {}
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            };
            let result: Result<Outcome, meili_reconciler::lease::LeaseError> = run_single_flight(
                &db,
                &opts,
                &mut work,
                Progress::new(),
                CancellationToken::new(),
            )
            .await;
            emit(format!("result {result:?}"));
        }
        "follow" => {
            let opts = child_options(&job, &owner);
            let mut work = |_guard: Guard, _progress: Progress| async move {
                emit("ran");
                Ok::<_, anyhow::Error>(json!({ "by": "follower" }))
            };
            let result = run_single_flight(
                &db,
                &opts,
                &mut work,
                Progress::new(),
                CancellationToken::new(),
            )
            .await;
            emit(format!("result {result:?}"));
        }
        other => panic!("unknown LEASE_MODE {other}"),
    }
}

fn child_env_for(db: &Database, job: &str, owner: &str, mode: &str) -> Vec<(&'static str, String)> {
    vec![
        ("LEASE_DB", db.name().to_string()),
        ("LEASE_JOB", job.to_string()),
        ("LEASE_OWNER", owner.to_string()),
        ("LEASE_MODE", mode.to_string()),
        ("MONGO_URI", support::mongo_uri().to_string()),
        ("RUST_LOG", "warn".to_string()),
    ]
}

/// Spawns a child and reads its `pid` and `wallclock`; returns it with its
/// wall clock's offset from ours.
async fn spawn_child(wrapper: &[&str], env: Vec<(&'static str, String)>) -> (ChildProcess, i64) {
    let mut child = ChildProcess::spawn(wrapper, CHILD, &env);
    child.expect("pid", Duration::from_secs(30)).await;
    let theirs: i64 = child
        .expect("wallclock", Duration::from_secs(10))
        .await
        .parse()
        .unwrap();
    (child, theirs - wall_clock_ms())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_processes_race_and_exactly_one_runs_per_round() {
    const PROCESSES: usize = 6;
    const ROUNDS: usize = 50;
    let db = database("lease_procs").await;
    let mut children = Vec::new();
    for i in 0..PROCESSES {
        let env = child_env_for(&db, "race", &format!("proc-{i}"), "contend");
        let mut env = env;
        env.push(("LEASE_ROUNDS", ROUNDS.to_string()));
        children.push(spawn_child(&[], env).await.0);
    }
    let jobs = db.collection::<mongodb::bson::Document>("distributedJobs");
    for round in 0..ROUNDS {
        let job = format!("race-{round}");
        // Alternate the starting state: none (insert race), a stale
        // completion, an expired owner, a released lease.
        let now = server_now(&db).await;
        let hour_ago = clock::earlier(now, Duration::from_secs(3600));
        let seeded_epoch = match round % 4 {
            0 => 0,
            kind => {
                let (status, epoch) =
                    [("completed", 7_i64), ("running", 3), ("released", 5)][kind - 1];
                let mut seeded = doc! {
                    "_id": &job, "owner": "seed", "epoch": epoch, "status": status,
                    "claimedAt": hour_ago, "completedAt": hour_ago,
                };
                seeded.extend(our_expiry(
                    &child_options(&job, "seed"),
                    clock::earlier(now, Duration::from_secs(1)),
                ));
                jobs.insert_one(seeded).await.unwrap();
                epoch
            }
        };
        for child in &mut children {
            assert_eq!(
                child.expect("ready", Duration::from_secs(30)).await,
                round.to_string()
            );
        }
        for child in &mut children {
            child.send(&format!("go {round}")).await;
        }
        let mut ran = 0;
        for child in &mut children {
            loop {
                let event = child
                    .next(Duration::from_secs(30))
                    .await
                    .expect("the child reports");
                if event == format!("ran {round}") {
                    ran += 1;
                } else {
                    assert!(
                        event.starts_with(&format!("done {round} ")),
                        "unexpected `{event}`"
                    );
                    break;
                }
            }
        }
        assert_eq!(ran, 1, "round {round}: exactly one process ran the job");
        let record = read_job(&db, &child_options(&job, "parent")).await.unwrap();
        assert_eq!(record.status, JobStatus::Completed);
        assert_eq!(
            record.epoch,
            Some(seeded_epoch + 1),
            "round {round}: exactly one claim"
        );
    }
    for mut child in children {
        let status = child.child.wait().await.unwrap();
        assert!(status.success(), "a child failed: {status}");
    }
}

/// Runs a follower in this process (true clock); returns its outcome and
/// when its job started (local time), if it ran.
async fn follower_in_process(
    db: &Database,
    opts: LeaseOptions,
) -> tokio::task::JoinHandle<(
    Result<Outcome, meili_reconciler::lease::LeaseError>,
    Option<Instant>,
)> {
    let db = same_database(db).await;
    tokio::spawn(async move {
        let started = std::sync::Arc::new(std::sync::Mutex::new(None));
        let record = started.clone();
        let mut work = move |_guard: Guard, _progress: Progress| {
            *record.lock().unwrap() = Some(Instant::now());
            async { Ok::<_, anyhow::Error>(json!({ "by": "in-process follower" })) }
        };
        let result = run_single_flight(
            &db,
            &opts,
            &mut work,
            Progress::new(),
            CancellationToken::new(),
        )
        .await;
        let started = *started.lock().unwrap();
        (result, started)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_is_replaced_within_ttl_and_poll() {
    let db = database("lease_crash").await;
    let opts = child_options("crash", "in-process");
    let (mut owner, _) = spawn_child(&[], child_env_for(&db, "crash", "doomed", "own")).await;
    owner.expect("started", Duration::from_secs(30)).await;
    let claimed = read_job(&db, &opts).await.unwrap();
    assert_eq!(claimed.owner.as_deref(), Some("doomed"));

    let follower = follower_in_process(&db, opts.clone()).await;
    // The live owner keeps the lease past its ttl (and the headroom a
    // follower's claim of an unrenewed lease would take).
    tokio::time::sleep(opts.ttl + headroom()).await;
    assert!(
        !follower.is_finished(),
        "the follower waits while the owner lives"
    );

    owner.signal(Signal::SIGKILL);
    let killed_at = Instant::now();
    owner.child.wait().await.unwrap();
    let last = read_job(&db, &opts).await.unwrap();
    assert_eq!(last.epoch, claimed.epoch);

    let (result, started) = tokio::time::timeout(Duration::from_secs(20), follower)
        .await
        .unwrap()
        .unwrap();
    let Ok(Outcome::Ran { epoch, .. }) = result else {
        panic!("the follower takes over: {result:?}")
    };
    assert!(
        epoch > claimed.epoch.unwrap(),
        "the takeover has a higher epoch"
    );
    let after = started.unwrap().duration_since(killed_at);
    let bound = opts.ttl + opts.poll_every + headroom();
    assert!(
        after <= bound,
        "took over {after:?} after the kill (bound {bound:?})"
    );
}

fn faketime_available() -> bool {
    std::process::Command::new("faketime")
        .arg("--version")
        .output()
        .is_ok()
}

fn skewed(offset: &'static str) -> [&'static str; 3] {
    ["faketime", "-f", offset]
}

fn skewed_env(db: &Database, job: &str, owner: &str, mode: &str) -> Vec<(&'static str, String)> {
    let mut env = child_env_for(db, job, owner, mode);
    env.push(("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()));
    env
}

fn assert_skew(offset_ms: i64, hours: i64) {
    let expected = hours * 3600 * 1000;
    assert!(
        (offset_ms - expected).abs() < 60_000,
        "faketime did not skew the child's clock by {hours}h (offset {offset_ms} ms)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_skewed_clocks_neither_steal_nor_hold_an_expired_lease() {
    if !faketime_available() {
        return support::skip::skip("`faketime` is not on PATH (apt-get install -y faketime)");
    }
    let db = database("lease_skew").await;

    // 1. A live lease on the true clock: followers 5 h ahead and 5 h behind
    //    wait for its completion and never run the job.
    let opts = child_options("skew-live", "true-clock");
    let long_opts = opts.clone();
    let ttl = opts.ttl;
    let owner_db = same_database(&db).await;
    let owner = tokio::spawn(async move {
        let mut work = |guard: Guard, _progress: Progress| async move {
            tokio::time::sleep(ttl + headroom()).await;
            guard.check()?;
            Ok::<_, anyhow::Error>(json!({ "by": "true-clock" }))
        };
        run_single_flight(
            &owner_db,
            &long_opts,
            &mut work,
            Progress::new(),
            CancellationToken::new(),
        )
        .await
    });
    while read_job(&db, &opts).await.is_none() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut ahead, ahead_offset) = spawn_child(
        &skewed("+5h"),
        skewed_env(&db, "skew-live", "ahead", "follow"),
    )
    .await;
    let (mut behind, behind_offset) = spawn_child(
        &skewed("-5h"),
        skewed_env(&db, "skew-live", "behind", "follow"),
    )
    .await;
    assert_skew(ahead_offset, 5);
    assert_skew(behind_offset, -5);
    for follower in [&mut ahead, &mut behind] {
        let result = follower
            .next(Duration::from_secs(30))
            .await
            .expect("the follower reports");
        // Completed while it waited (`age: None`), not a completion it
        // judged fresh and reused.
        assert!(
            result.starts_with("result Ok(CompletedByOther") && result.contains("age: None"),
            "a skewed follower: `{result}`"
        );
    }
    let outcome = owner.await.unwrap().unwrap();
    assert!(
        matches!(outcome, Outcome::Ran { epoch: 1, .. }),
        "{outcome:?}"
    );

    // 2. An owner 5 h behind writes a correct expiry (the true-clock follower
    //    waits); frozen past its ttl, it is taken over and, thawed, stops
    //    without holding or writing the expired lease.
    let opts = child_options("skew-behind", "true-clock");
    let (mut slow, _) = spawn_child(
        &skewed("-5h"),
        skewed_env(&db, "skew-behind", "behind", "own"),
    )
    .await;
    slow.expect("started", Duration::from_secs(30)).await;
    // Document first, then clock, so a renewal in between cannot overstate
    // the expiry.
    let record = read_job(&db, &opts).await.unwrap();
    let now = server_now(&db).await;
    let expires_in = clock::millis_between(now, record.lease_expires_at.unwrap());
    assert!(
        expires_in > 0 && expires_in <= opts.ttl.as_millis() as i64,
        "expiresAt {expires_in} ms away"
    );
    let follower = follower_in_process(&db, opts.clone()).await;
    tokio::time::sleep(opts.ttl + headroom()).await;
    assert!(
        !follower.is_finished(),
        "the true-clock follower does not steal the live lease"
    );
    slow.signal(Signal::SIGSTOP);
    let (result, _) = tokio::time::timeout(Duration::from_secs(20), follower)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(result, Ok(Outcome::Ran { epoch: 2, .. })),
        "{result:?}"
    );
    let taken = read_job(&db, &opts).await.unwrap();
    slow.signal(Signal::SIGCONT);
    let result = loop {
        let event = slow
            .next(Duration::from_secs(20))
            .await
            .expect("the thawed owner reports");
        if let Some(result) = event.strip_prefix("result ") {
            break result.to_string();
        }
    };
    assert!(
        result.starts_with("Err(LeaseLost"),
        "the thawed owner: `{result}`"
    );
    assert_eq!(
        read_job(&db, &opts).await.unwrap(),
        taken,
        "it wrote nothing"
    );

    // 3. An owner 5 h ahead writes a correct expiry: killed, it is replaced by
    //    a follower 5 h behind within ttl + poll.
    let opts = child_options("skew-ahead", "observer");
    let (mut fast, _) = spawn_child(
        &skewed("+5h"),
        skewed_env(&db, "skew-ahead", "ahead", "own"),
    )
    .await;
    fast.expect("started", Duration::from_secs(30)).await;
    let (mut late, _) = spawn_child(
        &skewed("-5h"),
        skewed_env(&db, "skew-ahead", "behind", "follow"),
    )
    .await;
    for _ in 0..3 {
        let record = read_job(&db, &opts).await.unwrap();
        let now = server_now(&db).await;
        let expires_in = clock::millis_between(now, record.lease_expires_at.unwrap());
        assert!(
            expires_in > 0 && expires_in <= opts.ttl.as_millis() as i64,
            "expiresAt {expires_in} ms away"
        );
        assert_eq!(record.owner.as_deref(), Some("ahead"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    fast.signal(Signal::SIGKILL);
    let killed_at = Instant::now();
    let ran = late.expect("ran", Duration::from_secs(20)).await;
    assert!(ran.is_empty());
    let after = killed_at.elapsed();
    let bound = opts.ttl + opts.poll_every + headroom();
    assert!(
        after <= bound,
        "took over {after:?} after the kill (bound {bound:?})"
    );
    let result = late.expect("result", Duration::from_secs(10)).await;
    assert!(result.starts_with("Ok(Ran { epoch: 2"), "{result}");
}
