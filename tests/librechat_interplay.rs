//! A mixed fleet: LibreChat replicas running their own `runDistributedJob`
//! on the same `distributedJobs` document (a protocol double written from
//! its description, `support/librechat_double.rs`) beside real
//! `meili-reconciler once` and `run` processes.
//!
//! What must hold (docs/design.md §5.10, "LibreChat's lease on the same document"): no two
//! critical sections overlap in the document's commit order, no side loses a
//! lease it holds, our completion reads as "done" to LibreChat's waiters, and
//! LibreChat's `completed` never counts as a reconciliation for us.

use crate::support;

use std::time::{Duration, Instant};

use mongodb::bson::{DateTime, Document};
use mongodb::Database;
use rand::Rng;
use support::cli::{
    eventually, free_port, is_labelled, output_of, terminate, wait_exit, Replica, Target,
};
use support::job_timeline::{sections, JobTimeline, Side};
use support::librechat_double::{Ended, LibreChatReplica};

const JOB: &str = "meili-index-sync";
const JOBS: &str = "distributedJobs";

/// Our replicas with the suite's test-speed leases (`support::timing`) and a
/// 500 ms allowance for LibreChat clocks; completions are not reused, so
/// every `once` waits or claims.
fn fleet(tag: &str) -> Target {
    Target::new(tag)
        .set("RECONCILER__LEASE__LIBRECHAT_CLOCK_SKEW", "500ms")
        .set("RECONCILER__LEASE__REUSE_COMPLETION_FOR", "0s")
}

async fn librechat(db: &Database, clock_offset_ms: i64) -> LibreChatReplica {
    let client = mongodb::Client::with_uri_str(support::mongo_uri())
        .await
        .unwrap();
    let jobs = client.database(db.name()).collection::<Document>(JOBS);
    LibreChatReplica::new(jobs, JOB, clock_offset_ms)
}

async fn insert_messages(db: &Database, from: usize, n: usize) {
    let now = DateTime::now();
    let docs: Vec<Document> = (from..from + n)
        .map(|i| support::chat_data::message(i * 20, now)) // plain indexable messages
        .collect();
    db.collection::<Document>("messages")
        .insert_many(docs)
        .await
        .unwrap();
}

/// Waits for a process off the runtime's threads; returns (exit code, stdout, stderr).
async fn finish(mut replica: Replica, limit: Duration) -> (Option<i32>, String, String) {
    tokio::task::spawn_blocking(move || {
        let status = wait_exit(&mut replica, limit);
        let (out, err) = output_of(replica);
        (status.code(), out, err)
    })
    .await
    .unwrap()
}

/// The owner a `once` that waited names ("done by X (…)").
fn done_by(out: &str) -> Option<String> {
    let rest = out.split("done by ").nth(1)?;
    Some(rest.split_whitespace().next()?.to_string())
}

/// A state our protocol wrote (its `expiresAt` is the one we recorded).
fn written_by_us(state: &Document) -> bool {
    state.get("expiresAt").is_some() && state.get("writtenExpiresAt") == state.get("expiresAt")
}

/// A random start delay within `[0, max_ms]`.
fn jitter(max_ms: u64) -> Duration {
    Duration::from_millis(rand::rng().random_range(0..=max_ms))
}

