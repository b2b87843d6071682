//! Follow mode at the edges of what the server keeps or serves, each on a
//! private secantusdb (`support::private_mongo`; skipped with a reason
//! without one): a resume token the oplog no longer holds means a full
//! reconciliation, then following from a point taken before it; a server
//! without change streams (a standalone) makes `run` say so once and
//! reconcile on its interval, as without follow mode.

use crate::support;

use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Document};
use support::chat_data::{expected, seed, server_now, Env};
use support::cli::{eventually, free_port, output_of, terminate, wait_exit, Target};
use support::follow::*;
use support::private_mongo::private_mongo;

const SOON: Duration = Duration::from_secs(20);
/// How long a document written in interval mode may take to be searchable
/// (a few runs of `serve.interval` 1 s, each a whole reconciliation).
const INTERVAL_RUNS: Duration = Duration::from_secs(60);

fn with_listen(target: &Target) -> (Target, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    (
        target.clone().set("RECONCILER__SERVE__LISTEN", &listen),
        format!("http://{listen}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_the_oplog_no_longer_holds_means_a_full_reconciliation_then_following() {
    // An oplog of 50 entries, pruned on demand below.
    let Some(mongo) = private_mongo(&["--oplog-max-entries", "50"]).await else {
        return;
    };
    let target = Target::new("follow_oplog")
        .with_mongo(&mongo.uri)
        .set("RECONCILER__SERVE__INTERVAL", "1h");
    let env = Env::for_target(&target).await;
    seed(&env, 20, 5).await;
    let messages = env.db.collection::<Document>("messages");
    let m = Collection::Messages;

    // follower-a follows, saves a token, and stops.
    let (a_target, a_base) = with_listen(&target);
    let mut a = a_target.spawn("follower-a", &["run"]);
    await_follow_state(&a_base, "following", Duration::from_secs(60)).await;
    let now = server_now(&env.db).await;
    let first = new_message("first", 1, now);
    messages.insert_one(first.clone()).await.unwrap();
    await_meili_doc(
        &target,
        m,
        "first-1",
        Some(expected(m, &first, now).unwrap().1),
        SOON,
    )
    .await;
    terminate(&a);
    assert!(wait_exit(&mut a, Duration::from_secs(30)).success());
    assert!(target
        .lease()
        .await
        .unwrap()
        .get_document("followToken")
        .is_ok());

    // While nobody follows, 200 messages arrive and the oplog keeps only 50 entries.
    let gap: Vec<Document> = (0..200).map(|n| new_message("gap", n, now)).collect();
    messages.insert_many(gap).await.unwrap();
    let pruned = env
        .db
        .client()
        .database("admin")
        .run_command(doc! { "secantusAdmin.pruneOplog": 1 })
        .await
        .expect("secantusdb prunes its oplog on demand");
    assert!(
        pruned.get_i64("pruned").unwrap_or(0) + i64::from(pruned.get_i32("pruned").unwrap_or(0))
            > 0,
        "{pruned}"
    );

    // follower-b cannot resume from the token: it reconciles, then follows.
    let (b_target, b_base) = with_listen(&target);
    let mut b = b_target.spawn("follower-b", &["run"]);
    await_follow_state(&b_base, "following", Duration::from_secs(60)).await;
    await_in_step(&env, SOON).await;
    let later = new_message("later", 1, now);
    messages.insert_one(later.clone()).await.unwrap();
    await_meili_doc(
        &target,
        m,
        "later-1",
        Some(expected(m, &later, now).unwrap().1),
        SOON,
    )
    .await;
    // Searchable first, flagged just after: the acknowledgement follows the task.
    await_in_step(&env, SOON).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    terminate(&b);
    assert!(wait_exit(&mut b, Duration::from_secs(30)).success());
    let (_, log) = output_of(b);
    assert!(
        log.contains("the saved resume token can no longer be used"),
        "follower-b found the token gone: {log}"
    );
    assert_eq!(
        log.matches("reconciliation finished").count(),
        1,
        "one full reconciliation before following"
    );
    assert!(
        log.contains("following the change stream from where it stood before the reconciliation"),
        "{log}"
    );
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_change_streams_falls_back_to_interval_runs() {
    let Some(mongo) = private_mongo(&["--standalone"]).await else {
        return;
    };
    let target = Target::new("follow_standalone")
        .with_mongo(&mongo.uri)
        .set("RECONCILER__SERVE__INTERVAL", "1s");
    let env = Env::for_target(&target).await;
    seed(&env, 20, 5).await;
    let (target, base) = with_listen(&target);
    let mut replica = target.spawn("replica-1", &["run"]);
    let status = await_follow_state(&base, "unsupported", SOON).await;
    assert!(status["follow"]["lagSecs"].is_null(), "{status}");

    // Interval runs pick up what is written: within a few runs, however
    // long each takes while other tests load the shared servers (a real
    // Meilisearch works through every index's tasks in one queue).
    insert_and_await_searchable(&env, &target, "fresh", INTERVAL_RUNS).await;
    eventually(SOON, "a completed (not following) lease", || async {
        let lease = target.lease().await?;
        (lease.get_str("status").ok() == Some("completed")
            && !lease.get_bool("following").unwrap_or(false))
        .then_some(())
    })
    .await;

    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    let (_, log) = output_of(replica);
    assert_eq!(
        log.matches("does not serve change streams").count(),
        1,
        "said once: {log}"
    );
    target.cleanup().await;
}
