//! `meili-reconciler run`, the sidecar beside every API replica: its four
//! HTTP endpoints, its periodic runs, and its clean hand-over on SIGTERM.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use mongodb::bson::{doc, oid::ObjectId, DateTime, Document};
use serde_json::Value;
use support::cli::{eventually, free_port, is_labelled, output_of, terminate, wait_exit, Target};
use support::seeder::{seed, SeedSpec};

async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => {
            let code = r.status().as_u16();
            (code, r.text().await.unwrap_or_default())
        }
        Err(_) => (0, String::new()),
    }
}

fn small_spec(messages: usize) -> SeedSpec {
    SeedSpec {
        messages,
        conversations: messages / 10,
        ..SeedSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_answers_health_ready_status_and_metrics() {
    let target = Target::new("run_http");
    let report = seed(&target.db().await, &small_spec(600)).await.unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let base = format!("http://{listen}");
    let target = target
        .set("RECONCILER__SERVE__LISTEN", &listen)
        .set("RECONCILER__SERVE__INTERVAL", "1h");
    let mut child = target.spawn("replica-http", &["run"]);

    // The first run completes, as /status shows.
    let status: Value = eventually(Duration::from_secs(60), "a completed first run", || async {
        let (code, body) = get(&format!("{base}/status")).await;
        let status: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && status["lastRun"]["outcome"] == "completed").then_some(status)
    })
    .await;
    assert!(
        is_labelled(status["replica"].as_str().unwrap(), "replica-http"),
        "{status}"
    );
    assert_eq!(status["role"], "idle");
    // Follow mode (the default): the owner keeps the lease and follows. On
    // a server without change streams (DocumentDB) `run` says so and
    // reconciles on its interval instead: its first run completed the lease.
    let status = if support::server::no_change_streams().await.is_none() {
        let status =
            support::follow::await_follow_state(&base, "following", Duration::from_secs(30)).await;
        assert_eq!(status["lease"]["state"], "following");
        assert_eq!(status["lease"]["owner"], status["replica"], "{status}");
        status
    } else {
        let status =
            support::follow::await_follow_state(&base, "unsupported", Duration::from_secs(30))
                .await;
        assert_eq!(status["lease"]["state"], "completed", "{status}");
        status
    };
    assert!(status["lease"]["epoch"].as_i64().unwrap() >= 1);
    assert!(status["nextRunInSecs"].as_u64().unwrap() > 3000, "{status}");
    let indexed: u64 = status["lastRun"]["summary"]["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["indexed"].as_u64().unwrap())
        .sum();
    let indexable = (report.messages.indexable + report.conversations.indexable) as u64;
    assert_eq!(indexed, indexable);
    // Where the time went: every phase, in seconds, and reading took some.
    let phases = &status["lastRun"]["summary"]["phases"];
    for phase in PHASES {
        let secs = phases[format!("{}Secs", camel(phase))].as_f64();
        assert!(secs.is_some_and(|s| s >= 0.0), "{phase}: {phases}");
    }
    let read_secs = phases["readSecs"].as_f64().unwrap();
    assert!(read_secs > 0.0, "indexing read MongoDB: {phases}");

    let (code, body) = get(&format!("{base}/healthz")).await;
    assert_eq!((code, body.contains("ok")), (200, true));
    let (code, body) = get(&format!("{base}/readyz")).await;
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        (ready["mongo"].as_str(), ready["meili"].as_str()),
        (Some("ok"), Some("ok"))
    );

    // /metrics is Prometheus text with the series docs/operations.md lists.
    let (code, text) = get(&format!("{base}/metrics")).await;
    assert_eq!(code, 200);
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    let mut values: HashMap<String, f64> = HashMap::new();
    let mut histogram_seen = false;
    for sample in &scrape.samples {
        let labels: Vec<String> = {
            let mut l: Vec<String> = sample
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            l.sort();
            l
        };
        let key = format!("{}{{{}}}", sample.metric, labels.join(","));
        match &sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => {
                values.insert(key, *v);
            }
            prometheus_parse::Value::Histogram(buckets)
                if sample.metric == "reconciler_batch_seconds" && !buckets.is_empty() =>
            {
                histogram_seen = true;
            }
            _ => {}
        }
    }
    let metric = |key: &str| {
        values
            .get(key)
            .copied()
            .unwrap_or_else(|| panic!("{key} missing from /metrics:\n{text}"))
    };
    assert_eq!(metric("reconciler_runs_total{outcome=completed}"), 1.0);
    assert_eq!(
        metric(&format!(
            "reconciler_documents_indexed_total{{index={}messages}}",
            target.prefix
        )),
        report.messages.indexable as f64
    );
    assert_eq!(
        metric(&format!(
            "reconciler_documents_indexed_total{{index={}convos}}",
            target.prefix
        )),
        report.conversations.indexable as f64
    );
    assert_eq!(metric("reconciler_lease_claims_total{}"), 1.0);
    for phase in PHASES {
        let ms = metric(&format!(
            "reconciler_sync_phase_milliseconds_total{{phase={phase}}}"
        ));
        let secs = phases[format!("{}Secs", camel(phase))].as_f64().unwrap();
        assert_eq!(
            ms,
            (secs * 1000.0).round(),
            "{phase}: the run's phases, counted"
        );
    }
    assert_eq!(
        metric("reconciler_unindexed_documents{collection=messages}"),
        0.0
    );
    assert!(metric("reconciler_seconds_since_last_success{}") < 3600.0);
    assert!(
        histogram_seen,
        "reconciler_batch_seconds histogram missing:\n{text}"
    );

    terminate(&child);
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(status.success(), "run exits 0 on SIGTERM: {status:?}");
    target.cleanup().await;
}