/// `once` processes, LibreChat doubles and one `run` process (following
/// change streams when `follow`) over `rounds` rounds.
async fn mixed_fleet(tag: &str, rounds: usize, follow: bool) {
    let target = fleet(tag);
    let our_ttl = support::timing::lease().ttl;
    let db = target.db().await;
    insert_messages(&db, 0, 20).await;
    let timeline = JobTimeline::start(&db, JOBS, JOB).await;

    let listen = format!("127.0.0.1:{}", free_port());
    let runner = target
        .clone()
        .set("RECONCILER__SERVE__INTERVAL", "1s")
        .set("RECONCILER__SERVE__LISTEN", &listen)
        .set(
            "RECONCILER__SERVE__FOLLOW",
            if follow { "true" } else { "false" },
        )
        .spawn("run-0", &["run"]);

    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 0..rounds {
        insert_messages(&db, 1000 + round * 2, 2).await;
        // Everyone starts within 1.5 s, in a random order: our completion
        // keeps LibreChat's waiters "done" for 500 ms, so some LibreChat
        // replicas find it and some find it expired and claim.
        let mut onces = tokio::task::JoinSet::new();
        for x in ["a", "b"] {
            let target = target.clone();
            let owner = format!("once-{round}-{x}");
            onces.spawn(async move {
                tokio::time::sleep(jitter(1_500)).await;
                let once = target.spawn(&owner, &["once", "--wait-timeout", "60s"]);
                finish(once, Duration::from_secs(90)).await
            });
        }
        let mut doubles = tokio::task::JoinSet::new();
        for _ in 0..2 {
            // Clocks off by up to 300 ms, inside the 500 ms allowance.
            let offset = rand::rng().random_range(-300..=300);
            let replica = librechat(&db, offset).await;
            // One in ten (about ten over fifty rounds) works longer than our
            // ttl: a lease of ours left in the document would have expired
            // under it.
            let work = if rand::rng().random_ratio(1, 10) {
                our_ttl + Duration::from_millis(rand::rng().random_range(100..1_000))
            } else {
                Duration::from_millis(rand::rng().random_range(20..300))
            };
            doubles.spawn(async move {
                tokio::time::sleep(jitter(1_500)).await;
                replica
                    .run(|| async move {
                        tokio::time::sleep(work).await;
                        true
                    })
                    .await
                    .expect("the LibreChat double talks to MongoDB")
            });
        }
        while let Some(done) = onces.join_next().await {
            ours.push((round, done.unwrap()));
        }
        while let Some(ended) = doubles.join_next().await {
            theirs.push((round, ended.unwrap()));
        }
    }
    if follow {
        // Every message inserted reached Meilisearch, across all the
        // handovers: nothing was lost between owners.
        let env = support::chat_data::Env::for_target(&target).await;
        support::follow::await_in_step(&env, Duration::from_secs(30)).await;
        eventually(Duration::from_secs(30), "run-0 following again", || async {
            let lease = target.lease().await?;
            (lease
                .get_str("owner")
                .is_ok_and(|o| is_labelled(o, "run-0"))
                && lease.get_bool("following").unwrap_or(false))
            .then_some(())
        })
        .await;
    }
    terminate(&runner);
    let (run_code, _, run_err) = finish(runner, Duration::from_secs(30)).await;
    // The run's release is the last write; give the stream a moment to deliver it.
    let last = eventually(
        Duration::from_secs(10),
        "the run's exit in the timeline",
        || {
            let last = timeline.states().last().cloned();
            async move { last.filter(|s| s.get_str("status").ok() != Some("running")) }
        },
    )
    .await;
    let states = timeline.stop();

    // 1. No two critical sections overlap, in MongoDB's own commit order.
    let (sections, violations) = sections(&states);
    assert!(
        violations.is_empty(),
        "overlapping sections: {violations:#?}"
    );
    let by = |side: Side| sections.iter().filter(|s| s.side == side).count();
    eprintln!(
        "{} sections: {} ours, {} LibreChat's; last state {last:?}",
        sections.len(),
        by(Side::Reconciler),
        by(Side::LibreChat)
    );
    if follow {
        // A following owner keeps the lease: LibreChat's replicas read it
        // as done; `once` gets it handed over and gives it back.
        assert!(
            by(Side::Reconciler) >= 5,
            "the lease changed hands many times: {sections:?}"
        );
    } else {
        assert!(
            by(Side::LibreChat) >= 5 && by(Side::Reconciler) >= 5,
            "both sides held the lease many times: {sections:?}"
        );
    }
    assert!(
        sections.iter().all(|s| s.end.is_some()),
        "every section ended with its holder's own terminal write"
    );

    // 2. No side loses a lease it holds.
    assert_eq!(run_code, Some(0), "run exits 0 after SIGTERM: {run_err}");
    assert!(!run_err.contains("lease lost"), "{run_err}");
    for (round, (code, out, err)) in &ours {
        assert_eq!(*code, Some(0), "round {round}: once exits 0\n{out}\n{err}");
        assert!(!err.contains("lease lost"), "round {round}: {err}");
        // 3. A waiting `once` is only ever satisfied by one of ours.
        if let Some(owner) = done_by(out) {
            assert!(
                owner.starts_with("once-") || owner.starts_with("run-"),
                "round {round}: a LibreChat completion satisfied `once`: {out}"
            );
        }
    }
    let mut accepted_ours = 0;
    for (round, ended) in &theirs {
        match ended {
            Ended::Ran { completed, lost } => {
                assert!(
                    *completed && !*lost,
                    "round {round}: the LibreChat replica lost its lease"
                )
            }
            // 4. Our completion reads as done to LibreChat's waiters.
            Ended::Done(state) => accepted_ours += usize::from(written_by_us(state)),
        }
    }
    eprintln!("LibreChat waiters accepted our completion {accepted_ours} times");
    assert!(
        accepted_ours > 0,
        "some LibreChat waiter accepted one of our completions"
    );
    target.cleanup().await;
}

