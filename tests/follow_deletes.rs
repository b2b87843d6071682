//! Deletes in follow mode, made with plain driver calls (a TTL monitor, an
//! admin script, a retention job: no LibreChat hook tells Meilisearch), with
//! real `run` processes, and how long each takes to leave Meilisearch
//! (docs/design.md §4.12):
//!
//! - with pre-images, through the change stream (how soon is measured, not
//!   asserted: docs/benchmarks.md);
//! - without them (LibreChat's default), within `follow.orphan_check_every`
//!   plus one id-set comparison — and across a SIGKILL of the owner: the
//!   comparison it owed is recorded in the lease before its resume token
//!   moves past the deletes, so the replica that takes over makes it at
//!   once (within `lease.ttl` + a poll + one comparison), not at its next
//!   periodic reconciliation (an hour away here).
//!
//! `status --json` and `/status` say which regime each collection is in.
//! Needs change streams: on a server without them (DocumentDB) the tests say
//! so and return.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::chat_data::{seed, server_now, Env};
use support::cli::{eventually, free_port, output_of, terminate, wait_exit, Replica, Target};
use support::follow::*;

/// The id-set comparison's period where deletes have no pre-images: longer than
/// what the takeover may take, so only an owed comparison can explain deletes
/// gone that soon after it.
const ORPHAN_CHECK_EVERY: Duration = Duration::from_secs(20);

fn fleet(tag: &str) -> Target {
    Target::new(tag)
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set(
            "RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY",
            &format!("{}s", ORPHAN_CHECK_EVERY.as_secs()),
        )
}

fn replica(target: &Target, owner: &str) -> (Replica, String) {
    replica_with(target, owner, &[])
}

fn replica_with(target: &Target, owner: &str, env: &[(&str, &str)]) -> (Replica, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut env = env.to_vec();
    env.push(("RECONCILER__SERVE__LISTEN", listen.as_str()));
    (
        target.spawn_with(owner, &["run"], &env),
        format!("http://{listen}"),
    )
}

