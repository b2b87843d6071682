//! The head start (docs/design.md §4.6, Head start): in the steady state a
//! small backlog is sent while the plan counts, and acknowledged only once
//! the counts are taken. With the counts held back (test hook
//! `head-start-counting`), the new messages reach Meilisearch and the
//! acknowledger waits with them in hand, none flagged in MongoDB. Resumed,
//! the run finds no drift (the counts saw the flags as the run found them)
//! and ends in step, document by document.

use crate::support;

use std::collections::BTreeSet;

use meili_reconciler::mongo::Collection;
use serde_json::Value;
use support::chat_data::{expected, is_marked_indexed, message, seed, server_now, Env};
use support::cli::{eventually, output_of, wait_exit, Target};

/// JSON log events of `stderr` with this message (and index, when given).
fn events<'a>(stderr: &'a str, message: &'a str, index: &'a str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["message"] == message && e["index"] == index)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_backlog_is_sent_while_the_plan_counts() {
    if support::skip::skip_without_fault_injection() {
        return;
    }
    let target = Target::new("head_start")
        .set("RUST_LOG", "info,meili_reconciler::reconcile=debug")
        .set("RECONCILER__LEASE__REUSE_COMPLETION_FOR", "0s");
    let env = Env::for_target(&target).await;
    seed(&env, 200, 40).await;
    let first = target.run("first", &["once"]);
    assert!(first.status.success(), "{first:?}");
    let messages_uid = format!("{}messages", target.prefix);

    // The backlog: new messages, unflagged and searchable, as LibreChat
    // leaves them when its save hook could not reach Meilisearch.
    let now = server_now(&env.db).await;
    let backlog: Vec<_> = (1000..1040)
        .map(|i| message(i, now))
        .filter(|d| !is_marked_indexed(d) && expected(Collection::Messages, d, now).is_some())
        .collect();
    let backlog_ids: BTreeSet<String> = backlog
        .iter()
        .map(|d| expected(Collection::Messages, d, now).unwrap().0)
        .collect();
    assert!(
        backlog_ids.len() >= 20,
        "a backlog of {}",
        backlog_ids.len()
    );
    env.insert(Collection::Messages, backlog).await;

    let resume = tempfile::tempdir().unwrap();
    let resume_file = resume.path().join("resume");
    let mut run = target.spawn_with(
        "head-start",
        &["once"],
        &[
            ("RECONCILER_TEST_PAUSE_AFTER", "head-start-counting"),
            ("RECONCILER_TEST_RESUME_FILE", resume_file.to_str().unwrap()),
        ],
    );
    let limit = support::timing::RUN_BOUND;
    run.await_pause("head-start-counting", limit).await;
    // The counts are held back; the head start goes on until its first
    // settled batch waits at the acknowledger.
    eventually(limit, "the acknowledger to wait for the counts", || {
        let waiting = !events(
            &run.stderr_so_far(),
            "acknowledgement waits for the plan's counts",
            &messages_uid,
        )
        .is_empty();
        async move { waiting.then_some(()) }
    })
    .await;
    let in_meili = env.meili_docs(Collection::Messages).await;
    let missing: Vec<_> = backlog_ids
        .iter()
        .filter(|id| !in_meili.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "sent while the plan counted, yet not in Meilisearch: {missing:?}"
    );
    let flagged: Vec<String> = env
        .mongo_docs(Collection::Messages)
        .await
        .iter()
        .filter_map(|d| expected(Collection::Messages, d, now).filter(|_| is_marked_indexed(d)))
        .map(|(id, _)| id)
        .filter(|id| backlog_ids.contains(id))
        .collect();
    assert!(
        flagged.is_empty(),
        "flagged before the plan's counts were taken: {flagged:?}"
    );

    std::fs::write(&resume_file, b"").unwrap();
    let status = wait_exit(&mut run, support::timing::RUN_BOUND);
    let (out, err) = output_of(run);
    assert!(status.success(), "{status}: {out}{err}");
    let sent = events(
        &err,
        "head start: sending the backlog while the plan counts",
        &messages_uid,
    );
    assert_eq!(
        sent.first().map(|e| e["docs"].as_u64()),
        Some(Some(backlog_ids.len() as u64)),
        "the head start sent the whole backlog"
    );
    let drift = events(
        &err,
        "the id sets are compared after indexing (the index's count differs from MongoDB's, or forced)",
        &messages_uid,
    );
    assert!(
        drift.is_empty(),
        "the counts saw a write of the run: {drift:?}"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    target.cleanup().await;
}
