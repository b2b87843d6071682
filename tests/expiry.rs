//! Expiry is a delete (docs/design.md §4.4, §4.12): LibreChat's retention
//! gives a chat an `expiredAt`, and MongoDB's TTL monitor deletes it some
//! time after that passes, without hooks. A document must leave Meilisearch
//! when its `expiredAt` passes — at the next run in interval mode, within a
//! few seconds in follow mode (the owner knows the next expiry and wakes up
//! for it) — with LibreChat's removal markers, never only when the TTL
//! monitor deletes it; in follow mode whatever the rate of expiries and
//! however long a sweep lasts (what expires while one runs is swept right
//! after it). Real processes; the interval-mode tests run on any MongoDB,
//! the follow-mode ones need change streams (skipped on DocumentDB, saying
//! so).

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Bson, DateTime, Document};
use support::chat_data::{seed, server_now, Env};
use support::cli::{eventually, free_port, output_of, terminate, wait_exit, Replica, Target};
use support::follow::*;

/// How soon after its `expiredAt` a document must have left Meilisearch in
/// follow mode, in these tests: seconds, with room for the slowest test
/// servers (a busy Meilisearch takes seconds for any deletion task, the
/// stand-in MongoDB seconds for a burst's markers). What it catches is a
/// document left until the next reconciliation (an hour here); how soon
/// documents go is measured by `scripts/bench-expiry`.
const WITHIN: Duration = Duration::from_secs(20);

/// LibreChat's retention on a saved chat: `expiredAt` set (with
/// `timestamps: false`: no new version, the flag left as it is) on
/// messages `msg-<i>`. Returns their ids.
async fn expire_messages_at(env: &Env, indexes: &[usize], at: DateTime) -> Vec<String> {
    let messages = env.db.collection::<Document>("messages");
    let mut ids = Vec::new();
    for i in indexes {
        let id = format!("msg-{i}");
        let set = messages
            .update_one(
                doc! { "messageId": &id },
                doc! { "$set": { "isTemporary": false, "expiredAt": at } },
            )
            .await
            .unwrap();
        assert_eq!(set.matched_count, 1);
        ids.push(id);
    }
    ids
}

