//! A fault-injection hook for tests ONLY: `RECONCILER_TEST_PAUSE_AFTER=<step>`
//! makes a reindex stop right after that step (`build`, `mark`, `swap`,
//! `flags`, `index`, `drop`) and wait forever, still holding its lease, after
//! printing `test hook: paused after <step>` to stderr — so a test can kill
//! the process (SIGKILL) at exactly that point and check what the next run
//! makes of it. Unset (always, outside tests), it does nothing.

/// The environment variable naming the step to pause after.
pub const PAUSE_AFTER: &str = "RECONCILER_TEST_PAUSE_AFTER";

/// Pauses forever if the environment asks to pause after `step`.
pub(crate) async fn pause_after(step: &str) {
    if std::env::var(PAUSE_AFTER).is_ok_and(|s| s == step) {
        tracing::warn!(step, "test hook: paused ({PAUSE_AFTER})");
        eprintln!("test hook: paused after {step}");
        std::future::pending::<()>().await;
    }
}
