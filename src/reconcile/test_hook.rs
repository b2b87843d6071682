//! A fault-injection hook for tests ONLY, compiled in with the cargo feature
//! `fault-injection` (which `scripts/test` turns on; release builds leave it
//! out, so they neither read its variables nor carry its code). Tests need
//! it to kill a process (SIGKILL), or change the data under it, at an exact
//! step of a run, which no outside signal can time:
//! `RECONCILER_TEST_PAUSE_AFTER=<step>` makes a run stop right after that
//! step (a reindex's `build`, `mark`, `swap`, `flags`, `index`, `drop`;
//! indexing's `page-read` — a page read from MongoDB —, `batch-enqueued` — a
//! batch's task enqueued, not yet awaited —, `acknowledged` — a batch
//! acknowledged; a refused batch's `refused-batch-reread` — read again from
//! MongoDB, before it is bisected; a drift repair's `drift-meili-ids` and
//! `drift-mongo-ids`; the head start's `head-start-counting` — before the
//! plan's count, while the backlog's page is read and sent),
//! printing `test hook: paused after <step>` to stderr and still holding its
//! lease. It waits forever, or, when `RECONCILER_TEST_RESUME_FILE` names a
//! file, until that file exists. Unset, it does nothing; without the feature
//! [`pause_after`] is empty and each call site compiles to nothing.

/// The environment variable naming the step to pause after.
#[cfg(feature = "fault-injection")]
const PAUSE_AFTER: &str = "RECONCILER_TEST_PAUSE_AFTER";
/// The environment variable naming the file whose creation ends the pause.
#[cfg(feature = "fault-injection")]
const RESUME_FILE: &str = "RECONCILER_TEST_RESUME_FILE";

/// Pauses if the environment asks to pause after `step`.
#[cfg(feature = "fault-injection")]
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
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            eprintln!("test hook: resumed after {step}");
        }
    }
}

/// Does nothing: built without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) async fn pause_after(_step: &str) {}
