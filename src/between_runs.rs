//! What a `run` replica does between two runs, in both of its modes (the
//! interval schedule in `serve` and follow mode's owner and replica loop in
//! `follow`): the jittered interval, the delay until a failed run may be
//! retried (the lease's `retryAt`), and the unindexed-backlog gauge counted
//! after each run. Below `serve` and `follow`, which both use it.

use std::time::Duration;

use rand::Rng;

use crate::job::Reconciler;
use crate::lease::{self, LeaseOptions};
use crate::mongo::{self, Collection};

/// Time until the lease allows a retry of the failed run, by MongoDB's clock.
pub(crate) async fn retry_delay(reconciler: &Reconciler, lease: &LeaseOptions) -> Option<Duration> {
    let read = lease::read_status(&reconciler.db, lease, |_| Default::default());
    let secs = read.await.ok()?.retry_in_secs?;
    // A little past retryAt, so the claim is allowed when it arrives.
    Some(Duration::from_secs_f64(secs.max(0.0)) + Duration::from_millis(100))
}

/// Counts the unindexed backlog for the metrics (after each run, on every
/// replica): the unflagged searchable documents only, by LibreChat's sync
/// index ([`mongo::count_unflagged`]) — not the whole collection, as the
/// plan's counts read it.
pub async fn update_backlog(reconciler: &Reconciler) {
    let Ok(now) = mongo::server_time(&reconciler.db).await else {
        return;
    };
    let (db, rules) = (&reconciler.db, &reconciler.sync.rules);
    for collection in Collection::ALL {
        if let Ok(unindexed) = mongo::count_unflagged(db, rules, collection, now).await {
            crate::metrics::unindexed_backlog(collection.name(), unindexed);
        }
    }
}

/// `interval` ± 10%, so replicas started together drift apart.
pub(crate) fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(rand::rng().random_range(0.9..=1.1))
}
