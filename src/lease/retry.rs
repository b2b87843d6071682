//! Delays between retries of a lease store call that failed transiently
//! (network error, failover): the [`crate::retry::lease_store`] policy.

use std::time::Duration;

use backon::BackoffBuilder;

/// Endless jittered delays growing up to `period` ([`crate::retry::lease_store`]).
pub(crate) fn delays(period: Duration) -> impl Iterator<Item = Duration> {
    crate::retry::lease_store(period).build()
}
