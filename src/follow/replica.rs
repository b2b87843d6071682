//! A `run` replica in follow mode (docs/design.md §6.1): it waits for the
//! lease wanting it for itself (`own_run_only`: another replica's completion
//! never satisfies it), follows as its owner (`owner`), and when the lease
//! is handed over (to `once`, `reindex`, `verify --repair`), lost, or a run
//! failed, it goes back to waiting (after the failure's `retryAt`). `run`
//! comes here only once the server said it serves change streams (or could
//! not be asked: the owner finds out, [`super::mode`]); when it turns out
//! not to, `run` falls back to interval-only reconciliation.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::owner::Owner;
use super::{FollowOptions, FollowState, ReplicaReport};
use crate::job::{Reconciler, RunOutcome};
use crate::lease::{self, LeaseError, LeaseOptions};
use crate::metrics;
use crate::shutdown::Shutdown;

/// How following ended for this replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FollowEnd {
    /// Shutdown was requested.
    Stopped,
    /// The server does not serve change streams: reconcile on the interval.
    Unsupported,
}

/// Waits for the lease and follows as its owner, again and again, until
/// shutdown (or until following turns out not to be possible).
pub(crate) async fn run(
    reconciler: &Reconciler,
    options: &FollowOptions,
    lease: &LeaseOptions,
    state: &Arc<dyn ReplicaReport>,
    shutdown: &Shutdown,
) -> FollowEnd {
    let mut lease = lease.clone();
    lease.own_run_only = true;
    lease.request_handover = false;
    lease.wait_timeout = None;
    while !shutdown.is_requested() {
        state.follow().set_state(FollowState::Waiting);
        state.reconciling(false);
        let mut owner = Owner {
            reconciler: reconciler.clone(),
            options: options.clone(),
            replica: state.clone(),
            no_change_streams: false,
        };
        let result = lease::run_single_flight(
            &reconciler.db,
            &lease,
            &mut owner,
            state.progress().clone(),
            shutdown.token(),
        )
        .await;
        // Following turned out impossible: the reconciliation run instead
        // is recorded already.
        let outcome = match result {
            Ok(lease::Outcome::Ran { .. }) => return FollowEnd::Unsupported,
            Err(LeaseError::JobFailed { .. }) if owner.no_change_streams => {
                return FollowEnd::Unsupported
            }
            result => RunOutcome::of_lease(result),
        };
        metrics::run_finished(outcome.metric_label(), outcome.is_success());
        if shutdown.is_requested() {
            break;
        }
        let wait = match &outcome {
            RunOutcome::HandedOver { to } => {
                info!(%to, "lease handed over; waiting to follow again once it is done");
                Duration::ZERO
            }
            RunOutcome::Failed { error }
            | RunOutcome::Unreachable { error }
            | RunOutcome::LeaseLost { error } => {
                warn!(%error, "not following any more; waiting for the lease again");
                match &outcome {
                    RunOutcome::LeaseLost { .. } => Duration::ZERO,
                    _ => crate::between_runs::retry_delay(reconciler, &lease)
                        .await
                        .unwrap_or(options.interval),
                }
            }
            RunOutcome::Completed { .. } | RunOutcome::DoneByOther { .. } => Duration::ZERO,
        };
        state.finished(outcome, wait.as_secs());
        state.follow().set_state(FollowState::Waiting);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.requested() => break,
        }
    }
    FollowEnd::Stopped
}