fn status_json(target: &Target) -> Value {
    let out = target.run("op", &["status", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("status --json: {e}: {out:?}"))
}

fn regime(status: &Value, collection: &str) -> Value {
    status["collections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["collection"] == collection)
        .map(|c| c["deletes"].clone())
        .unwrap_or(Value::Null)
}

fn message_ids(from: usize, n: usize) -> Vec<String> {
    // Plain indexable messages of the seed (`i % 20 == 0`).
    (from..from + n)
        .map(|k| format!("msg-{}", 20 * k))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_with_pre_images_leave_meilisearch_through_the_change_stream() {
    let test = "deletes_with_pre_images_leave_meilisearch_through_the_change_stream";
    // The id-set comparison runs once, when following begins (before the
    // deletes), and not again for an hour: only the pre-images can explain
    // deletes gone within the test.
    let target = fleet("fdel_pre")
        .set("RECONCILER__FOLLOW__PRE_IMAGES", "enable")
        .set("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "1h");
    let env = Env::for_target(&target).await;
    if !serves_change_streams(&env.db, test).await {
        return;
    }
    seed(&env, 1_000, 20).await;
    let (mut a, base) = replica(&target, "follower-a");
    let status = await_follow_state(&base, "following", Duration::from_secs(60)).await;
    assert_eq!(
        status["follow"]["deletes"]["messages"], "preImages",
        "{status}"
    );
    assert_eq!(regime(&status_json(&target), "messages"), "preImages");

    let ids = message_ids(0, 50);
    let deleted_before = applied(&base, "delete").await;
    let at = delete_messages(&env.db, &ids).await;
    let delays = await_gone(&target, &ids, &at, support::timing::RUN_BOUND).await;
    let (p50, max) = p50_max(&delays);
    eprintln!("50 deletes with pre-images: gone from Meilisearch p50 {p50:.3} s, max {max:.3} s");
    assert!(
        applied(&base, "delete").await >= deleted_before + 50,
        "the follower applied the 50 deletes from the stream"
    );

    await_in_step(&env, Duration::from_secs(20)).await;
    terminate(&a);
    assert!(wait_exit(&mut a, Duration::from_secs(30)).success());
    let (_, log) = output_of(a);
    assert!(!log.contains("a delete without a pre-image"), "{log}");
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_without_pre_images_leave_within_the_bound_even_when_the_owner_is_killed() {
    let test = "deletes_without_pre_images_leave_within_the_bound_even_when_the_owner_is_killed";
    let target = fleet("fdel_kill");
    let env = Env::for_target(&target).await;
    if !serves_change_streams(&env.db, test).await {
        return;
    }
    seed(&env, 1_000, 20).await;
    let (mut a, a_base) = replica(&target, "follower-a");
    let status = await_follow_state(&a_base, "following", Duration::from_secs(60)).await;
    assert_eq!(
        status["follow"]["deletes"]["messages"], "idComparison",
        "{status}"
    );
    assert_eq!(regime(&status_json(&target), "messages"), "idComparison");
    // The replica that takes over compares on its own schedule only once an
    // hour: only the comparison the killed owner recorded as owed can
    // explain the deletes leaving after the takeover.
    let (b, b_base) = replica_with(
        &target,
        "follower-b",
        &[("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "1h")],
    );
    await_follow_state(&b_base, "waiting", Duration::from_secs(20)).await;

    // The documented bound without a takeover: orphan_check_every + one
    // comparison (the first comparison runs at once, later ones wait).
    let first = message_ids(0, 25);
    let at = delete_messages(&env.db, &first).await;
    let bound = ORPHAN_CHECK_EVERY + Duration::from_secs(10);
    let delays = await_gone(&target, &first, &at, bound).await;
    let (p50, max) = p50_max(&delays);
    eprintln!(
        "25 deletes without pre-images: gone p50 {p50:.3} s, max {max:.3} s (bound {} s + a comparison)",
        ORPHAN_CHECK_EVERY.as_secs()
    );

    // A comparison just ran: the next deletes wait for the period. The
    // owner applies them (its token moves past them) and is killed.
    let second = message_ids(25, 25);
    let deleted_before = applied(&a_base, "delete").await;
    let at = delete_messages(&env.db, &second).await;
    eventually(
        Duration::from_secs(60),
        "follower-a to apply the deletes",
        || async { (applied(&a_base, "delete").await >= deleted_before + 25).then_some(()) },
    )
    .await;
    let owed = eventually(
        Duration::from_secs(60),
        "the owed comparison in the lease",
        || async {
            let lease = target.lease().await?;
            lease
                .get_document("followOrphanChecks")
                .ok()?
                .get_datetime("messages")
                .ok()
                .copied()
        },
    )
    .await;
    let still_there = {
        let mut n = 0;
        for id in &second {
            n += usize::from(
                meili_doc(&target, meili_reconciler::mongo::Collection::Messages, id)
                    .await
                    .is_some(),
            );
        }
        n
    };
    let owed_in_status = status_json(&target)["orphanChecksOwed"].clone();
    a.child.kill().unwrap();
    let _ = a.child.wait();
    let killed = std::time::Instant::now();
    assert!(
        still_there > 0,
        "some deletes were still owed when the owner died"
    );
    assert!(
        owed_in_status.to_string().contains("messages"),
        "status shows the owed comparison: {owed_in_status}"
    );
    eprintln!("owner killed with {still_there} of 25 deletes owed (since {owed})");

    // lease.ttl 2 s + poll + resuming + one comparison: how long is
    // printed; that they leave at all is the owed comparison (follower-b's
    // own period is an hour).
    let delays = await_gone(
        &target,
        &second,
        &vec![killed; second.len()],
        support::timing::RUN_BOUND,
    )
    .await;
    let (_, after_kill) = p50_max(&delays);
    let (_, since_delete) = p50_max(&at.iter().map(|t| t.elapsed()).collect::<Vec<_>>());
    eprintln!(
        "after the SIGKILL: every delete gone {after_kill:.3} s after the kill ({since_delete:.3} s after the first delete; ttl 2 s)"
    );
    await_follow_state(&b_base, "following", Duration::from_secs(30)).await;
    eventually(Duration::from_secs(60), "the debt cleared", || async {
        let lease = target.lease().await?;
        lease
            .get_document("followOrphanChecks")
            .map_or(true, |owed| !owed.contains_key("messages"))
            .then_some(())
    })
    .await;
    await_in_step(&env, Duration::from_secs(20)).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    let mut b = b;
    terminate(&b);
    assert!(wait_exit(&mut b, Duration::from_secs(30)).success());
    let (_, log) = output_of(b);
    assert!(
        log.contains("resuming the change stream from the saved token"),
        "{log}"
    );
    assert!(log.contains("an id-set comparison is owed"), "{log}");
    assert_eq!(
        log.matches("reconciliation finished").count(),
        0,
        "no reconciliation did it: {log}"
    );
    target.cleanup().await;
}
