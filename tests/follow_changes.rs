//! Follow mode, one `run` replica: each kind of change reaches Meilisearch
//! through the change stream — an insert, an edit, a delete (by its
//! pre-image, or without one by the id-set comparison), a document turned
//! temporary, expired, or indexable again — and a version LibreChat's save
//! hook already indexed is skipped. `serve.interval` is an hour, so no
//! periodic reconciliation can be what did it (the log shows exactly one,
//! the first); each test awaits the document's state in Meilisearch.

use crate::support;

use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Document};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use support::chat_data::{expected, seed, server_now, Env};
use support::cli::{free_port, output_of, terminate, wait_exit, Target};
use support::follow::*;

const SOON: Duration = Duration::from_secs(15);

fn follower_target(tag: &str) -> (Target, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let target = Target::new(tag)
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set("RECONCILER__SERVE__LISTEN", &listen);
    (target, format!("http://{listen}"))
}

fn reconciliations_in(log: &str) -> usize {
    log.matches("reconciliation finished").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn inserts_edits_deletes_temporary_and_expired_reach_meilisearch_through_the_stream() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let (target, base) = follower_target("follow_changes");
    let target = target.set("RECONCILER__FOLLOW__PRE_IMAGES", "enable");
    let env = Env::for_target(&target).await;
    seed(&env, 40, 10).await;
    let mut replica = target.spawn("follower-1", &["run"]);
    await_follow_state(&base, "following", Duration::from_secs(60)).await;

    let messages = env.db.collection::<Document>("messages");
    let m = Collection::Messages;
    let shape = |collection, d: &Document, now| expected(collection, d, now).unwrap().1;

    // An insert.
    let now = server_now(&env.db).await;
    let fresh = new_message("live", 1, now);
    messages.insert_one(fresh.clone()).await.unwrap();
    await_meili_doc(&target, m, "live-1", Some(shape(m, &fresh, now)), SOON).await;

    // An edit.
    let id = fresh.get("_id").unwrap().clone();
    save(&env.db, m, &id, doc! { "text": "edited while followed" }).await;
    let mut edited = shape(m, &fresh, now);
    edited["text"] = json!("edited while followed");
    await_meili_doc(&target, m, "live-1", Some(edited), SOON).await;

    // A delete: the pre-image names the Meilisearch document.
    messages.delete_one(doc! { "_id": &id }).await.unwrap();
    await_meili_doc(&target, m, "live-1", None, SOON).await;

    // A message turned temporary, and back.
    let msg0 = messages
        .find_one(doc! { "messageId": "msg-0" })
        .await
        .unwrap()
        .unwrap();
    let msg0_id = msg0.get("_id").unwrap().clone();
    assert!(meili_doc(&target, m, "msg-0").await.is_some());
    save(&env.db, m, &msg0_id, doc! { "isTemporary": true }).await;
    await_meili_doc(&target, m, "msg-0", None, SOON).await;
    save(&env.db, m, &msg0_id, doc! { "isTemporary": false }).await;
    await_meili_doc(&target, m, "msg-0", Some(shape(m, &msg0, now)), SOON).await;

    // A conversation expired.
    let c = Collection::Conversations;
    let conv0 = env
        .db
        .collection::<Document>("conversations")
        .find_one(doc! { "conversationId": "conv-0" })
        .await
        .unwrap()
        .unwrap();
    assert!(meili_doc(&target, c, "conv-0").await.is_some());
    let past = mongodb::bson::DateTime::from_millis(now.timestamp_millis() - 60_000);
    save(
        &env.db,
        c,
        conv0.get("_id").unwrap(),
        doc! { "expiredAt": past },
    )
    .await;
    await_meili_doc(&target, c, "conv-0", None, SOON).await;

    // A version LibreChat's save hook indexed already: skipped, not sent.
    let hooked = new_message("hooked", 1, now);
    env.put_docs(&env.uid(m), &[shape(m, &hooked, now)]).await;
    let (skipped, inserted) = (
        applied(&base, "skipped").await,
        applied(&base, "insert").await,
    );
    let mut flagged = hooked.clone();
    // LibreChat's save hook marks what it indexed.
    flagged.insert("_meiliIndex", true);
    flagged.insert("_meiliCleanupVersion", 1);
    flagged.insert("_meiliIndexSchemaVersion", 1);
    messages.insert_one(flagged).await.unwrap();
    support::cli::eventually(SOON, "the hook's version to be skipped", || async {
        (applied(&base, "skipped").await > skipped).then_some(())
    })
    .await;
    assert_eq!(
        applied(&base, "insert").await,
        inserted,
        "not sent a second time"
    );

    await_in_step(&env, SOON).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    let status = status(&base).await;
    assert_eq!(status["follow"]["lagSecs"], json!(0.0), "{status}");
    assert!(status["follow"]["lastEventAt"].is_string(), "{status}");
    assert_eq!(status["lease"]["state"], "following", "{status}");

    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    let (_, log) = output_of(replica);
    assert_eq!(
        reconciliations_in(&log),
        1,
        "only the first reconciliation ran: the stream did the rest"
    );
    assert!(
        !log.contains("a delete without a pre-image"),
        "the delete was named by its pre-image: {log}"
    );
    target.cleanup().await;
}

