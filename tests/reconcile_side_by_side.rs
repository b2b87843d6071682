//! Both collections are reconciled side by side (docs/design.md §4.2): the
//! conversations are sent while the messages are still being indexed, not
//! after them, and the messages do not wait for the conversations either.
//!
//! Proven by events, not by timing: the stand-in holds every document
//! addition (`/_standin/hold-additions`), so no batch of either collection
//! can be confirmed; a run that did one collection after the other would
//! never post the second one's first batch while held.

use crate::support;

use std::time::Duration;

use meili_reconciler::lease::Guard;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reconcile, SyncOptions};
use support::chat_data::{seed, server_now, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_sent_while_messages_are_still_indexing() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let env = Env::on_standin(&standin, "side_by_side").await;
    seed(&env, 600, 200).await;
    // Settings and deletions go on being processed: only the additions,
    // whose confirmation a serial run would wait for, are held.
    knobs.hold_additions(true).await;
    let opts = SyncOptions {
        batch_docs: 50,
        in_flight: 2,
        ..env.opts.clone()
    };
    let run = {
        let (db, meili, opts) = (env.db.clone(), env.meili.clone(), opts.clone());
        tokio::spawn(async move {
            reconcile(&db, &meili, &opts, &Guard::unfenced(), &Progress::new()).await
        })
    };
    // Generous: on a serial run neither wait would ever end, so this bound
    // only turns a hang into a failure.
    let both_sent = async {
        knobs.await_documents_post("messages", &run).await;
        knobs.await_documents_post("convos", &run).await;
    };
    let waited = tokio::time::timeout(Duration::from_secs(120), both_sent).await;
    // The premise: while held, no document task had been confirmed.
    let confirmed = env
        .meili
        .tasks("types=documentAdditionOrUpdate&statuses=succeeded,failed")
        .await
        .unwrap();
    knobs.hold_additions(false).await;
    assert!(
        confirmed["results"]
            .as_array()
            .is_some_and(|t| t.is_empty()),
        "the stand-in's hold did not hold: {confirmed}"
    );
    assert!(
        waited.is_ok(),
        "with no document task confirmed, only one collection had a batch posted: \
         one collection waited for the other"
    );
    run.await.expect("join").expect("reconcile");
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