/// The documents `ids` (by primary key) carry LibreChat's removal markers
/// and are still in MongoDB (the TTL monitor is not what removed them).
async fn assert_marked_removed(env: &Env, collection: Collection, ids: &[String]) {
    let docs: Vec<Document> = env
        .db
        .collection::<Document>(collection.name())
        .find(doc! { collection.primary_key(): { "$in": ids } })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        docs.len(),
        ids.len(),
        "every expired document is still in MongoDB"
    );
    for d in &docs {
        assert!(
            d.get("_meiliIndex").is_none() && d.get_i32("_meiliCleanupVersion") == Ok(1),
            "LibreChat's removal markers: {d}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_document_leaves_meilisearch_at_the_next_run_with_librechat_s_markers() {
    let target = Target::new("expiry_run").set("RECONCILER__LEASE__REUSE_COMPLETION_FOR", "0s");
    let env = Env::for_target(&target).await;
    seed(&env, 200, 30).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let now = server_now(&env.db).await;
    let at = DateTime::from_millis(now.timestamp_millis() + 2_000);
    let ids = expire_messages_at(&env, &[0, 20, 40, 60, 80], at).await;
    let conversations = env.db.collection::<Document>("conversations");
    conversations
        .update_one(
            doc! { "conversationId": "conv-0" },
            doc! { "$set": { "isTemporary": false, "expiredAt": at } },
        )
        .await
        .unwrap();
    for id in &ids {
        assert!(meili_doc(&target, Collection::Messages, id).await.is_some());
    }
    eventually(Duration::from_secs(10), "the expiry to pass", || async {
        (server_now(&env.db).await > at).then_some(())
    })
    .await;

    let out = target.run("next", &["once"]);
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(
        log.contains("expired documents removed from Meilisearch and marked"),
        "{log}"
    );
    for id in &ids {
        assert!(
            meili_doc(&target, Collection::Messages, id).await.is_none(),
            "{id} is still searchable"
        );
    }
    assert!(meili_doc(&target, Collection::Conversations, "conv-0")
        .await
        .is_none());
    assert_marked_removed(&env, Collection::Messages, &ids).await;
    assert_marked_removed(&env, Collection::Conversations, &["conv-0".into()]).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    // Nothing left for the next one.
    let out = target.run("again", &["once", "--force"]);
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!log.contains("expired documents removed"), "{log}");
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_follow_mode_a_document_leaves_meilisearch_within_seconds_of_its_expiry() {
    let test = "in_follow_mode_a_document_leaves_meilisearch_within_seconds_of_its_expiry";
    let listen = format!("127.0.0.1:{}", free_port());
    let target = Target::new("expiry_follow")
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "1h")
        .set("RECONCILER__SERVE__LISTEN", &listen);
    let base = format!("http://{listen}");
    let env = Env::for_target(&target).await;
    if !serves_change_streams(&env.db, test).await {
        return;
    }
    seed(&env, 300, 20).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Known before the follower starts: its first query finds them.
    let now = server_now(&env.db).await;
    let early_at = DateTime::from_millis(now.timestamp_millis() + 8_000);
    let early = expire_messages_at(&env, &[0, 20, 40], early_at).await;
    let mut replica = target.spawn("follower", &["run"]);
    let status = await_follow_state(&base, "following", Duration::from_secs(60)).await;
    assert!(status["follow"]["nextExpiryAt"].is_string(), "{status}");
    // Set while it follows: the change moves its wake-up earlier.
    let now = server_now(&env.db).await;
    let late_at = DateTime::from_millis(now.timestamp_millis() + 3_000);
    let late = expire_messages_at(&env, &[60, 80, 100, 120, 140], late_at).await;

    let mut ids = early.clone();
    ids.extend(late.iter().cloned());
    let mut since = Vec::new();
    for id in &ids {
        assert!(
            meili_doc(&target, Collection::Messages, id).await.is_some(),
            "{id} searchable before it expires"
        );
        let at = if early.contains(id) {
            early_at
        } else {
            late_at
        };
        since.push(ServerClock::read(&env).await.moment(at));
    }
    let delays = await_gone(&target, &ids, &since, WITHIN + Duration::from_secs(10)).await;
    let (p50, max) = p50_max(&delays);
    eprintln!(
        "follow mode: gone p50 {p50:.3} s, max {max:.3} s after expiredAt ({} documents)",
        ids.len()
    );
    assert!(
        max < WITHIN.as_secs_f64(),
        "within seconds of expiredAt: max {max:.3} s"
    );
    // Absence from Meilisearch comes first (the deletion task awaited),
    // the markers right after it; the sweep counts its documents applied
    // only once both are written, so that is what to await.
    let expected = ids.len() as u64;
    eventually(
        Duration::from_secs(20),
        "the sweeps to count every expired document applied",
        || async { (applied(&base, "expired").await >= expected).then_some(()) },
    )
    .await;
    assert_marked_removed(&env, Collection::Messages, &ids).await;
    let status = support::follow::status(&base).await;
    assert_eq!(status["follow"]["applied"]["expired"], expected, "{status}");
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    let (_, log) = output_of(replica);
    assert_eq!(
        log.matches("reconciliation finished").count(),
        1,
        "only the first: {log}"
    );
    target.cleanup().await;
}

/// MongoDB's clock read against the local one: the local moment it reads a
/// given time.
struct ServerClock {
    server_ms: i64,
    local: Instant,
}

impl ServerClock {
    async fn read(env: &Env) -> ServerClock {
        let before = Instant::now();
        let server_ms = server_now(&env.db).await.timestamp_millis();
        ServerClock {
            server_ms,
            local: before + before.elapsed() / 2,
        }
    }

