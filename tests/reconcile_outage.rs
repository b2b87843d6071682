//! Meilisearch unavailable mid-run: calls are retried with backoff and the run
//! completes; nothing is acknowledged that Meilisearch did not confirm.

use crate::support;

use std::time::Duration;

use meili_reconciler::lease::Guard;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reconcile, SyncOptions};
use support::chat_data::{seed, Env};

async fn outage_mid_run(mode: &str) {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let env = Env::on_standin(&standin, &format!("outage_{mode}")).await;
    let now = seed(&env, 3_000, 100).await;
    knobs.set_latency(50).await;
    let opts = SyncOptions {
        batch_docs: 300,
        ..env.opts.clone()
    };
    let progress = Progress::new();
    let run = {
        let (db, meili, progress) = (env.db.clone(), env.meili.clone(), progress.clone());
        tokio::spawn(
            async move { reconcile(&db, &meili, &opts, &Guard::unfenced(), &progress).await },
        )
    };
    // Once the first batches are acknowledged, take Meilisearch down.
    loop {
        let s = progress.snapshot();
        if s.phase.starts_with("index") && s.done > 0 {
            break;
        }
        assert!(!run.is_finished(), "the run ended before the outage");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let retried_before = env.meili.retries();
    // An outage the run meets. A run busy with MongoDB for a whole outage
    // (its reads and flag writes, slow on a loaded machine) sends nothing
    // during it: then another outage follows, once this one is over.
    const OUTAGE: Duration = Duration::from_millis(1500);
    for _ in 0..10 {
        let started = std::time::Instant::now();
        knobs.outage(mode, OUTAGE.as_millis() as u64).await;
        let over = started + OUTAGE + Duration::from_millis(500);
        while std::time::Instant::now() < over
            && env.meili.retries() == retried_before
            && !run.is_finished()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if env.meili.retries() > retried_before || run.is_finished() {
            break;
        }
        tokio::time::sleep_until(over.into()).await;
    }
    let summary = run
        .await
        .unwrap()
        .expect("the run completes after the outage");
    println!("{summary}");
    env.assert_in_step(now, &[]).await;
    assert!(
        env.meili.retries() > retried_before,
        "the run met the outage ({mode}) and sent calls again"
    );
    if mode == "unavailable" {
        let refused = knobs
            .requests()
            .await
            .iter()
            .filter(|r| r["status"] == 503)
            .count();
        assert!(refused > 0, "the outage was hit and retried");
    }
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_meilisearch_is_retried() {
    outage_mid_run("unavailable").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_retried() {
    outage_mid_run("refuse").await;
}
