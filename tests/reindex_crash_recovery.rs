//! A reindex stopped in the middle of its build (the lease lost) leaves the
//! live index untouched and an unswapped `<uid>_reindex` behind; the next
//! reindex deletes that leftover, completes, and ends clean: no `_reindex`
//! index, exactly the expected documents and flags.

use crate::support;

use std::time::Duration;

use meili_reconciler::lease::{Guard, LeaseLost};
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reindex, ReconcileError, ReindexOptions, SyncOptions};
use support::chat_data::{seed, server_now, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_reindex_is_cleaned_up_by_the_next_one() {
    let env = Env::new("ri_crash").await;
    seed(&env, 2_000, 200).await;
    env.run().await.expect("initial reconciliation");
    let live = env.uid(Collection::Messages);
    let live_before = env.meili_docs(Collection::Messages).await;

    // Small pages with a pause between them: the build takes a while on any server.
    let slow = SyncOptions {
        batch_docs: 100,
        delay: Duration::from_millis(50),
        ..env.opts.clone()
    };
    let guard = Guard::unfenced();
    let progress = Progress::new();
    let watcher = {
        let (guard, progress) = (guard.clone(), progress.clone());
        tokio::spawn(async move {
            loop {
                let s = progress.snapshot();
                if s.phase == "reindex build messages" && s.done > 0 {
                    guard.cancel(LeaseLost::TakenOver);
                    return s;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let crashed = reindex(
        &env.db,
        &env.meili,
        &slow,
        &ReindexOptions::default(),
        &guard,
        &progress,
    )
    .await;
    let stopped_at = tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("the reindex was stopped during its build, not left to finish")
        .unwrap();
    println!("stopped during {stopped_at:?}");
    assert!(
        matches!(
            crashed,
            Err(ReconcileError::LeaseLost(LeaseLost::TakenOver))
        ),
        "{crashed:?}"
    );
    // The crash left a build index, never swapped in; search still has the
    // whole live index. The build may hold every document: batches are sent
    // ahead of their acknowledgement, and on a loaded machine all of them
    // can be enqueued before the first is acknowledged and the stop comes.
    let build = env.build_uid(Collection::Messages);
    let built = env.meili.document_count(&build).await.unwrap();
    assert!(
        built > 0 && built <= live_before.len() as u64,
        "the build left: {built} of {}",
        live_before.len()
    );
    assert_eq!(env.meili_docs(Collection::Messages).await, live_before);
    assert!(env.meili.index(&live).await.unwrap().is_some());

    let summary = env
        .reindex(&ReindexOptions::default())
        .await
        .expect("the next reindex");
    println!("{summary}");
    for c in Collection::ALL {
        assert!(
            env.meili.index(&env.build_uid(c)).await.unwrap().is_none(),
            "no {} left",
            env.build_uid(c)
        );
    }
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