    fn at(&self, ms_ahead: i64) -> DateTime {
        DateTime::from_millis(self.server_ms + ms_ahead)
    }

    fn moment(&self, at: DateTime) -> Instant {
        let ahead = at.timestamp_millis() - self.server_ms;
        if ahead >= 0 {
            self.local + Duration::from_millis(ahead as u64)
        } else {
            self.local - Duration::from_millis((-ahead) as u64)
        }
    }
}

/// The messages the index lists now (their `messageId`s, sorted).
async fn indexed_messages(target: &Target) -> Vec<String> {
    let listed = target
        .meili_get(&format!(
            "/indexes/{}messages/documents?fields=messageId&limit=100000",
            target.prefix
        ))
        .await;
    let mut ids: Vec<String> = listed["results"]
        .as_array()
        .expect("a document listing")
        .iter()
        .filter_map(|d| d["messageId"].as_str().map(str::to_string))
        .collect();
    ids.sort();
    ids
}

/// Inserts `n` plain indexable messages `{tag}-{i}`, as LibreChat saves them.
async fn insert_messages(env: &Env, tag: &str, n: usize) {
    let now = server_now(&env.db).await;
    env.insert(
        Collection::Messages,
        (0..n).map(|i| new_message(tag, i, now)).collect(),
    )
    .await;
}

/// Each message's `_id` by its `messageId` (one read: the updates below
/// go by `_id`, which every server serves from its primary index).
async fn message_keys(env: &Env) -> HashMap<String, Bson> {
    let docs: Vec<Document> = env
        .db
        .collection::<Document>("messages")
        .find(doc! {})
        .projection(doc! { "_id": 1, "messageId": 1 })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    docs.into_iter()
        .filter_map(|d| {
            Some((
                d.get_str("messageId").ok()?.to_string(),
                d.get("_id")?.clone(),
            ))
        })
        .collect()
}

/// LibreChat's retention applied to many messages at once: one `expiredAt`
/// for all of `ids` (one update, no new version, the flag left as it is).
async fn expire_all_at(env: &Env, keys: &HashMap<String, Bson>, ids: &[String], at: DateTime) {
    let keys: Vec<Bson> = ids.iter().map(|id| keys[id].clone()).collect();
    let set = env
        .db
        .collection::<Document>("messages")
        .update_many(
            doc! { "_id": { "$in": keys } },
            doc! { "$set": { "isTemporary": false, "expiredAt": at } },
        )
        .await
        .unwrap();
    assert_eq!(set.matched_count, ids.len() as u64);
}

