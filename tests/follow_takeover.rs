//! Follow mode across owners, with real `run` processes while an
//! application writes (inserts, edits, deletes, messages turned temporary
//! and back): a following owner killed mid-stream is resumed from its saved
//! token by the next owner and the index ends exact; an owner stopped
//! (SIGSTOP) past its lease writes nothing after it resumes, logs the lost
//! lease and goes back to waiting; `once --force` gets the lease handed over
//! and following resumes after it. `serve.interval` is an hour: only the
//! stream can have brought the index in step.

use crate::support;

use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Document};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::chat_data::{expected, seed, server_now, Env};
use support::cli::{
    eventually, free_port, is_labelled, output_of, terminate, wait_exit, Replica, Target,
};
use support::counting_proxy::{HttpRequests, MongoWrites};
use support::follow::*;

const SOON: Duration = Duration::from_secs(20);

fn fleet(tag: &str) -> Target {
    Target::new(tag)
        .set("RECONCILER__SERVE__INTERVAL", "1h")
        .set("RECONCILER__FOLLOW__PRE_IMAGES", "enable")
}

/// A replica of `target` with its own HTTP port; returns it and its base URL.
fn replica(target: &Target, owner: &str, env: &[(&str, &str)]) -> (Replica, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut vars = vec![("RECONCILER__SERVE__LISTEN", listen.as_str())];
    vars.extend_from_slice(env);
    (
        target.spawn_with(owner, &["run"], &vars),
        format!("http://{listen}"),
    )
}

fn reconciliations_in(log: &str) -> usize {
    log.matches("reconciliation finished").count()
}

async fn lease_owner(target: &Target) -> Option<(String, i64, bool)> {
    let lease = target.lease().await?;
    Some((
        lease.get_str("owner").ok()?.to_string(),
        lease.get_i64("epoch").ok()?,
        lease.get_bool("following").unwrap_or(false),
    ))
}

