//! A fault-injection hook for tests ONLY: `RECONCILER_TEST_PAUSE_AFTER=<step>`
//! makes a run stop right after that step (a reindex's `build`, `mark`,
//! `swap`, `flags`, `index`, `drop`; indexing's `page-read` — a page read
//! from MongoDB —, `batch-enqueued` — a batch's task enqueued, not yet
//! awaited —, `acknowledged` — a batch acknowledged; a refused batch's
//! `refused-batch-reread` — read again from MongoDB, before it is bisected;
//! a drift repair's `drift-meili-ids` and `drift-mongo-ids`; the head
//! start's `head-start-counting` — before the plan's count, while the
//! backlog's page is read and sent),
//! printing `test hook: paused after <step>` to stderr and still holding its
//! lease — so a test can kill the process (SIGKILL) at exactly that point, or
//! change the data under it. It waits forever, or, when
//! `RECONCILER_TEST_RESUME_FILE` names a file, until that file exists. Unset
//! (always, outside tests), it does nothing.

use std::time::Duration;

/// The environment variable naming the step to pause after.
const PAUSE_AFTER: &str = "RECONCILER_TEST_PAUSE_AFTER";
/// The environment variable naming the file whose creation ends the pause.
const RESUME_FILE: &str = "RECONCILER_TEST_RESUME_FILE";

/// Pauses if the environment asks to pause after `step`.
pub(crate) async fn pause_after(step: &str) {
    if !std::env::var(PAUSE_AFTER).is_ok_and(|s| s == step) {
        return;
    }
    tracing::warn!(step, "test hook: paused ({PAUSE_AFTER})");
    eprintln!("test hook: paused after {step}");
    match std::env::var_os(RESUME_FILE) {
        None => std::future::pending::<()>().await,
        Some(file) => {
            // A test hook: polling a file is the simplest signal a test
            // process can give.
            while !std::path::Path::new(&file).exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            eprintln!("test hook: resumed after {step}");
        }
    }
}