/// Waits until every message of `expiring` (its id, and the local moment
/// MongoDB's clock reads its `expiredAt`) is gone from the messages index,
/// listing it every 100 ms; panics as soon as one is still listed `bound`
/// after its expiry, naming those, with the end of `replica`'s log.
/// Returns each one's delay from its expiry to the first listing without
/// it, in seconds.
async fn await_each_gone(
    target: &Target,
    replica: &Replica,
    expiring: &[(String, Instant)],
    bound: Duration,
) -> Vec<f64> {
    let mut gone: Vec<Option<f64>> = vec![None; expiring.len()];
    loop {
        let asked = Instant::now();
        let listed = indexed_messages(target).await;
        let answered = Instant::now();
        let mut overdue = Vec::new();
        for ((id, moment), gone) in expiring.iter().zip(gone.iter_mut()) {
            if gone.is_some() {
                continue;
            }
            if listed.binary_search(id).is_err() {
                *gone = Some(match answered.checked_duration_since(*moment) {
                    Some(late) => late.as_secs_f64(),
                    None => -(*moment - answered).as_secs_f64(),
                });
            } else if asked > *moment + bound {
                overdue.push(format!("{id} (+{:.1} s)", (asked - *moment).as_secs_f64()));
            }
        }
        if !overdue.is_empty() {
            let log = replica.stderr_so_far();
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "{} of {} messages still searchable more than {bound:?} after their expiredAt \
                 ({} gone), e.g. {:?}; the replica's log (last 10 lines):\n{}",
                overdue.len(),
                expiring.len(),
                gone.iter().flatten().count(),
                &overdue[..overdue.len().min(5)],
                lines[lines.len().saturating_sub(10)..].join("\n")
            );
        }
        if gone.iter().all(Option::is_some) {
            return gone.into_iter().flatten().collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn summary(delays: &[f64]) -> String {
    let mut sorted = delays.to_vec();
    sorted.sort_by(f64::total_cmp);
    format!(
        "p50 {:.3} s, max {:.3} s ({} messages)",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        sorted.len()
    )
}

/// No document stays past its expiry because it expired while a sweep ran:
/// a trickle (200 messages 5 ms apart, closer together than a sweep lasts),
/// then a burst (2,000 messages in the same second, 10 ms apart in groups
/// of 20, as a retention policy applied at once). Each must leave
/// Meilisearch within seconds ([`WITHIN`]) of its `expiredAt`, on
/// MongoDB's clock — the last ones included, which expire while the sweep
/// before them runs.
#[tokio::test(flavor = "multi_thread")]
async fn in_follow_mode_expiries_closer_together_than_a_sweep_lasts_each_leave_within_seconds() {
    const TRICKLE: usize = 200;
    const TRICKLE_STEP_MS: i64 = 5;
    const BURST: usize = 2_000;
    const BURST_GROUPS: usize = 100;
    let test =
        "in_follow_mode_expiries_closer_together_than_a_sweep_lasts_each_leave_within_seconds";
    let listen = format!("127.0.0.1:{}", free_port());
    let target = Target::new("expiry_tail")
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "1h")
        .set("RECONCILER__SERVE__LISTEN", &listen);
    let base = format!("http://{listen}");
    let env = Env::for_target(&target).await;
    if !serves_change_streams(&env.db, test).await {
        return;
    }
    insert_messages(&env, "tail", TRICKLE + BURST + 50).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let indexed = indexed_messages(&target).await;
    assert!(
        indexed.len() >= TRICKLE + BURST,
        "{} indexed",
        indexed.len()
    );
    let (trickle, rest) = indexed.split_at(TRICKLE);
    let burst = &rest[..BURST];

    // Written before the follower starts (its stream begins after them, so
    // it learns every expiry from MongoDB, not from the changes): the
    // trickle from 6 s ahead (time to start following), the burst right
    // after it.
    let keys = message_keys(&env).await;
    let clock = ServerClock::read(&env).await;
    let trickle_from = 6_000;
    let burst_from = trickle_from + TRICKLE as i64 * TRICKLE_STEP_MS + 200;
    let mut expiring = Vec::new();
    for (i, id) in trickle.iter().enumerate() {
        let at = clock.at(trickle_from + i as i64 * TRICKLE_STEP_MS);
        expire_all_at(&env, &keys, std::slice::from_ref(id), at).await;
        expiring.push((id.clone(), clock.moment(at)));
    }
    let group = BURST / BURST_GROUPS;
    for (g, ids) in burst.chunks(group).enumerate() {
        // 100 moments 10 ms apart: all within one second.
        let at = clock.at(burst_from + g as i64 * 10);
        expire_all_at(&env, &keys, ids, at).await;
        expiring.extend(ids.iter().map(|id| (id.clone(), clock.moment(at))));
    }
    let mut replica = target.spawn("follower", &["run"]);
    await_follow_state(&base, "following", Duration::from_secs(60)).await;
    let following = Instant::now();

    let delays = await_each_gone(&target, &replica, &expiring, WITHIN).await;
    eprintln!(
        "follow mode, a trickle 5 ms apart: gone {}",
        summary(&delays[..TRICKLE])
    );
    eprintln!(
        "follow mode, a burst in one second: gone {}",
        summary(&delays[TRICKLE..])
    );
    // What expired once it followed is the follower's sweeps' (on a slow
    // start the first ones go with the reconciliation it begins with).
    let expected = expiring.iter().filter(|(_, at)| *at > following).count() as u64;
    eventually(
        Duration::from_secs(30),
        "the sweeps to count every document expired while following applied",
        || async { (applied(&base, "expired").await >= expected).then_some(()) },
    )
    .await;
    let ids: Vec<String> = expiring.into_iter().map(|(id, _)| id).collect();
    assert_marked_removed(&env, Collection::Messages, &ids).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    let (_, log) = output_of(replica);
    assert_eq!(
        log.matches("reconciliation finished").count(),
        1,
        "only the first (the sweeps removed them, not a periodic reconciliation): {log}"
    );
    target.cleanup().await;
}

/// A document the sweep keeps — an `expiredAt` array that also holds a
/// later date, searchable by LibreChat's rule (MongoDB matches an array
/// through any element) — neither hides the next expiries from the follower
/// nor makes it sweep again and again: it stays searchable, the two plain
/// expiries each leave at their time, and then nothing is due.
#[tokio::test(flavor = "multi_thread")]
async fn in_follow_mode_a_document_the_sweep_keeps_neither_hides_the_next_expiry_nor_is_swept_again(
) {
    let test = "in_follow_mode_a_document_the_sweep_keeps_neither_hides_the_next_expiry_nor_is_swept_again";
    let listen = format!("127.0.0.1:{}", free_port());
    let target = Target::new("expiry_kept")
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "1h")
        .set("RECONCILER__SERVE__LISTEN", &listen);
    let base = format!("http://{listen}");
    let env = Env::for_target(&target).await;
    if !serves_change_streams(&env.db, test).await {
        return;
    }
    // Only plain messages: no other expiry ahead.
    insert_messages(&env, "kept", 20).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let keys = message_keys(&env).await;
    let clock = ServerClock::read(&env).await;
    let kept = doc! { "$set": {
        "isTemporary": false,
        "expiredAt": [clock.at(-3_600_000), clock.at(240 * 3_600_000)],
    } };
    env.db
        .collection::<Document>("messages")
        .update_one(doc! { "_id": keys["kept-0"].clone() }, kept)
        .await
        .unwrap();
    let mut replica = target.spawn_with(
        "follower",
        &["run"],
        &[("RUST_LOG", "info,meili_reconciler::follow::expiry=debug")],
    );
    await_follow_state(&base, "following", Duration::from_secs(60)).await;
    // Two expiries ahead: the first the follower learns from the change,
    // the second only from asking MongoDB after sweeping the first.
    let (first, second) = (clock.at(6_000), clock.at(8_000));
    expire_all_at(&env, &keys, &["kept-1".to_string()], first).await;
    expire_all_at(&env, &keys, &["kept-2".to_string()], second).await;
    await_each_gone(
        &target,
        &replica,
        &[
            ("kept-1".to_string(), clock.moment(first)),
            ("kept-2".to_string(), clock.moment(second)),
        ],
        WITHIN,
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "nothing left to wake up for",
        || async {
            let s = support::follow::status(&base).await;
            s["follow"]["nextExpiryAt"].is_null().then_some(())
        },
    )
    .await;
    assert!(
        meili_doc(&target, Collection::Messages, "kept-0")
            .await
            .is_some(),
        "kept-0 is searchable by LibreChat's rule"
    );
    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    let (_, log) = output_of(replica);
    let plans = log.matches("asked MongoDB for the next expiry").count();
    assert!(
        (1..=8).contains(&plans),
        "the follower asked for the next expiry {plans} times for two expiries \
         (a document a sweep keeps must not make it sweep again and again): {log}"
    );
    target.cleanup().await;
}

