//! A `run` replica in follow mode (docs/design.md §6.1): it waits for the
//! lease wanting it for itself (`own_run_only`: another replica's completion
//! never satisfies it), follows as its owner (`owner`), and when the lease
//! is handed over (to `once`, `reindex`, `verify --repair`), lost, or a run
//! failed, it goes back to waiting (after the failure's `retryAt`). `run`
//! comes here only once the server said it serves change streams (or could
//! not be asked: the owner finds out, [`super::mode`]); when it turns out
//! not to, `run` falls back to interval-only reconciliation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::owner::Owner;
use super::{FollowOptions, FollowState};
use crate::job::{self, Reconciler, RunOutcome};
use crate::lease::{self, Guard, LeaseOptions};
use crate::metrics;
use crate::progress::Progress;
use crate::serve::state::{ReplicaState, Role};
use crate::shutdown::Shutdown;

/// How following ended for this replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowEnd {
    /// Shutdown was requested.
    Stopped,
    /// The server does not serve change streams: reconcile on the interval.
    Unsupported,
}

/// Waits for the lease and follows as its owner, again and again, until
/// shutdown (or until following turns out not to be possible).
pub async fn run(
    reconciler: &Reconciler,
    options: &FollowOptions,
    lease: &LeaseOptions,
    state: &ReplicaState,
    shutdown: &Shutdown,
) -> FollowEnd {
    let mut lease = lease.clone();
    lease.own_run_only = true;
    lease.request_handover = false;
    lease.wait_timeout = None;
    let unsupported = Arc::new(AtomicBool::new(false));
    while !shutdown.is_requested() {
        state.follow.set_state(FollowState::Waiting);
        state.set_role(Role::Idle);
        let owner = Owner {
            reconciler: reconciler.clone(),
            options: options.clone(),
            lease: lease.clone(),
            replica: state.clone(),
            unsupported: unsupported.clone(),
            last_error: Arc::default(),
        };
        let last_error = owner.last_error.clone();
        let mut job = move |guard: Guard, progress: Progress| owner.clone().run(guard, progress);
        let result = lease::run_single_flight(
            &reconciler.db,
            &lease,
            &mut job,
            state.progress.clone(),
            shutdown.token(),
        )
        .await;
        let outcome = match result {
            // Only when following turned out impossible: the reconciliation
            // it ran instead is recorded already.
            Ok(lease::Outcome::Ran { .. }) => None,
            Ok(done) => Some(job::done_outcome(done)),
            Err(error) => Some(job::failure_outcome(
                error,
                last_error.lock().expect("poisoned").take(),
            )),
        };
        if unsupported.load(Ordering::SeqCst) {
            return FollowEnd::Unsupported;
        }
        let Some(outcome) = outcome else { continue };
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
        state.follow.set_state(FollowState::Waiting);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.requested() => break,
        }
    }
    FollowEnd::Stopped
}