async fn token_saved_at(target: &Target) -> Option<mongodb::bson::DateTime> {
    target
        .lease()
        .await?
        .get_datetime("followTokenSavedAt")
        .ok()
        .copied()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_follower_is_resumed_from_its_token_and_the_index_ends_exact() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let target = fleet("follow_kill");
    let env = Env::for_target(&target).await;
    seed(&env, 60, 10).await;
    let (mut a, a_base) = replica(&target, "follower-a", &[]);
    await_follow_state(&a_base, "following", Duration::from_secs(60)).await;
    let (b, b_base) = replica(&target, "follower-b", &[]);
    await_follow_state(&b_base, "waiting", SOON).await;

    let writer = Writer::start(target.db().await, "live", Duration::from_millis(15));
    eventually(SOON, "follower-a to apply the writer's changes", || async {
        (applied(&a_base, "insert").await >= 20).then_some(())
    })
    .await;
    // Killed mid-stream: the writer keeps writing.
    a.child.kill().unwrap();
    let _ = a.child.wait();
    await_follow_state(&b_base, "following", SOON).await;
    eventually(SOON, "follower-b to apply changes", || async {
        (applied(&b_base, "insert").await >= 10).then_some(())
    })
    .await;
    let written = writer.stop().await;

    await_in_step(&env, SOON).await;
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    let (owner, _, following) = lease_owner(&target).await.unwrap();
    assert!(
        is_labelled(&owner, "follower-b") && following,
        "{owner} {following}"
    );

    let b_log = b.stderr_so_far();
    assert!(
        b_log.contains("resuming the change stream from the saved token"),
        "follower-b resumed from the token: {b_log}"
    );
    assert_eq!(
        reconciliations_in(&b_log),
        0,
        "follower-b never reconciled: the stream alone made the index exact"
    );
    eprintln!("the writer wrote {written} changes");
    let mut b = b;
    terminate(&b);
    assert!(wait_exit(&mut b, Duration::from_secs(30)).success());
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_stopped_past_its_lease_writes_nothing_after_it_resumes() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let target = fleet("follow_sigstop");
    let env = Env::for_target(&target).await;
    seed(&env, 40, 10).await;
    // follower-a reaches both servers only through proxies that record what it sends.
    let mongo_upstream = support::lease_harness::primary_address(&env.db).await;
    let mongo = MongoWrites::start(mongo_upstream).await;
    let meili_upstream = target
        .meili_host
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let meili = HttpRequests::start(meili_upstream).await;
    let mongo_uri = format!("mongodb://{}/?directConnection=true", mongo.addr);
    let meili_host = format!("http://{}", meili.addr);
    let (a, a_base) = replica(
        &target,
        "follower-a",
        &[("MONGO_URI", &mongo_uri), ("MEILI_HOST", &meili_host)],
    );
    await_follow_state(&a_base, "following", Duration::from_secs(60)).await;
    let (b, b_base) = replica(&target, "follower-b", &[]);
    await_follow_state(&b_base, "waiting", SOON).await;

    // follower-a applies changes (through its proxies)...
    let saved_before = token_saved_at(&target).await;
    let now = server_now(&env.db).await;
    let messages = env.db.collection::<Document>("messages");
    let first = new_message("before-stop", 1, now);
    messages.insert_one(first.clone()).await.unwrap();
    let m = Collection::Messages;
    let shape = |d: &Document| expected(m, d, now).unwrap().1;
    await_meili_doc(&target, m, "before-stop-1", Some(shape(&first)), SOON).await;
    eventually(SOON, "its acknowledgement", || async {
        let flagged = messages
            .count_documents(doc! { "messageId": "before-stop-1", "_meiliIndex": true })
            .await
            .unwrap();
        (flagged == 1).then_some(())
    })
    .await;
    // ...and is idle once it saved the token after them.
    eventually(SOON, "the token saved after them", || async {
        (token_saved_at(&target).await > saved_before).then_some(())
    })
    .await;
    assert!(
        mongo.writes().keys().any(|k| k == "update messages"),
        "the proxy sees follower-a's acknowledgements: {:?}",
        mongo.writes()
    );
    assert!(
        !meili.writes().is_empty(),
        "the proxy sees follower-a's additions"
    );
    let (_, epoch_a, _) = lease_owner(&target).await.unwrap();

    // ...then stops, past its lease: follower-b takes over and follows,
    // and applies what is written meanwhile.
    let pid = Pid::from_raw(a.child.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    eventually(SOON, "follower-b to own and follow", || async {
        let (owner, _, following) = lease_owner(&target).await?;
        (is_labelled(&owner, "follower-b") && following).then_some(())
    })
    .await;
    let during: Vec<Document> = (1..=3)
        .map(|n| new_message("during-stop", n, now))
        .collect();
    messages.insert_many(during.clone()).await.unwrap();
    for (n, doc) in during.iter().enumerate() {
        let id = format!("during-stop-{}", n + 1);
        await_meili_doc(&target, m, &id, Some(shape(doc)), SOON).await;
    }
    // A delete is work for anyone who sees it, even after follower-b did it.
    assert!(meili_doc(&target, m, "msg-0").await.is_some());
    messages
        .delete_one(doc! { "messageId": "msg-0" })
        .await
        .unwrap();
    await_meili_doc(&target, m, "msg-0", None, SOON).await;

    // follower-a resumes with those changes waiting in its stream.
    mongo.reset();
    meili.reset();
    kill(pid, Signal::SIGCONT).unwrap();
    await_follow_state(&a_base, "waiting", SOON).await;
    let after = new_message("after-stop", 1, now);
    messages.insert_one(after.clone()).await.unwrap();
    await_meili_doc(&target, m, "after-stop-1", Some(shape(&after)), SOON).await;
    await_in_step(&env, SOON).await;
    // Give a straggler every chance to show itself.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let chat_writes: Vec<String> = mongo
        .writes()
        .into_keys()
        .filter(|k| k.ends_with(" messages") || k.ends_with(" conversations"))
        .collect();
    assert!(
        chat_writes.is_empty(),
        "follower-a wrote to MongoDB after it resumed: {chat_writes:?}"
    );
    assert!(
        meili.writes().is_empty(),
        "follower-a wrote to Meilisearch after it resumed: {:?}",
        meili.writes()
    );
    let (owner, epoch, following) = lease_owner(&target).await.unwrap();
    assert!(is_labelled(&owner, "follower-b"), "{owner}");
    assert!(following && epoch > epoch_a);
    let a_log = a.stderr_so_far();
    assert!(
        a_log.contains("lease lost"),
        "follower-a logs the lost lease: {a_log}"
    );
    assert!(
        a_log.contains("waiting for the lease again"),
        "and goes back to waiting: {a_log}"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    for mut replica in [a, b] {
        terminate(&replica);
        assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    }
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn once_gets_the_lease_handed_over_and_following_resumes_after_it() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    handover_then_resume(
        "follow_handover",
        &["once", "--force", "--wait-timeout", "60s"],
    )
    .await;
}

/// A forced reindex and a follower never write the same index at once: the
/// reindex asks for the lease, the follower stops its stream and releases
/// it, and follows again (from its token) once the reindex completed.
#[tokio::test(flavor = "multi_thread")]
async fn reindex_gets_the_lease_handed_over_and_following_resumes_after_it() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    handover_then_resume(
        "follow_handover_reindex",
        &["reindex", "--wait-timeout", "60s"],
    )
    .await;
}

async fn handover_then_resume(tag: &str, command: &'static [&'static str]) {
    let target = fleet(tag);
    let env = Env::for_target(&target).await;
    seed(&env, 40, 10).await;
    let (mut a, a_base) = replica(&target, "follower-a", &[]);
    await_follow_state(&a_base, "following", Duration::from_secs(60)).await;
    let (_, epoch_a, _) = lease_owner(&target).await.unwrap();

    let once = target.spawn("once-1", command);
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let mut once = once;
        let status = wait_exit(&mut once, Duration::from_secs(90));
        let (out, err) = output_of(once);
        (status.code(), out, err)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{command:?} exits 0\n{out}\n{err}");
    assert!(
        out.contains("docs/s"),
        "{command:?} did the work itself: {out}"
    );

    // follower-a follows again, resuming from its token: no reconciliation.
    eventually(SOON, "follower-a to follow again", || async {
        let (owner, epoch, following) = lease_owner(&target).await?;
        (is_labelled(&owner, "follower-a") && following && epoch == epoch_a + 2).then_some(())
    })
    .await;
    await_follow_state(&a_base, "following", SOON).await;
    insert_and_await_searchable(&env, &target, "after-once", SOON).await;

    terminate(&a);
    assert!(wait_exit(&mut a, Duration::from_secs(30)).success());
    let (_, log) = output_of(a);
    assert!(log.contains("handing it over"), "{log}");
    assert!(
        log.contains("resuming the change stream from the saved token"),
        "{log}"
    );
    assert_eq!(reconciliations_in(&log), 1, "only follower-a's first");
    let lease = target.lease().await.unwrap();
    assert!(lease.get_document("followToken").is_ok());
    target.cleanup().await;
}