/// The default fleet: the `run` replica follows change streams and keeps
/// the lease; `once` gets it handed over; LibreChat's replicas are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mixed_fleet_is_single_flight_over_fifty_rounds() {
    // The timeline of the job document is read from a change stream.
    if support::server::skip_without_change_streams().await {
        return;
    }
    mixed_fleet("lc_fleet", 50, true).await;
}

/// The same fleet with `run` reconciling on its interval only
/// (`serve.follow = false`): LibreChat's replicas and ours alternate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mixed_fleet_in_interval_mode_is_single_flight_over_fifty_rounds() {
    // The timeline of the job document is read from a change stream.
    if support::server::skip_without_change_streams().await {
        return;
    }
    mixed_fleet("lc_fleet_interval", 50, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn librechat_completions_do_not_satisfy_runs_interval() {
    // The timeline of the job document is read from a change stream.
    if support::server::skip_without_change_streams().await {
        return;
    }
    // Interval runs (a following replica keeps the lease instead: see above).
    let target = fleet("lc_interval").set("RECONCILER__SERVE__FOLLOW", "false");
    let db = target.db().await;
    insert_messages(&db, 0, 10).await;
    let timeline = JobTimeline::start(&db, JOBS, JOB).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let runner = target
        .clone()
        .set("RECONCILER__SERVE__INTERVAL", "1s")
        .set("RECONCILER__SERVE__LISTEN", &listen)
        .spawn("run-0", &["run"]);
    // LibreChat replicas completing (no-op) again and again, until run has
    // reconciled five times with LibreChat's runs in between (or a deadline
    // far beyond five 1 s intervals on a loaded machine): a LibreChat
    // completion that stood in for a run would stop run's ticks, and the
    // deadline would pass.
    let lc = librechat(&db, 0).await;
    let counts = |states: &[Document]| {
        let (sections, violations) = sections(states);
        assert!(violations.is_empty(), "{violations:#?}");
        let runs = sections
            .iter()
            .filter(|s| is_labelled(&s.owner, "run-0"))
            .count();
        let librechat_runs = sections
            .iter()
            .filter(|s| s.side == Side::LibreChat)
            .count();
        (runs, librechat_runs)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ended = lc.run(|| async { true }).await.unwrap();
        assert_ne!(
            ended,
            Ended::Ran {
                completed: false,
                lost: true
            }
        );
        let (runs, librechat_runs) = counts(&timeline.states());
        if runs >= 5 && librechat_runs >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "run reconciles on its interval whatever LibreChat completes: {runs} runs, {librechat_runs} LibreChat runs in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    terminate(&runner);
    let (code, _, err) = finish(runner, Duration::from_secs(30)).await;
    assert_eq!(code, Some(0), "{err}");
    counts(&timeline.stop());
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_librechat_completion_is_never_a_reconciliation_but_ours_is_done_for_librechat() {
    // Completions are reused for 60 s here, as by default.
    let target = fleet("lc_completion").set("RECONCILER__LEASE__REUSE_COMPLETION_FOR", "60s");
    let db = target.db().await;
    insert_messages(&db, 0, 10).await;

    // A LibreChat replica with MEILI_NO_SYNC: its handler does nothing and it
    // records `completed`.
    let lc = librechat(&db, 0).await;
    assert_eq!(
        lc.run(|| async { true }).await.unwrap(),
        Ended::Ran {
            completed: true,
            lost: false
        }
    );

    // `once` does not take that for a (fresh) reconciliation: it runs.
    let (code, out, err) = finish(target.spawn("once-1", &["once"]), Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains("docs/s") && done_by(&out).is_none(),
        "once ran itself: {out}"
    );
    assert_eq!(
        db.collection::<Document>("messages")
            .count_documents(mongodb::bson::doc! { "_meiliIndex": true })
            .await
            .unwrap(),
        10
    );

    // A LibreChat replica starting now reads our completion as done.
    let late = librechat(&db, 0).await;
    match late
        .run(|| async { panic!("must not run: our completion is fresh") })
        .await
        .unwrap()
    {
        Ended::Done(state) => assert!(written_by_us(&state), "{state:?}"),
        other => panic!("expected done, got {other:?}"),
    }

    // And our own fresh completion still satisfies the next `once`.
    let (code, out, _) = finish(target.spawn("once-2", &["once"]), Duration::from_secs(60)).await;
    assert_eq!(code, Some(0));
    assert!(
        done_by(&out).is_some_and(|owner| is_labelled(&owner, "once-1")),
        "{out}"
    );
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_librechat_lease_is_waited_for_and_status_names_it() {
    // The timeline of the job document is read from a change stream.
    if support::server::skip_without_change_streams().await {
        return;
    }
    let target = fleet("lc_live");
    let db = target.db().await;
    insert_messages(&db, 0, 10).await;
    let timeline = JobTimeline::start(&db, JOBS, JOB).await;

    // A LibreChat replica whose clock runs 400 ms ahead (inside the 500 ms
    // allowance) holds the lease, refreshing it, until the test has read
    // `status` twice (60 s at most: a hang detector).
    let lc = librechat(&db, 400).await;
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        lc.run(|| async move {
            let _ = held_tx.send(());
            let _ = tokio::time::timeout(Duration::from_secs(60), release_rx).await;
            true
        })
        .await
        .unwrap()
    });
    held_rx.await.unwrap();
    let mut once = target.spawn("once-1", &["once", "--wait-timeout", "60s"]);

    let status = target.run("status-1", &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("held by a LibreChat replica"), "{text}");
    assert!(text.contains("expires in"), "{text}");
    let json = target.run("status-2", &["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["holder"], "librechat", "{json}");
    assert_eq!(json["state"], "running", "{json}");
    let waiting = once.child.try_wait().unwrap();
    assert!(
        waiting.is_none(),
        "once waited for the live lease: {waiting:?}"
    );
    release_tx.send(()).unwrap();

    let (code, out, err) = finish(once, Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains("docs/s"),
        "once ran after LibreChat's run: {out}"
    );
    assert_eq!(
        holder.await.unwrap(),
        Ended::Ran {
            completed: true,
            lost: false
        },
        "LibreChat kept its lease to the end"
    );
    let (sections, violations) = sections(&timeline.stop());
    assert!(violations.is_empty(), "{violations:#?}");
    let sides: Vec<Side> = sections.iter().map(|s| s.side.clone()).collect();
    assert_eq!(
        sides,
        vec![Side::LibreChat, Side::Reconciler],
        "{sections:?}"
    );
    target.cleanup().await;
}