/// The phases of a run summary's `phases` and of the phase metric's label.
const PHASES: [&str; 8] = [
    "read",
    "build",
    "send",
    "meili_wait",
    "ack",
    "ack_waited",
    "reader_waited",
    "pipeline_waited",
];

/// `meili_wait` → `meiliWait`.
fn camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The metric families of docs/operations.md's table: (name, type, label values
/// listed in backticks in its labels column).
fn documented_metric_families() -> Vec<(String, String, Vec<String>)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .expect("docs/operations.md");
    let families: Vec<_> = readme
        .lines()
        .filter(|line| line.starts_with("| `reconciler_"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`').to_string();
            let kind = cells[2].to_string();
            let values = cells[3]
                .split('`')
                .skip(1)
                .step_by(2)
                .skip(1) // the label's name
                .map(str::to_string)
                .collect();
            (name, kind, values)
        })
        .collect();
    assert!(
        families.len() >= 10,
        "docs/operations.md's metrics table: {families:?}"
    );
    families
}

/// A replica that has not finished its first run (LibreChat holds a live
/// lease, so it waits) already answers every family of docs/operations.md's table
/// with `# HELP` and `# TYPE`, each known label value at 0.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_answer_every_family_before_the_first_run_finishes() {
    let target = Target::new("run_fresh_metrics");
    let db = target.db().await;
    let now = support::chat_data::server_now(&db).await;
    db.collection::<Document>("distributedJobs")
        .insert_one(doc! {
            "_id": "meili-index-sync",
            "status": "running",
            "owner": "5f0c4a2e-librechat-replica",
            "expiresAt": DateTime::from_millis(now.timestamp_millis() + 3_600_000),
            "updatedAt": now,
        })
        .await
        .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let target = target
        .set("RECONCILER__SERVE__LISTEN", &listen)
        .set("RECONCILER__SERVE__INTERVAL", "1h");
    let mut child = target.spawn("replica-fresh", &["run"]);

    let text = eventually(Duration::from_secs(30), "/metrics to answer", || async {
        let (code, body) = get(&format!("{base}/metrics")).await;
        (code == 200).then_some(body)
    })
    .await;
    let (_, status) = get(&format!("{base}/status")).await;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert!(
        status["lastRun"].is_null(),
        "the first run has not finished: {status}"
    );

    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text");
    let value = |metric: &str, label: Option<(&str, &str)>| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match &s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => *v,
                prometheus_parse::Value::Histogram(buckets) => {
                    buckets.iter().map(|b| b.count).fold(0.0, f64::max)
                }
                other => panic!("{metric}: unexpected {other:?}"),
            })
            .unwrap_or_else(|| panic!("{metric} {label:?} missing from /metrics:\n{text}"))
    };
    let indexes = [
        format!("{}messages", target.prefix),
        format!("{}convos", target.prefix),
    ];
    for (name, kind, values) in documented_metric_families() {
        assert!(
            text.lines().any(|l| l == format!("# TYPE {name} {kind}")),
            "# TYPE {name} {kind} missing:\n{text}"
        );
        assert!(
            scrape.docs.get(&name).is_some_and(|help| !help.is_empty()),
            "# HELP {name} missing:\n{text}"
        );
        let label = if name.starts_with("reconciler_documents_") {
            Some("index")
        } else if name == "reconciler_runs_total" {
            Some("outcome")
        } else if name == "reconciler_unindexed_documents" {
            Some("collection")
        } else if name == "reconciler_sync_phase_milliseconds_total" {
            Some("phase")
        } else if name == "reconciler_follow_events_total" {
            Some("op")
        } else if name.ends_with("stage_seconds") {
            Some("stage")
        } else {
            None
        };
        let values: Vec<String> = match label {
            Some("index") => indexes.to_vec(),
            Some(_) => values,
            None => vec![],
        };
        match label {
            Some(label) => {
                assert!(!values.is_empty(), "{name}: label values");
                for v in &values {
                    assert_eq!(value(&name, Some((label, v))), 0.0, "{name}{{{label}={v}}}");
                }
            }
            None if name == "reconciler_seconds_since_last_success" => {
                assert!(value(&name, None) >= 0.0);
            }
            None => assert_eq!(value(&name, None), 0.0, "{name}"),
        }
    }

    terminate(&child);
    assert!(wait_exit(&mut child, Duration::from_secs(30)).success());
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn periodic_run_picks_up_documents_inserted_after_the_first() {
    let target = Target::new("run_periodic");
    let db = target.db().await;
    let report = seed(&db, &small_spec(300)).await.unwrap();
    let target = target
        .set(
            "RECONCILER__SERVE__LISTEN",
            &format!("127.0.0.1:{}", free_port()),
        )
        .set("RECONCILER__SERVE__INTERVAL", "1s")
        // Interval runs only: the stream must not be what picks them up.
        .set("RECONCILER__SERVE__FOLLOW", "false");
    let mut child = target.spawn("replica-periodic", &["run"]);

    let first = report.messages.indexable as u64;
    eventually(
        Duration::from_secs(60),
        "the first run's documents",
        || async { (target.meili_count("messages").await == first).then_some(()) },
    )
    .await;

    // New messages arrive after the first run.
    let messages = db.collection::<Document>("messages");
    let now = DateTime::now();
    let fresh: Vec<Document> = (0..25)
        .map(|i| {
            doc! {
                "_id": ObjectId::new(),
                "messageId": format!("late-{i}"),
                "conversationId": "late-conversation",
                "user": "late-user",
                "sender": "User",
                "text": format!("arrived late {i}"),
                "isCreatedByUser": true,
                "createdAt": now,
                "updatedAt": now,
            }
        })
        .collect();
    messages.insert_many(fresh).await.unwrap();

    eventually(
        Duration::from_secs(60),
        "a later run to index the new messages",
        || async { (target.meili_count("messages").await == first + 25).then_some(()) },
    )
    .await;
    eventually(Duration::from_secs(10), "their flags", || async {
        let flagged = messages
            .count_documents(doc! { "messageId": { "$regex": "^late-" }, "_meiliIndex": true })
            .await
            .unwrap();
        (flagged == 25).then_some(())
    })
    .await;

    terminate(&child);
    assert!(wait_exit(&mut child, Duration::from_secs(30)).success());
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_releases_the_lease_and_another_replica_takes_over_within_a_poll() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    // Slow tasks keep the first owner busy long enough to be interrupted.
    standin.knobs().set_latency(300).await;
    let poll = support::timing::lease().poll_every;
    let target = Target::new("run_sigterm")
        .with_meili(&standin.host, &standin.key)
        .set("RECONCILER__SYNC__BATCH_DOCS", "50")
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        // A long ttl: only the release, not expiry, can explain a quick takeover.
        .set("RECONCILER__LEASE__TTL", "60s")
        .set("RECONCILER__LEASE__RENEW_EVERY", "5s")
        .set("RECONCILER__LEASE__SAFETY_MARGIN", "5s");
    seed(&target.db().await, &small_spec(2000)).await.unwrap();

    let a = target.clone().set(
        "RECONCILER__SERVE__LISTEN",
        &format!("127.0.0.1:{}", free_port()),
    );
    let mut owner = a.spawn("replica-a", &["run"]);
    eventually(
        Duration::from_secs(30),
        "replica-a to own a running lease",
        || async {
            let lease = target.lease().await?;
            (lease
                .get_str("owner")
                .is_ok_and(|o| is_labelled(o, "replica-a"))
                && lease.get_str("status").ok() == Some("running"))
            .then_some(())
        },
    )
    .await;
    let b = target.clone().set(
        "RECONCILER__SERVE__LISTEN",
        &format!("127.0.0.1:{}", free_port()),
    );
    let follower = b.spawn("replica-b", &["run"]);
    eventually(
        Duration::from_secs(30),
        "replica-b to find the lease held and wait",
        || async {
            follower
                .stderr_so_far()
                .contains("waiting: another replica holds the job")
                .then_some(())
        },
    )
    .await;
    let lease = target.lease().await.unwrap();
    assert!(
        is_labelled(lease.get_str("owner").unwrap(), "replica-a"),
        "no takeover of a live lease: {lease}"
    );
    let epoch_a = lease.get_i64("epoch").unwrap();

    terminate(&owner);
    let status = wait_exit(&mut owner, Duration::from_secs(30));
    assert!(
        status.success(),
        "the owner exits 0 after SIGTERM: {status:?}"
    );

    let lease = eventually(Duration::from_secs(10), "replica-b to claim", || async {
        let lease = target.lease().await?;
        (lease
            .get_str("owner")
            .is_ok_and(|o| is_labelled(o, "replica-b")))
        .then_some(lease)
    })
    .await;
    assert!(lease.get_i64("epoch").unwrap() > epoch_a);
    let released = lease
        .get_datetime("releasedAt")
        .expect("the owner released its lease");
    let claimed = lease.get_datetime("claimedAt").unwrap();
    let gap = claimed.timestamp_millis() - released.timestamp_millis();
    // Within one poll (jittered ≤ poll) plus a round trip, which may take a
    // headroom (support::timing) on a loaded machine — far from the 60 s
    // ttl. A claim carries its poll's server time, read just before the
    // document: a poll whose clock read came before the release and whose
    // document read came after it claims "before" the release by up to that
    // round trip.
    let round_trip = support::timing::headroom().as_millis() as i64;
    assert!(
        (-round_trip..=poll.as_millis() as i64 + round_trip).contains(&gap),
        "claimed {gap} ms after the release; poll is {poll:?}"
    );

    terminate(&follower);
    let (_, stderr) = output_of(follower);
    assert!(
        stderr.contains("replica-b"),
        "every log line carries the replica id"
    );
    target.cleanup().await;
}
