//! The reader builds a batch only when the sender can enqueue it
//! (docs/design.md §4.6, Reader): while Meilisearch has no room — here
//! `sync.in_flight = 1` and the first task of each index held unsettled by
//! the `batch-enqueued` test hook — the reader has handed over the one
//! batch the sender took and holds no second, finished one waiting in the
//! queue (up to `sync.batch_bytes` of NDJSON at the defaults). Before, the
//! reader filled the queue's slot as soon as the sender took the batch
//! before it, so a run the budget held back kept one more batch than a run
//! it never held back. Once resumed, the run indexes everything exactly.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::chat_data::{seed, server_now, Env};
use support::cli::{output_of, wait_exit, Target};

/// Documents per batch: 200 messages make several batches.
const BATCH_DOCS: u64 = 20;

/// The batches the reader handed to the sender of `index`, from its debug log.
fn handed_batches(stderr: &str, index: &str) -> usize {
    stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["message"] == "batch handed to the sender" && event["index"] == index)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_reader_holds_no_finished_batch() {
    if support::skip::skip_without_fault_injection() {
        return;
    }
    let target = Target::new("reader_room")
        .set("RECONCILER__SYNC__BATCH_DOCS", &BATCH_DOCS.to_string())
        .set("RECONCILER__SYNC__IN_FLIGHT", "1")
        .set("RUST_LOG", "info,meili_reconciler::reconcile::sync=debug");
    let env = Env::for_target(&target).await;
    seed(&env, 200, 40).await;
    let messages_uid = format!("{}messages", target.prefix);

    let resume = tempfile::tempdir().unwrap();
    let resume_file = resume.path().join("resume");
    let mut run = target.spawn_with(
        "held-back",
        &["once"],
        &[
            ("RECONCILER_TEST_PAUSE_AFTER", "batch-enqueued"),
            ("RECONCILER_TEST_RESUME_FILE", resume_file.to_str().unwrap()),
        ],
    );
    // The messages' first task is enqueued and held: the sender has no room.
    let limit = support::timing::RUN_BOUND;
    let waited = std::time::Instant::now();
    while handed_batches(&run.stderr_so_far(), &messages_uid) == 0 {
        assert!(waited.elapsed() < limit, "no message batch handed over");
        assert!(run.child.try_wait().unwrap().is_none(), "exited early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.await_pause("batch-enqueued", limit).await;
    // An absence can only be watched for a while: the reader before this
    // change handed its second batch over within milliseconds of the
    // sender taking the first, with nothing else to wait for.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let handed = handed_batches(&run.stderr_so_far(), &messages_uid);
    assert_eq!(
        handed, 1,
        "with no room in Meilisearch the reader handed over {handed} message batches"
    );

    std::fs::write(&resume_file, b"").unwrap();
    let status = wait_exit(&mut run, support::timing::RUN_BOUND);
    let (out, err) = output_of(run);
    assert!(status.success(), "{status}: {out}{err}");
    assert!(
        handed_batches(&err, &messages_uid) > 1,
        "the rest was read once there was room"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    target.cleanup().await;
}
