//! The fence a leased job consults before every side effect.
//!
//! A [`Guard`] is shared between the lease's renewal task and the job. The
//! renewal task moves the local safety deadline forward after each successful
//! renewal and cancels the guard when the lease is lost; the job calls
//! [`Guard::check`] before each Meilisearch or MongoDB write and selects on
//! [`Guard::cancelled`] while it waits, so it stops at once. An owner's guard
//! also carries the [`LeaseHandle`] for the job's own writes to the lease
//! document (follow mode).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::handle::LeaseHandle;

/// Why the job must stop writing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseLost {
    /// A fenced write matched nothing: someone else holds the lease now.
    #[error("the lease was taken over by another replica")]
    TakenOver,
    /// Renewals failed for longer than `ttl - safety_margin`: we stopped
    /// ourselves before anyone else could claim.
    #[error("the lease could not be renewed in time; stopped before it could expire")]
    SelfFenced,
    /// Shutdown was requested (SIGTERM/SIGINT); the lease is being released.
    #[error("shutting down")]
    ShuttingDown,
}

#[derive(Debug)]
struct State {
    deadline: Option<Instant>,
    reason: Option<LeaseLost>,
}

/// Cheap to clone; all clones share one state.
#[derive(Clone, Debug)]
pub struct Guard {
    token: CancellationToken,
    state: Arc<Mutex<State>>,
    lease: Option<Arc<LeaseHandle>>,
}

impl Guard {
    /// A guard that holds until `deadline` unless extended or cancelled.
    pub fn with_deadline(deadline: Instant) -> Self {
        Guard {
            token: CancellationToken::new(),
            state: Arc::new(Mutex::new(State {
                deadline: Some(deadline),
                reason: None,
            })),
            lease: None,
        }
    }

    /// The owner's guard, with its handle on the lease document.
    pub(crate) fn for_owner(deadline: Instant, lease: LeaseHandle) -> Self {
        Guard {
            lease: Some(Arc::new(lease)),
            ..Guard::with_deadline(deadline)
        }
    }

    /// The owner's handle on its lease document (`None` for guards with no
    /// lease behind them).
    pub fn lease(&self) -> Option<&LeaseHandle> {
        self.lease.as_deref()
    }

    /// A guard with no lease behind it (read-only work, unit tests): it only
    /// fails once cancelled.
    pub fn unfenced() -> Self {
        Guard {
            token: CancellationToken::new(),
            state: Arc::new(Mutex::new(State {
                deadline: None,
                reason: None,
            })),
            lease: None,
        }
    }

    /// Ok while the lease is held and the local deadline has not passed.
    ///
    /// Whoever first sees the deadline pass — this check or the renewal
    /// timer — cancels the guard, so `cancelled()` and `check()` always agree.
    pub fn check(&self) -> Result<(), LeaseLost> {
        let expired = {
            let state = self.state.lock().expect("guard state poisoned");
            if let Some(reason) = &state.reason {
                return Err(reason.clone());
            }
            if self.token.is_cancelled() {
                return Err(LeaseLost::ShuttingDown);
            }
            matches!(state.deadline, Some(deadline) if Instant::now() >= deadline)
        };
        if expired {
            self.cancel(LeaseLost::SelfFenced);
            return Err(LeaseLost::SelfFenced);
        }
        Ok(())
    }

    /// Moves the local deadline (after a successful renewal).
    pub fn extend_to(&self, deadline: Instant) {
        let mut state = self.state.lock().expect("guard state poisoned");
        if state.reason.is_none() {
            state.deadline = Some(deadline);
        }
    }

    /// Stops the job: every later `check` fails with `reason` (the first
    /// reason given wins) and `cancelled()` resolves.
    pub fn cancel(&self, reason: LeaseLost) {
        {
            let mut state = self.state.lock().expect("guard state poisoned");
            state.reason.get_or_insert(reason);
        }
        self.token.cancel();
    }

    /// Resolves once the guard is cancelled.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// The token behind the guard, for APIs that take one.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The local deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.state.lock().expect("guard state poisoned").deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fails_after_deadline_and_after_cancel() {
        let guard = Guard::with_deadline(Instant::now() + Duration::from_secs(60));
        assert!(guard.check().is_ok());
        guard.extend_to(Instant::now() - Duration::from_millis(1));
        assert_eq!(guard.check(), Err(LeaseLost::SelfFenced));
        assert!(
            guard.token().is_cancelled(),
            "a check past the deadline cancels the guard"
        );

        let guard = Guard::unfenced();
        assert!(guard.check().is_ok());
        guard.cancel(LeaseLost::TakenOver);
        guard.cancel(LeaseLost::ShuttingDown);
        assert_eq!(guard.check(), Err(LeaseLost::TakenOver));
        guard.extend_to(Instant::now() + Duration::from_secs(60));
        assert_eq!(guard.check(), Err(LeaseLost::TakenOver));
    }
}
