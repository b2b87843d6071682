//! Follow mode's pipeline (docs/design.md §4.12, "The pipeline"): the next
//! micro-batch is enqueued while Meilisearch still indexes the one before,
//! and what must stay in order does. A real `run` replica follows against a
//! private Meilisearch stand-in whose every task takes seconds (what a real
//! Meilisearch's fixed cost per indexing batch does, made larger), and:
//!
//! - one message edited in consecutive micro-batches, each enqueued while
//!   the one before is still being indexed (the later ones indexed together,
//!   as Meilisearch batches what waits), ends with its newest version in
//!   Meilisearch and flagged for it; no acknowledgement of an older version
//!   clears the flag the newer one set (they run in order, or are merged
//!   into the newer one's), so nothing is sent twice;
//! - the resume token saved in the lease does not move while a micro-batch
//!   is in flight, and an owner killed then is resumed from it by the next
//!   one, which sends that micro-batch again: the index ends exact;
//! - while a refused batch is isolated (read again, then bisected), nothing
//!   else is enqueued: an edit made right after the re-read reaches
//!   Meilisearch after the re-sent parts, and the index ends exact.
//!
//! `serve.interval` is an hour: only the stream can have done it.

use crate::support;

use std::time::{Duration, Instant};

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Bson, Document};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::chat_data::{expected, seed, server_now, Env};
use support::cli::{eventually, free_port, Target};
use support::follow::*;
use support::standin::{private_standin, Knobs, PrivateStandin};

const SOON: Duration = Duration::from_secs(30);

/// A follower's target on the private stand-in, and its HTTP base URL.
fn follower(tag: &str, standin: &PrivateStandin) -> (Target, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let target = Target::new(tag)
        .with_meili(&standin.host, &standin.key)
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set("RECONCILER__SERVE__LISTEN", &listen);
    (target, format!("http://{listen}"))
}

/// Additions the stand-in accepted for index `uid` so far (each one a
/// micro-batch's, or a re-sent part of one).
async fn additions(knobs: &Knobs, uid: &str) -> usize {
    let path = format!("/indexes/{uid}/documents");
    knobs
        .requests()
        .await
        .iter()
        .filter(|r| r["method"] == "POST" && r["path"] == path.as_str() && r["status"] == 202)
        .count()
}

async fn await_additions(knobs: &Knobs, uid: &str, n: usize) {
    eventually(SOON, &format!("{n} additions to {uid}"), || async {
        (additions(knobs, uid).await >= n).then_some(())
    })
    .await;
}

/// The message `_id` as it is in MongoDB now.
async fn message(env: &Env, id: &Bson) -> Document {
    env.db
        .collection::<Document>("messages")
        .find_one(doc! { "_id": id.clone() })
        .await
        .unwrap()
        .expect("the message is there")
}

