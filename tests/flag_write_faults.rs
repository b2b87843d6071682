//! Flag writes survive the faults of a replica set (docs/design.md §3.4):
//! they are multi-document updates the driver does not retry, and idempotent,
//! so a write-concern error (applied, unconfirmed), a step-down or a dropped
//! connection makes us send them again within the lease instead of failing
//! the run. Faults come from the server itself (`failCommand`, scoped by
//! `appName` to the `once` under test).

use crate::support;

use std::time::Duration;

use rand::Rng;
use support::chat_data::{indexed, seed, server_now, Env};
use support::cli::Target;
use support::faults::{monitored_client, times, uri_with_app, FailCommand};
use support::unique_name;

fn output(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_concern_error_on_the_first_flag_update_of_a_rebuild_is_retried() {
    let app = unique_name("flags_first");
    let Some(faults) = FailCommand::new(&app).await else {
        return;
    };
    // No renewal within the run (about a second): a renewal is an `update`
    // too, and could take the faults meant for the flag writes.
    let target = Target::new("flags_first")
        .set("MONGO_URI", &uri_with_app(&app))
        .set("RECONCILER__LEASE__TTL", "120s")
        .set("RECONCILER__LEASE__RENEW_EVERY", "60s");
    let env = Env::for_target(&target).await;
    seed(&env, 300, 30).await;
    // Flagged as indexed, but the indexes do not exist: the run rebuilds, and
    // its first flag update is the rebuild's flag reset.
    for name in ["messages", "conversations"] {
        env.db
            .collection::<mongodb::bson::Document>(name)
            .update_many(
                mongodb::bson::doc! {},
                mongodb::bson::doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } },
            )
            .await
            .unwrap();
    }
    // The first `update` commands of the run (flag writes) are applied and
    // answered with a write-concern error.
    faults.write_concern_error(&["update"], times(2)).await;
    let out = target.run("once-wce", &["once", "--force"]);
    faults.off().await;
    assert_eq!(out.status.code(), Some(0), "{}", output(&out));
    let log = output(&out);
    assert!(
        log.contains("transient MongoDB error; the write is idempotent, sending it again"),
        "the flag write was retried: {log}"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_write_concern_errors_on_flag_updates_ends_exact() {
    let app = unique_name("flags_chaos");
    let Some(faults) = FailCommand::new(&app).await else {
        return;
    };
    // The engine itself (no lease: renewals share the `update` command, and
    // their own faults are lease_replica_set's business) on a client whose
    // every `update` may fail; the test's own reads and writes use another.
    let meili = support::meili();
    let checker = Env::on(support::mongo_uri(), &meili.host, &meili.key, "flags_chaos").await;
    let (faulty, log) = monitored_client(&app, true, None).await;
    let env = Env {
        db: faulty.database(checker.db.name()),
        meili: checker.meili.clone(),
        opts: checker.opts.clone(),
    };
    seed(&checker, 3_000, 200).await;
    let mut opts = env.opts.clone();
    opts.batch_docs = 100;
    opts.force = true;

    // While the run goes on, after each `update` it sends, with probability
    // 1/5 one of the next ones is applied and answered with a write-concern
    // error.
    let stop = tokio_util::sync::CancellationToken::new();
    let chaos = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut seen, mut armed) = (0, 0);
            while !stop.is_cancelled() {
                let now = log
                    .all()
                    .iter()
                    .filter(|s| s.name == "update" && s.reply.is_some())
                    .count();
                if (seen..now).any(|_| rand::rng().random_ratio(1, 5)) {
                    faults.write_concern_error(&["update"], times(1)).await;
                    armed += 1;
                }
                seen = now;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            faults.off().await;
            armed
        })
    };
    let retries_before = retries_so_far();
    let summary = env.run_with(&opts).await;
    stop.cancel();
    let armed = chaos.await.unwrap();
    let summary = summary.expect("the run ends well despite the faults");
    assert!(indexed(&summary) > 0);
    let retried = retries_so_far() - retries_before;
    eprintln!("{armed} faults armed, {retried} flag writes sent again");
    assert!(retried >= 1, "flag writes were retried ({retried} times)");
    checker
        .assert_in_step(server_now(&checker.db).await, &[])
        .await;
    checker.cleanup().await;
}

/// Flag writes sent again so far in this process (the metric's counter).
fn retries_so_far() -> u64 {
    meili_reconciler::flag_retry::retries()
}

/// A flag write the server stops for taking too long (code 50
/// `MaxTimeMSExpired`, as DocumentDB-based servers answer a statement past
/// their 10 s limit) is sent again in halves, and the run ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_write_the_server_stops_for_taking_too_long_is_sent_again_in_halves() {
    let app = unique_name("flags_too_long");
    let Some(faults) = FailCommand::new(&app).await else {
        return;
    };
    let meili = support::meili();
    let checker = Env::on(
        support::mongo_uri(),
        &meili.host,
        &meili.key,
        "flags_too_long",
    )
    .await;
    let (faulty, log) = monitored_client(&app, true, None).await;
    let env = Env {
        db: faulty.database(checker.db.name()),
        meili: checker.meili.clone(),
        opts: checker.opts.clone(),
    };
    seed(&checker, 300, 30).await;
    checker.run().await.expect("the first run");
    // A backlog of new messages, never indexed: the next run's only flag
    // writes are its acknowledgements, in commands of 1,000 statements.
    let now = server_now(&checker.db).await;
    let backlog: Vec<_> = (0..2_500)
        .map(|n| support::follow::new_message("too-long", n, now))
        .collect();
    checker
        .insert(meili_reconciler::mongo::Collection::Messages, backlog)
        .await;
    // The first of them is stopped.
    faults.error_code(&["update"], 50, times(1)).await;
    let summary = env.run().await;
    faults.off().await;
    let summary = summary.expect("the run ends well despite the stopped commands");
    assert!(indexed(&summary) > 0);
    // The stopped command's statements are sent again as its two halves
    // (matched by their `_id`s: with `sync.ack_writers` above 1 the other
    // writer's commands come in between).
    let sent: Vec<(Vec<String>, bool)> = log
        .all()
        .iter()
        .filter(|s| s.name == "update" && s.collection() == Some("messages"))
        .filter_map(|s| {
            let ids = s
                .command
                .get_array("updates")
                .ok()?
                .iter()
                .map(|statement| {
                    let q = statement
                        .as_document()
                        .and_then(|u| u.get_document("q").ok());
                    format!("{:?}", q.and_then(|q| q.get("_id")))
                })
                .collect();
            let stopped = matches!(&s.reply, Some(Err(_)))
                || matches!(&s.reply, Some(Ok(r)) if r.get_i32("code") == Ok(50));
            Some((ids, stopped))
        })
        .collect();
    let sizes: Vec<(usize, bool)> = sent.iter().map(|(ids, s)| (ids.len(), *s)).collect();
    let at = sent
        .iter()
        .position(|(_, stopped)| *stopped)
        .unwrap_or_else(|| panic!("no command was stopped: {sizes:?}"));
    let whole = &sent[at].0;
    assert!(whole.len() > 1, "{sizes:?}");
    let (first, second) = whole.split_at(whole.len() / 2);
    for half in [first, second] {
        assert!(
            sent[at + 1..]
                .iter()
                .any(|(ids, stopped)| !stopped && ids.as_slice() == half),
            "the stopped command of {} statements was sent again as halves of {} and {}: {sizes:?}",
            whole.len(),
            first.len(),
            second.len()
        );
    }
    checker
        .assert_in_step(server_now(&checker.db).await, &[])
        .await;
    checker.cleanup().await;
}
