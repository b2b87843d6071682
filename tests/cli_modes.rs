//! The operator commands as subprocesses against the test servers: `plan
//! --json`, `status [--json]`, `reindex`, plan only, `MEILI_NO_SYNC` (LibreChat's
//! switch, which must not stop this service), the SDK's 404 warnings kept
//! out of `RUST_LOG=info`, and an unreachable Meilisearch (exit 4, named
//! without its key).

use crate::support;

use std::time::{Duration, Instant};

use mongodb::bson::{doc, Document};
use serde_json::Value;
use support::chat_data::{self, Env};
use support::cli::{is_labelled, Target};
use support::seeder::{seed, SeedSpec};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn all(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_status_and_reindex_from_the_command_line() {
    let target = Target::new("cli_modes");
    let db = target.db().await;
    let report = seed(
        &db,
        &SeedSpec {
            messages: 800,
            conversations: 80,
            ..SeedSpec::default()
        },
    )
    .await
    .unwrap();

    // status before any run
    let out = target.run("op", &["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let status: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(status["state"], "never_run");

    // plan --json: what would happen, machine-readable
    let out = target.run("op", &["plan", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("plan --json is JSON");
    let messages = &plan["indexes"][0];
    assert_eq!(messages["indexUid"], format!("{}messages", target.prefix));
    assert_eq!(messages["exists"], false);
    assert_eq!(messages["rebuild"]["reason"], "indexMissing");
    assert_eq!(
        messages["documentsToIndex"],
        report.messages.indexable as u64
    );
    assert_eq!(plan["nothingToDo"], false);
    assert!(target.lease().await.is_none(), "plan takes no lease");

    // sync.plan_only: `once` only plans
    let out = target
        .clone()
        .set("RECONCILER__SYNC__PLAN_ONLY", "true")
        .run("op", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(stdout(&out).contains("would index"), "{}", all(&out));
    assert_eq!(target.meili_count("messages").await, 0, "nothing written");
    assert!(target.lease().await.is_none());

    // once, then status shows the completion and its summary
    let out = target.run("owner-1", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let out = target.run("op", &["status", "--json"]);
    let status: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(status["state"], "completed");
    assert!(
        is_labelled(status["owner"].as_str().unwrap(), "owner-1"),
        "{status}"
    );
    assert_eq!(status["epoch"], 1);
    assert!(status["summary"]["collections"].is_array(), "{status}");
    // The stored summary says where the time went; reading took some.
    let phases = &status["summary"]["phases"];
    for key in [
        "readSecs",
        "buildSecs",
        "sendSecs",
        "meiliWaitSecs",
        "ackSecs",
        "ackWaitedSecs",
        "readerWaitedSecs",
        "pipelineWaitedSecs",
    ] {
        assert!(
            phases[key].as_f64().is_some_and(|s| s >= 0.0),
            "{key}: {status}"
        );
    }
    assert!(phases["readSecs"].as_f64().unwrap() > 0.0, "{status}");
    let out = target.run("op", &["status"]);
    let human = stdout(&out);
    assert!(
        human.contains("completed") && human.contains("owner-1"),
        "{human}"
    );

    // reindex one index without downtime: same documents, no leftover index
    let out = target.run("owner-2", &["reindex", "--index", "messages"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert_eq!(
        target.meili_count("messages").await,
        report.messages.indexable as u64
    );
    let leftover = target
        .meili_get(&format!("/indexes/{}messages_reindex", target.prefix))
        .await;
    assert_eq!(leftover["code"], "index_not_found", "{leftover}");
    let flagged = db
        .collection::<Document>("messages")
        .count_documents(doc! { "_meiliIndex": true })
        .await
        .unwrap();
    assert_eq!(flagged, report.messages.indexable as u64);
    let lease = target.lease().await.unwrap();
    assert!(
        is_labelled(lease.get_str("owner").unwrap(), "owner-2"),
        "{lease}"
    );
    assert_eq!(
        lease.get_i64("epoch").unwrap(),
        2,
        "reindex ran under the lease"
    );
    target.cleanup().await;
}

/// Operators beside this service set LibreChat's `MEILI_NO_SYNC=true` in the
/// shared `.env`: `once` must still index (every indexable document in
/// Meilisearch with its exact projection, and flagged), and say once, at
/// info level, that it saw LibreChat's switch.
#[tokio::test(flavor = "multi_thread")]
async fn meili_no_sync_true_still_indexes_and_is_logged() {
    let env = Env::new("cli_no_sync").await;
    let now = chat_data::seed(&env, 300, 40).await;
    let mut target = Target::new("cli_no_sync");
    target.database = env.db.name().to_string();
    target.prefix = env.opts.index_prefix.clone();

    let out = target
        .clone()
        .set("MEILI_NO_SYNC", "true")
        .run("owner-1", &["once"]);
    let text = all(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    env.assert_in_step(now, &[]).await;
    let lease = target.lease().await.expect("a real run takes the lease");
    assert_eq!(lease.get_str("status").unwrap(), "completed", "{lease}");

    let seen: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| {
            line["message"]
                .as_str()
                .is_some_and(|m| m.contains("MEILI_NO_SYNC=true"))
        })
        .collect();
    assert_eq!(seen.len(), 1, "logged once:\n{text}");
    assert_eq!(seen[0]["level"], "INFO", "{}", seen[0]);
    assert!(
        seen[0]["message"]
            .as_str()
            .unwrap()
            .contains("LibreChat's in-process sync is off"),
        "{}",
        seen[0]
    );
    env.cleanup().await;
}

/// Looking up an index that does not exist yet is normal for us, but the
/// Meilisearch SDK logs every 404 as a warning: with `RUST_LOG=info` (what
/// operators set) those lines stay out, and naming the SDK in `RUST_LOG`
/// brings them back.
#[tokio::test(flavor = "multi_thread")]
async fn rust_log_info_keeps_the_sdks_404_warnings_out_of_the_log() {
    let env = Env::new("cli_sdk_log").await;
    chat_data::seed(&env, 20, 4).await;
    let mut target = Target::new("cli_sdk_log");
    target.database = env.db.name().to_string();
    let sdk_lines = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|line| line.contains("meilisearch_sdk"))
            .count()
    };

    // Fresh indexes: every lookup of them answers 404 first.
    let quiet = target.clone().set("RUST_LOG", "info");
    let quiet = Target {
        prefix: format!("{}quiet_", env.opts.index_prefix),
        ..quiet
    };
    let out = quiet.run("owner-1", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert_eq!(sdk_lines(&out), 0, "{}", all(&out));

    let loud = target
        .set("RUST_LOG", "info,meilisearch_sdk=warn")
        .set("RECONCILER__LEASE__REUSE_COMPLETION_FOR", "0s");
    let loud = Target {
        prefix: format!("{}loud_", env.opts.index_prefix),
        ..loud
    };
    let out = loud.run("owner-1", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(
        sdk_lines(&out) > 0,
        "the SDK's warnings when asked for:\n{}",
        all(&out)
    );
    for target in [&quiet, &loud] {
        Env::for_target(target).await.cleanup().await;
    }
    env.cleanup().await;
}

/// `plan` against an unreachable Meilisearch: exit 4 after one attempt (not
/// the start-up retries, which back off for 7.5 s and more), one line naming
/// it and the cause, without its key.
#[test]
fn unreachable_meilisearch_exits_4_naming_it_without_the_key() {
    let connect_timeout = Duration::from_secs(1);
    let target = Target::new("cli_meili_down")
        .with_meili("http://127.0.0.1:1", "key-do-not-print")
        .set("RECONCILER__MONGO__CONNECT_TIMEOUT", "1s");
    let started = Instant::now();
    let out = target.run("op", &["plan"]);
    let elapsed = started.elapsed();
    let text = all(&out);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        elapsed < connect_timeout * 3,
        "took {elapsed:?} with mongo.connect_timeout = {connect_timeout:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr:\n{stderr}");
    assert!(
        lines[0].contains("Meilisearch at http://127.0.0.1:1")
            && lines[0].contains("connection refused"),
        "{text}"
    );
    assert!(!text.contains("key-do-not-print"), "{text}");
}

/// `lease.write_concern` below majority is allowed (two data nodes and an
/// arbiter) but said out loud at start: a failover can then yield two owners.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_write_concern_below_majority_is_warned_about() {
    let warning = "lease.write_concern is not \\\"majority\\\"";
    let target = Target::new("cli_wc");
    let out = target.run("op", &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(!all(&out).contains(warning), "{}", all(&out));

    let weak = target.clone().set("RECONCILER__LEASE__WRITE_CONCERN", "1");
    let out = weak.run("op", &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let text = all(&out);
    assert!(text.contains(warning), "{text}");
    assert!(text.contains("two replicas own the same epoch"), "{text}");
    target.cleanup().await;
}

/// A configuration written for the old task-count bound (`sync.in_flight =
/// 2`, the old default) still runs, and says it keeps Meilisearch from
/// merging tasks; the defaults say nothing.
#[tokio::test(flavor = "multi_thread")]
async fn an_in_flight_bound_below_the_byte_budget_is_warned_about() {
    let warning = "sync.in_flight caps the Meilisearch tasks enqueued";
    let target = Target::new("cli_in_flight");
    let out = target.run("op", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(!all(&out).contains(warning), "{}", all(&out));

    let old = target.clone().set("RECONCILER__SYNC__IN_FLIGHT", "2");
    let out = old.run("op", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let text = all(&out);
    assert!(text.contains(warning), "{text}");
    assert!(text.contains("remove sync.in_flight"), "{text}");
    target.cleanup().await;
}