/// LibreChat's save hook saves a message unflagged, indexes it itself and
/// then sets its flag: when all of that happens before the follower applies
/// the insert (it is stopped with SIGSTOP meanwhile, well within its lease;
/// the insert event carries the document as inserted, unflagged), the
/// follower sees the flag at flush time and sends nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_the_save_hook_indexes_before_the_flush_is_not_sent_again() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let (target, base) = follower_target("follow_hook_race");
    let env = Env::for_target(&target).await;
    seed(&env, 10, 2).await;
    let mut replica = target.spawn("follower-1", &["run"]);
    await_follow_state(&base, "following", Duration::from_secs(60)).await;
    let m = Collection::Messages;
    let uid = env.uid(m);
    let additions = || async {
        let tasks = target
            .meili_get(&format!(
                "/tasks?indexUids={uid}&types=documentAdditionOrUpdate&limit=1"
            ))
            .await;
        tasks["total"].as_u64().expect("a task list with a total")
    };
    let (skipped, inserted, sent_before) = (
        applied(&base, "skipped").await,
        applied(&base, "insert").await,
        additions().await,
    );

    // The hook's three steps, while the follower cannot apply anything.
    let pid = Pid::from_raw(replica.child.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let now = server_now(&env.db).await;
    let message = new_message("raced", 1, now);
    let messages = env.db.collection::<Document>("messages");
    messages.insert_one(message.clone()).await.unwrap();
    env.put_docs(&uid, &[expected(m, &message, now).unwrap().1])
        .await;
    messages
        .update_one(
            doc! { "_id": message.get("_id").unwrap() },
            doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } },
        )
        .await
        .unwrap();
    kill(pid, Signal::SIGCONT).unwrap();

    support::cli::eventually(SOON, "the raced version to be skipped", || async {
        (applied(&base, "skipped").await > skipped).then_some(())
    })
    .await;
    assert_eq!(
        applied(&base, "insert").await,
        inserted,
        "not counted as sent"
    );
    assert_eq!(
        additions().await,
        sent_before + 1,
        "Meilisearch got the hook's addition only"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_without_pre_images_reach_meilisearch_through_the_id_comparison() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let (target, base) = follower_target("follow_orphans");
    let target = target.set("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "1s");
    let env = Env::for_target(&target).await;
    seed(&env, 40, 10).await;
    let mut replica = target.spawn("follower-1", &["run"]);
    await_follow_state(&base, "following", Duration::from_secs(60)).await;

    let m = Collection::Messages;
    assert!(meili_doc(&target, m, "msg-0").await.is_some());
    env.db
        .collection::<Document>("messages")
        .delete_one(doc! { "messageId": "msg-0" })
        .await
        .unwrap();
    await_meili_doc(&target, m, "msg-0", None, SOON).await;
    await_in_step(&env, SOON).await;

    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    let (_, log) = output_of(replica);
    assert!(log.contains("a delete without a pre-image"), "{log}");
    assert_eq!(reconciliations_in(&log), 1, "the stream did it");
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_change_stream_is_reopened_after_the_last_applied_change() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let Some(fail) = support::faults::FailCommand::new("follow-reopen").await else {
        return;
    };
    let (target, base) = follower_target("follow_reopen");
    let uri = format!("{}&appName=follow-reopen", target.mongo_uri);
    let target = target.with_mongo(&uri);
    let env = Env::for_target(&target).await;
    seed(&env, 20, 5).await;
    let mut replica = target.spawn("follower-1", &["run"]);
    await_follow_state(&base, "following", Duration::from_secs(60)).await;

    // The stream's next read fails with an error the driver does not resume
    // from by itself (ExceededTimeLimit, no resumable label).
    fail.error_code(&["getMore"], 262, support::faults::times(1))
        .await;
    support::cli::eventually(SOON, "the stream to fail", || async {
        replica
            .stderr_so_far()
            .contains("the change stream failed")
            .then_some(())
    })
    .await;
    insert_and_await_searchable(&env, &target, "after-failure", SOON).await;
    fail.off().await;

    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    let (_, log) = output_of(replica);
    assert!(
        log.contains("reopening it after the last applied change"),
        "the stream failed and was reopened: {log}"
    );
    assert_eq!(reconciliations_in(&log), 1, "no reconciliation for it");
    target.cleanup().await;
}