/// A retention policy applied at once: thousands of documents expired in
/// the same second leave Meilisearch at the next run, in batches (a few
/// deletion tasks, not one per document), with LibreChat's markers.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_sweeps_thousands_expired_in_the_same_second_in_batches() {
    const BURST: usize = 2_000;
    let target = Target::new("expiry_burst").set("RECONCILER__LEASE__REUSE_COMPLETION_FOR", "0s");
    let env = Env::for_target(&target).await;
    insert_messages(&env, "burst", BURST + 50).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let indexed = indexed_messages(&target).await;
    assert!(indexed.len() >= BURST, "{} indexed", indexed.len());
    let burst = &indexed[..BURST];
    let keys = message_keys(&env).await;
    let clock = ServerClock::read(&env).await;
    for (g, ids) in burst.chunks(BURST / 10).enumerate() {
        expire_all_at(&env, &keys, ids, clock.at(1_000 + g as i64 * 90)).await;
    }
    let last = clock.at(1_000 + 9 * 90);
    eventually(Duration::from_secs(20), "the expiries to pass", || async {
        (server_now(&env.db).await > last).then_some(())
    })
    .await;
    let uid = env.uid(Collection::Messages);
    let deletions = || async {
        target
            .meili_get(&format!(
                "/tasks?indexUids={uid}&types=documentDeletion&limit=1"
            ))
            .await["total"]
            .as_u64()
            .expect("a task list with a total")
    };
    let before = deletions().await;

    let out = target.run("next", &["once"]);
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(
        log.contains(&format!("\"removed\":{BURST}")),
        "one sweep removed all {BURST}: {log}"
    );
    let listed = indexed_messages(&target).await;
    let left: Vec<&String> = burst
        .iter()
        .filter(|id| listed.binary_search(id).is_ok())
        .collect();
    assert!(
        left.is_empty(),
        "{} still searchable: {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
    let tasks = deletions().await - before;
    assert!(
        tasks <= (BURST / 100) as u64,
        "{tasks} deletion tasks for {BURST} documents (batched: at most one per 100)"
    );
    assert_marked_removed(&env, Collection::Messages, burst).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    target.cleanup().await;
}