/// Waits until Meilisearch holds exactly the current version of message
/// `id` and MongoDB has it flagged.
async fn await_indexed_and_flagged(env: &Env, target: &Target, id: &Bson) -> Document {
    let m = Collection::Messages;
    eventually(
        SOON,
        &format!("message {id} indexed and flagged"),
        || async {
            let now = server_now(&env.db).await;
            let current = message(env, id).await;
            let (meili_id, want) = expected(m, &current, now)?;
            let flagged = current.get_bool("_meiliIndex").unwrap_or(false);
            (flagged && meili_doc(target, m, &meili_id).await == Some(want)).then_some(current)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn one_message_edited_in_consecutive_micro_batches_ends_newest_and_is_flagged_once() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let Some(standin) = private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let (target, base) = follower("pipeline_order", &standin);
    let env = Env::for_target(&target).await;
    seed(&env, 5, 2).await;
    let _replica = target.spawn("follower-1", &["run"]);
    await_follow_state(&base, "following", Duration::from_secs(60)).await;
    // Meilisearch's auto-batching, each indexing batch costing 2 s: tasks
    // enqueued while one is indexed are indexed together after it.
    knobs
        .set_model(serde_json::json!({
            "enabled": true, "fixedMs": 2_000, "perIndexedDocUs": 0, "perBatchDocUs": 0, "scale": 1.0
        }))
        .await;
    let m = Collection::Messages;
    let uid = env.uid(m);
    let messages = env.db.collection::<Document>("messages");
    // Every update of the message, in order, as MongoDB records them.
    let mut updates = messages
        .watch()
        .pipeline([doc! { "$match": { "operationType": "update" } }])
        .await
        .expect("a change stream of the test's own");
    let sent_before = additions(&knobs, &uid).await;

    let now = server_now(&env.db).await;
    let x = new_message("x", 1, now);
    let id = x.get("_id").unwrap().clone();
    messages.insert_one(x).await.unwrap();
    await_additions(&knobs, &uid, sent_before + 1).await;
    save(&env.db, m, &id, doc! { "text": "second version" }).await;
    await_additions(&knobs, &uid, sent_before + 2).await;
    assert_eq!(
        meili_doc(&target, m, "x-1").await,
        None,
        "the second version was enqueued while the first was still being indexed"
    );
    save(&env.db, m, &id, doc! { "text": "third version" }).await;
    await_additions(&knobs, &uid, sent_before + 3).await;

    let flagged = await_indexed_and_flagged(&env, &target, &id).await;
    assert_eq!(flagged.get_str("text"), Ok("third version"));

    // A marker written after: once it is indexed and flagged, every
    // acknowledgement of the three versions is long done.
    let marker = new_message("marker", 1, server_now(&env.db).await);
    let marker_id = marker.get("_id").unwrap().clone();
    messages.insert_one(marker).await.unwrap();
    await_indexed_and_flagged(&env, &target, &marker_id).await;

    let mut flags = Vec::new();
    loop {
        let event = updates
            .next_if_any()
            .await
            .expect("read the test's change stream");
        let Some(event) = event else { continue };
        let key = event.document_key.as_ref().and_then(|k| k.get("_id"));
        let set = event
            .update_description
            .as_ref()
            .and_then(|u| u.updated_fields.get_bool("_meiliIndex").ok());
        if key == Some(&marker_id) && set == Some(true) {
            break;
        }
        if key == Some(&id) {
            flags.extend(set);
        }
    }
    // Set once, by the third version's acknowledgement (the saves left it
    // false, unchanged, so MongoDB reports no change of it); the older
    // versions' acknowledgements came before, found their versions gone
    // and left it alone — one after it would have cleared it.
    assert_eq!(
        flags,
        vec![true],
        "the flag of the message, each time an update changed it"
    );
    assert_eq!(
        additions(&knobs, &uid).await,
        sent_before + 4,
        "each version sent once, and the marker: nothing sent again"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_waits_for_the_micro_batch_in_flight_and_a_killed_owner_s_successor_sends_it_again(
) {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let Some(standin) = private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let (target, base_a) = follower("pipeline_token", &standin);
    let env = Env::for_target(&target).await;
    seed(&env, 5, 2).await;
    let a = target.spawn("follower-a", &["run"]);
    await_follow_state(&base_a, "following", Duration::from_secs(60)).await;
    const TASK_MS: u64 = 4_000;
    knobs.set_latency(TASK_MS).await;
    let m = Collection::Messages;
    let uid = env.uid(m);
    let sent_before = additions(&knobs, &uid).await;

    let now = server_now(&env.db).await;
    let batch: Vec<Document> = (0..10).map(|n| new_message("inflight", n, now)).collect();
    let ids: Vec<Bson> = batch
        .iter()
        .map(|d| d.get("_id").unwrap().clone())
        .collect();
    env.db
        .collection::<Document>("messages")
        .insert_many(batch)
        .await
        .unwrap();
    await_additions(&knobs, &uid, sent_before + 1).await;
    let enqueued = Instant::now();
    let token_of = |lease: Option<Document>| lease.and_then(|l| l.get("followToken").cloned());
    let token = token_of(target.lease().await);
    assert!(token.is_some(), "following saves a token from the start");
    // Half of the task's time: the micro-batch is in flight throughout.
    while enqueued.elapsed() < Duration::from_millis(TASK_MS / 2) {
        assert_eq!(
            token_of(target.lease().await),
            token,
            "the saved token moved while the micro-batch it would pass was in flight"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kill(Pid::from_raw(a.child.id() as i32), Signal::SIGKILL).expect("SIGKILL the owner");
    // The stand-in still indexes what was enqueued; nobody acknowledges it.
    eventually(SOON, "the killed owner's micro-batch indexed", || async {
        (meili_doc(&target, m, "inflight-9").await.is_some()).then_some(())
    })
    .await;
    let flagged = env
        .db
        .collection::<Document>("messages")
        .count_documents(doc! { "_id": { "$in": &ids }, "_meiliIndex": true })
        .await
        .unwrap();
    assert_eq!(
        flagged, 0,
        "the owner died before acknowledging its micro-batch"
    );
    assert_eq!(token_of(target.lease().await), token);

    let listen_b = format!("127.0.0.1:{}", free_port());
    let b = target.spawn_with(
        "follower-b",
        &["run"],
        &[("RECONCILER__SERVE__LISTEN", listen_b.as_str())],
    );
    let base_b = format!("http://{listen_b}");
    await_follow_state(&base_b, "following", Duration::from_secs(60)).await;
    await_in_step(&env, Duration::from_secs(60)).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    assert!(
        applied(&base_b, "insert").await >= 10,
        "the next owner sent the micro-batch again"
    );
    let log = b.stderr_so_far();
    assert!(
        log.contains("resuming the change stream from the saved token"),
        "resumed from the token: {log}"
    );
    assert_eq!(
        log.matches("reconciliation finished").count(),
        0,
        "no reconciliation made up for it"
    );
    drop(b);
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_enqueued_while_a_refused_batch_is_isolated() {
    if support::skip::skip_without_fault_injection() {
        return;
    }
    if support::server::skip_without_change_streams().await {
        return;
    }
    let Some(standin) = private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let (target, base) = follower("pipeline_isolation", &standin);
    let env = Env::for_target(&target).await;
    seed(&env, 5, 2).await;
    let resume = tempfile::tempdir().unwrap();
    let resume_file = resume.path().join("resume");
    let mut replica = target.spawn_with(
        "follower-1",
        &["run"],
        &[
            ("RECONCILER_TEST_PAUSE_AFTER", "refused-batch-reread"),
            ("RECONCILER_TEST_RESUME_FILE", resume_file.to_str().unwrap()),
        ],
    );
    await_follow_state(&base, "following", Duration::from_secs(60)).await;
    let m = Collection::Messages;
    let uid = env.uid(m);
    let sent_before = additions(&knobs, &uid).await;

    // A message Meilisearch refuses (its id has a `|`), and a good one,
    // saved together: one micro-batch, refused whole.
    let now = server_now(&env.db).await;
    let mut poison = new_message("poison", 1, now);
    poison.insert("messageId", "poison|1");
    let good = new_message("good", 1, now);
    let (poison_id, good_id) = (
        poison.get("_id").unwrap().clone(),
        good.get("_id").unwrap().clone(),
    );
    assert!(poison_id.as_object_id() < good_id.as_object_id());
    env.db
        .collection::<Document>("messages")
        .insert_many([poison, good])
        .await
        .unwrap();
    replica.await_pause("refused-batch-reread", SOON).await;
    assert!(
        replica.stderr_so_far().lines().any(|l| l
            .contains("isolating the documents Meilisearch rejects")
            && l.contains("\"docs\":2")),
        "both messages were in the refused batch: {}",
        replica.stderr_so_far()
    );
    // Read again as it was; edited now. A micro-batch with the edit must
    // not be enqueued before the re-sent parts.
    save(
        &env.db,
        m,
        &good_id,
        doc! { "text": "edited after the re-read" },
    )
    .await;
    let paused = Instant::now();
    while paused.elapsed() < Duration::from_millis(1_500) {
        assert_eq!(
            additions(&knobs, &uid).await,
            sent_before + 1,
            "something was enqueued while the refused batch was being isolated"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::write(&resume_file, b"").unwrap();

    let flagged = await_indexed_and_flagged(&env, &target, &good_id).await;
    assert_eq!(flagged.get_str("text"), Ok("edited after the re-read"));
    let poison_now = message(&env, &poison_id).await;
    assert!(!poison_now.get_bool("_meiliIndex").unwrap_or(false));
    assert_eq!(meili_doc(&target, m, "poison|1").await, None);
    eventually(SOON, "the reject logged", || async {
        replica
            .stderr_so_far()
            .contains("Meilisearch refused a changed document")
            .then_some(())
    })
    .await;
    env.assert_in_step(server_now(&env.db).await, &["poison|1"])
        .await;
    target.cleanup().await;
}
