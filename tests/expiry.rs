//! Expiry is a delete (docs/design.md §4.4, §4.12): LibreChat's retention
//! gives a chat an `expiredAt`, and MongoDB's TTL monitor deletes it some
//! time after that passes, without hooks. A document must leave Meilisearch
//! when its `expiredAt` passes — at the next run in interval mode, within a
//! few seconds in follow mode (the owner knows the next expiry and wakes up
//! for it) — with LibreChat's removal markers, never only when the TTL
//! monitor deletes it. Real processes; the interval-mode test runs on any
//! MongoDB, the follow-mode one needs change streams (skipped on DocumentDB,
//! saying so).

mod support;

use std::time::{Duration, Instant};

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Bson, DateTime, Document};
use support::chat_data::{seed, server_now, Env};
use support::cli::{eventually, free_port, output_of, terminate, wait_exit, Target};
use support::follow::*;

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

/// The local moment MongoDB's clock reads `at`.
async fn local_moment(env: &Env, at: DateTime) -> Instant {
    let ahead = at.timestamp_millis() - server_now(&env.db).await.timestamp_millis();
    let now = Instant::now();
    if ahead >= 0 {
        now + Duration::from_millis(ahead as u64)
    } else {
        now - Duration::from_millis((-ahead) as u64)
    }
}

async fn assert_marked_removed(env: &Env, collection: Collection, ids: &[String]) {
    let handle = env.db.collection::<Document>(collection.name());
    for id in ids {
        let d = handle
            .find_one(doc! { collection.primary_key(): id })
            .await
            .unwrap()
            .unwrap_or_else(|| {
                panic!("{id} is still in MongoDB (the TTL monitor is not what removed it)")
            });
        assert!(
            d.get("_meiliIndex").is_none() && d.get_i32("_meiliCleanupVersion") == Ok(1),
            "LibreChat's removal markers on {id}: {d}"
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
        since.push(local_moment(&env, at).await);
    }
    let delays = await_gone(&target, &ids, &since, Duration::from_secs(20)).await;
    let (p50, max) = p50_max(&delays);
    eprintln!(
        "follow mode: gone p50 {p50:.3} s, max {max:.3} s after expiredAt ({} documents)",
        ids.len()
    );
    assert!(
        max < 3.0,
        "within a few seconds of expiredAt: max {max:.3} s"
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
    let _ = Bson::Null;
    target.cleanup().await;
}