/// The follower's question, on any server: the earliest `expiredAt` of a
/// document that may be in Meilisearch (flagged either way), passed or
/// not, later than the previous plan when there was one — a single date
/// only (an array, a string, a null and a document marked removed count
/// for nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_expiry_is_the_earliest_single_date_that_may_be_indexed_passed_or_not() {
    let target = Target::new("expiry_next");
    let env = Env::for_target(&target).await;
    let now = server_now(&env.db).await;
    let at = |mins: i64| DateTime::from_millis(now.timestamp_millis() + mins * 60_000);
    let m = Collection::Messages;
    let docs = vec![
        doc! { "messageId": "passed", "_meiliIndex": true, "expiredAt": at(-60) },
        doc! { "messageId": "ahead", "_meiliIndex": false, "expiredAt": at(60) },
        doc! { "messageId": "marked", "_meiliCleanupVersion": 1, "expiredAt": at(-120) },
        doc! { "messageId": "array", "_meiliIndex": true, "expiredAt": [at(-180), at(14_400)] },
        doc! { "messageId": "text", "_meiliIndex": true, "expiredAt": "2000-01-01" },
        doc! { "messageId": "null", "_meiliIndex": true, "expiredAt": Bson::Null },
        doc! { "messageId": "none", "_meiliIndex": true },
    ];
    env.db
        .collection::<Document>(m.name())
        .insert_many(docs)
        .await
        .unwrap();
    let next = |after| meili_reconciler::mongo::next_expiry(&env.db, m, after);
    assert_eq!(
        next(None).await.unwrap(),
        Some(at(-60)),
        "passed, still there"
    );
    assert_eq!(next(Some(at(-30))).await.unwrap(), Some(at(60)));
    assert_eq!(next(Some(at(60))).await.unwrap(), None);
    target.cleanup().await;
}
