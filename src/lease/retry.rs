//! Delays between retries of a MongoDB operation that failed transiently
//! (network error, failover): exponential with jitter, via `backon`.
//!
//! Retrying never extends what a retry may do: an owner retries only until
//! its local safety deadline (`renewer.rs`, `runner.rs`), a follower only
//! until `unreachable_timeout` (`follower.rs`).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// Endless jittered delays from about `period / 8` (at least 10 ms, at most
/// 1 s) doubling up to `period`.
pub(crate) fn delays(period: Duration) -> impl Iterator<Item = Duration> {
    let min = (period / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
    ExponentialBuilder::new()
        .with_min_delay(min)
        .with_max_delay(period.max(min))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_bounded() {
        let first: Vec<Duration> = delays(Duration::from_millis(800)).take(20).collect();
        assert_eq!(first.len(), 20);
        // Jitter adds up to one more delay on top of the base.
        assert!(first.iter().all(|d| *d <= Duration::from_millis(1600)));
        assert!(first[0] < first[19]);
    }
}
