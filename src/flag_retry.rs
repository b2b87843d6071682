//! Retries of the flag writes on the chat collections (docs/design.md §3.4).
//!
//! Flag writes are multi-document updates, which the driver does not retry
//! itself, and a replica-set failover, a step-down, a dropped connection or
//! a write-concern error (applied, not confirmed) would otherwise fail the
//! whole run. Every flag write is idempotent (setting a flag to the value it
//! may already have, under a filter that names the version), so it is simply
//! sent again: with backoff, each attempt after the lease guard's check (a
//! lost lease stops the retries at once), as [`crate::retry::flag_writes`]
//! says (for at most [`crate::retry::FLAG_WRITES_FOR`]). Errors
//! that another attempt cannot fix (a write error, a bad filter) are not
//! retried.
//!
//! Below `mongo`, which sends its flag writes through here: the retry loop
//! is generic over the caller's error type and knows only the driver's.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use mongodb::error::{Error, ErrorKind, WriteFailure};

use crate::lease::{Guard, LeaseLost};
use crate::retry::FLAG_WRITES_FOR;

/// Flag writes sent again in this process so far (also the
/// `reconciler_flag_write_retries_total` metric).
static RETRIES: AtomicU64 = AtomicU64::new(0);

/// For tests: flag writes sent again in this process so far (the tests
/// assert on retries without scraping the metric).
pub fn retries() -> u64 {
    RETRIES.load(Ordering::Relaxed)
}

/// Server error codes that mean "not now, try again" (MongoDB's retryable
/// write errors, plus a write concern that could not be satisfied in time).
const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    64,    // WriteConcernFailed (wtimeout)
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    189,   // PrimarySteppedDown
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];

/// Whether another attempt of the same write may succeed.
pub fn is_transient(error: &Error) -> bool {
    if error.contains_label("RetryableWriteError") || error.contains_label("NetworkError") {
        return true;
    }
    match &*error.kind {
        ErrorKind::Io(_)
        | ErrorKind::ServerSelection { .. }
        | ErrorKind::ConnectionPoolCleared { .. } => true,
        ErrorKind::Command(command) => TRANSIENT_CODES.contains(&command.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(_)) => true,
        _ => false,
    }
}

/// One attempt's failure (`E`: the caller's error, `mongo`'s `MongoError`):
/// worth another attempt, or not.
pub(crate) enum Attempt<E> {
    Transient(E),
    Final(E),
}

/// Runs `write` until it succeeds, fails for good, the lease is lost, or
/// [`crate::retry::FLAG_WRITES_FOR`] has passed (then the last error is returned). Each attempt
/// starts with `guard.check()`.
pub(crate) async fn with_retries<T, E, F, Fut>(
    what: &str,
    guard: &Guard,
    mut write: F,
) -> Result<T, E>
where
    E: From<LeaseLost> + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt<E>>>,
{
    let started = Instant::now();
    let mut delays = crate::retry::flag_writes().build();
    loop {
        guard.check()?;
        let error = match write().await {
            Ok(value) => return Ok(value),
            Err(Attempt::Transient(error)) if started.elapsed() < FLAG_WRITES_FOR => error,
            Err(Attempt::Transient(error) | Attempt::Final(error)) => return Err(error),
        };
        let delay = delays.next().unwrap_or(Duration::from_secs(5));
        tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64,
            "{what}: transient MongoDB error; the write is idempotent, sending it again");
        RETRIES.fetch_add(1, Ordering::Relaxed);
        crate::metrics::flag_write_retried();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = guard.cancelled() => {}
        }
    }
}
