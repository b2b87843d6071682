//! The exact comparison in hash partitions (docs/design.md §4.11): with a
//! memory budget too small for every document's digest, `verify` finds the
//! same differences and `verify --repair` fixes them all.

use crate::support;

use meili_reconciler::lease::Guard;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::verify::{repair, verify};
use meili_reconciler::reconcile::SyncOptions;
use serde_json::json;
use support::chat_data::{seed, server_now, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_find_and_repair_what_one_pass_does() {
    let env = Env::new("exact_parts").await;
    seed(&env, 400, 40).await;
    env.run().await.expect("first run");

    // Plant differences: 10 missing, 10 stale, 10 ghosts.
    let guard = Guard::unfenced();
    let uid = env.uid(Collection::Messages);
    let in_meili = env.meili_docs(Collection::Messages).await;
    let ids: Vec<String> = in_meili.keys().take(20).cloned().collect();
    env.delete_docs(&uid, &ids[..10]).await;
    let mut planted: Vec<_> = ids[10..]
        .iter()
        .map(|id| {
            let mut old = in_meili[id].clone();
            old["text"] = json!("AN OLDER VERSION");
            old
        })
        .collect();
    planted.extend(
        (0..10)
            .map(|i| json!({"messageId": format!("ghost-{i}"), "user": "user-1", "text": "gone"})),
    );
    env.put_docs(&uid, &planted).await;

    // 17 bytes a document: 1,700 bytes hold 100, so ~400 take 4+ partitions.
    let small = SyncOptions {
        compare_memory: 1_700,
        ..env.opts.clone()
    };
    let progress = Progress::new();
    let verify_with = |opts: SyncOptions| {
        let (env, progress) = (&env, &progress);
        async move {
            let report = verify(
                &env.db,
                &env.meili,
                &opts,
                Some(Collection::Messages),
                progress,
            );
            report.await.unwrap().indexes.remove(0).comparison
        }
    };
    let (a, b) = (
        &verify_with(env.opts.clone()).await,
        &verify_with(small.clone()).await,
    );
    assert_eq!(
        (a.missing.count, a.stale.count, a.unexpected.count),
        (10, 10, 10),
        "{a:?}"
    );
    assert_eq!(
        a.partitions, 1,
        "the default budget holds every digest: {a:?}"
    );
    assert!(b.partitions >= 4, "1,700 bytes hold 100 digests: {b:?}");
    assert_eq!(
        (b.meili_documents, b.mongo_indexable, b.matching),
        (a.meili_documents, a.mongo_indexable, a.matching),
        "{b:?}"
    );
    assert_eq!(
        (b.missing.count, b.stale.count, b.unexpected.count),
        (10, 10, 10),
        "{b:?}"
    );

    let summary = repair(
        &env.db,
        &env.meili,
        &small,
        Some(Collection::Messages),
        &guard,
        &progress,
    )
    .await
    .unwrap();
    let m = &summary.collections[0];
    assert_eq!((m.indexed, m.deleted), (20, 10), "{summary}");
    let after = verify(&env.db, &env.meili, &env.opts, None, &progress)
        .await
        .unwrap();
    assert!(after.clean, "{after:?}");
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
