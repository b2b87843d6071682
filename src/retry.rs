//! Every retry policy of the service, in one place: how long to wait between
//! attempts, how far the waits grow, what bounds them, and why. All are
//! `backon` exponential backoffs (each delay doubles up to a cap); the caller
//! decides *what* is worth another attempt and stops early when the lease is
//! lost or a shutdown begins.
//!
//! | policy | first delay | cap | bounded by | used by |
//! |---|---|---|---|---|
//! | [`lease_store`] | `period / 8` (10 ms … 1 s), jittered | `period` | the owner's safety deadline or `lease.unreachable_timeout` | `lease::{renewer,runner,follower}` |
//! | [`flag_writes`] | 100 ms, jittered | 5 s | [`FLAG_WRITES_FOR`] | `flag_retry` |
//! | [`server_startup`] | 500 ms, jittered | 8 s | [`SERVER_STARTUP_ATTEMPTS`] attempts | `servers` |
//! | [`meili_calls`] | 50 ms, jittered | 5 s | `retry_for` of waiting in all | `meili` |
//! | [`task_polling`] | `first` | `max` | the task ending | `meili` |
//! | [`stream_reopen`] | 500 ms | 8 s | 5 retries | `follow::owner` |
//!
//! Not a policy, and so not here: the server clock's `hello` is sent once
//! more at once when its connection fails (`lease::clock::server_now`), as
//! the driver does for reads.
//!
//! Jitter (each delay stretched by a random factor in `[1, 2)`) spreads the
//! replicas that all saw the same failover, so they do not retry in step.

use std::time::Duration;

use backon::ExponentialBuilder;

/// Delays from `first` doubling up to `cap` (at least `first`), without a
/// bound on their number: the base of every policy below.
fn doubling(first: Duration, cap: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(first)
        .with_max_delay(cap.max(first))
        .without_max_times()
}

/// A lease store call (read the server clock, claim, renew, complete, poll)
/// that failed transiently (a network error, a failover): endless jittered
/// delays from about `period / 8` (at least 10 ms, at most 1 s) doubling up
/// to `period`, the caller's own rhythm (`lease.renew_every` for renewals,
/// `lease.poll_every` for a follower's polls).
///
/// Endless, because retrying never extends what a retry may do: an owner
/// retries only until its local safety deadline (`lease::renewer`,
/// `lease::runner`), a follower only until `lease.unreachable_timeout`
/// (`lease::follower`).
pub(crate) fn lease_store(period: Duration) -> ExponentialBuilder {
    let first = (period / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
    doubling(first, period).with_jitter()
}

/// How long one flag write keeps being sent again ([`flag_writes`]): long
/// enough to ride out a replica-set election (seconds) and a primary's
/// restart, short enough that a run stuck on a server that stays down fails
/// and says so.
pub(crate) const FLAG_WRITES_FOR: Duration = Duration::from_secs(120);

/// A flag write on a chat collection that failed transiently (failover,
/// step-down, lost connection, write-concern error): jittered delays from
/// 100 ms doubling up to 5 s, for [`FLAG_WRITES_FOR`] (the caller stops by
/// elapsed time, counting the attempts themselves). Flag writes are
/// idempotent, so sending one again is always safe; an election usually ends
/// within a few of these delays.
pub(crate) fn flag_writes() -> ExponentialBuilder {
    doubling(Duration::from_millis(100), Duration::from_secs(5)).with_jitter()
}

/// Attempts at reaching a server at start-up ([`server_startup`]).
pub(crate) const SERVER_STARTUP_ATTEMPTS: usize = 5;

/// Reaching MongoDB and Meilisearch at start-up (`once`, `run`, `reindex`,
/// `verify --repair`): jittered delays from 500 ms doubling up to 8 s,
/// between [`SERVER_STARTUP_ATTEMPTS`] attempts, about 15 s in all. Long
/// enough for a server still starting beside us (same compose file, same
/// pod), short enough for a deploy job to fail fast with exit code 4.
/// Interactive commands try once instead (`servers::connect_mongo`).
pub(crate) fn server_startup() -> ExponentialBuilder {
    doubling(Duration::from_millis(500), Duration::from_secs(8))
        .with_jitter()
        .with_max_times(SERVER_STARTUP_ATTEMPTS - 1)
}

/// A Meilisearch call that failed transiently (connection refused, no answer
/// in time, 5xx, 408, 429): jittered delays from 50 ms doubling up to 5 s,
/// until the delays add up to `retry_for` (`meili::DEFAULT_RETRY_FOR`,
/// 5 minutes): a run rides out a Meilisearch restart instead of failing and
/// starting over. The first delays are short because a 429 or a dropped
/// keep-alive connection usually clears at once.
pub(crate) fn meili_calls(retry_for: Duration) -> ExponentialBuilder {
    doubling(Duration::from_millis(50), Duration::from_secs(5))
        .with_jitter()
        .with_total_delay(Some(retry_for))
}

/// Polling a Meilisearch task until it ends: first after `first`, the
/// interval doubling up to `max`, without jitter (one poller per task).
/// Most tasks end within milliseconds, so the first polls come quickly; a
/// long task is then polled every `max`, which bounds how late its end is
/// seen.
pub(crate) fn task_polling(first: Duration, max: Duration) -> ExponentialBuilder {
    doubling(first, max)
}

/// Reopening a change stream after a transient failure (follow mode):
/// 0.5, 1, 2, 4 and 8 s, then the owner gives up on the stream (its run
/// fails and the interval schedule takes over). A resume point lost from the
/// oplog is not retried at all: no delay brings it back.
pub(crate) fn stream_reopen() -> ExponentialBuilder {
    doubling(Duration::from_millis(500), Duration::from_secs(8)).with_max_times(5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    /// Whole milliseconds (`backon` multiplies in `f32`: 40 ms may come out
    /// a few nanoseconds short).
    fn ms(delays: impl Iterator<Item = Duration>) -> Vec<u64> {
        delays
            .map(|d| (d.as_secs_f64() * 1000.0).round() as u64)
            .collect()
    }

    #[test]
    fn lease_store_delays_grow_and_stay_bounded() {
        let first: Vec<Duration> = lease_store(Duration::from_millis(800))
            .build()
            .take(20)
            .collect();
        assert_eq!(first.len(), 20);
        // Jitter adds up to one more delay on top of the base.
        assert!(first.iter().all(|d| *d <= Duration::from_millis(1600)));
        assert!(first[0] < first[19]);
    }

    #[test]
    fn server_startup_makes_five_attempts() {
        assert_eq!(
            server_startup().build().count(),
            SERVER_STARTUP_ATTEMPTS - 1
        );
    }

    #[test]
    fn meili_calls_stop_once_the_delays_reach_the_budget() {
        let total: Duration = meili_calls(Duration::from_secs(20)).build().sum();
        assert!(total <= Duration::from_secs(20));
        assert!(total > Duration::from_secs(10));
    }

    #[test]
    fn task_polling_doubles_up_to_its_cap() {
        let polls = task_polling(Duration::from_millis(10), Duration::from_millis(250));
        assert_eq!(ms(polls.build().take(7)), [10, 20, 40, 80, 160, 250, 250]);
    }

    #[test]
    fn stream_reopen_waits_five_times() {
        assert_eq!(
            ms(stream_reopen().build()),
            [500, 1_000, 2_000, 4_000, 8_000]
        );
    }
}
