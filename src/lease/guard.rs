//! The fence a leased job consults before every side effect.
//!
//! A [`Guard`] is shared between the lease's renewal task and the job. The
//! renewal task moves the local safety deadline forward after each successful
//! renewal and cancels the guard when the lease is lost; the job calls
//! [`Guard::check`] before each Meilisearch or MongoDB write and selects on
//! [`Guard::cancelled`] while it waits, so it stops at once.
//!
//! An owner's guard also carries its [`LeaseHandle`] (`guard.lease()`): what
//! the job may write to its own lease document besides the runner's
//! claim/renew/end — keep the lease after completing, and record each later
//! completion the same way (docs/design.md §5.12), and its own fields,
//! whose names and meaning only the job knows — each made under the same
//! fence and local deadline as the job's other side effects. The guard and the handle live in one module because
//! each refers to the other (the guard holds the handle; every handle write
//! checks, and on a lost lease cancels, the guard).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use mongodb::bson::Document;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::store::{Fence, JobRecord, JobStore};

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

/// Cheap to clone; all clones share one state.
#[derive(Clone, Debug)]
pub struct Guard {
    token: CancellationToken,
    deadline: Arc<Mutex<Option<Instant>>>,
    /// Why the guard was cancelled: the first reason given.
    reason: Arc<OnceLock<LeaseLost>>,
    lease: Option<Arc<LeaseHandle>>,
}

impl Guard {
    /// A guard that holds until `deadline` (`None`: until cancelled) unless
    /// extended or cancelled; `lease`: an owner's handle on its lease
    /// document.
    pub(crate) fn new(deadline: Option<Instant>, lease: Option<LeaseHandle>) -> Self {
        Guard {
            token: CancellationToken::new(),
            deadline: Arc::new(Mutex::new(deadline)),
            reason: Arc::default(),
            lease: lease.map(Arc::new),
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
        Guard::new(None, None)
    }

    /// Ok while the lease is held and the local deadline has not passed.
    ///
    /// Whoever first sees the deadline pass — this check or the renewal
    /// timer — cancels the guard, so `cancelled()` and `check()` always agree.
    pub fn check(&self) -> Result<(), LeaseLost> {
        // Only `cancel` cancels the token, after setting the reason: the
        // reason alone says whether (and why) the guard is cancelled.
        if let Some(reason) = self.reason.get() {
            return Err(reason.clone());
        }
        let passed = self.deadline().is_some_and(|at| Instant::now() >= at);
        if passed {
            self.cancel(LeaseLost::SelfFenced);
            return Err(LeaseLost::SelfFenced);
        }
        Ok(())
    }

    /// Moves the local deadline (after a successful renewal).
    pub(crate) fn extend_to(&self, deadline: Instant) {
        if self.reason.get().is_none() {
            *self.deadline.lock().expect("guard state poisoned") = Some(deadline);
        }
    }

    /// Stops the job: every later `check` fails with `reason` (the first
    /// reason given wins) and `cancelled()` resolves.
    pub fn cancel(&self, reason: LeaseLost) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }

    /// Resolves once the guard is cancelled.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// The local deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().expect("guard state poisoned")
    }
}

/// Why an owner write to the lease document did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaseWriteError {
    #[error("lease lost: {0}")]
    Lost(#[from] LeaseLost),
    /// Unknown outcome (write-concern error, timeout, lost reply): the job
    /// may retry — every write here is idempotent.
    #[error("MongoDB did not confirm the lease write: {0}")]
    Unconfirmed(String),
}

/// Splits a lease write's result: a lost lease ends the job (the outer
/// `Err`); a write MongoDB did not confirm is the caller's to weigh (the
/// inner `Err`), most often only logged, since every such write is retried
/// or repeated later.
pub(crate) fn unless_lost<T>(
    result: Result<T, LeaseWriteError>,
) -> Result<Result<T, String>, LeaseLost> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(LeaseWriteError::Lost(lost)) => Err(lost),
        Err(LeaseWriteError::Unconfirmed(error)) => Ok(Err(error)),
    }
}

/// The owner's view of its own lease.
#[derive(Clone, Debug)]
pub struct LeaseHandle {
    pub(super) store: JobStore,
    pub(super) fence: Fence,
}

impl LeaseHandle {
    /// The run's work is done (`summary`; `None` when a fresh completion by
    /// someone else was relied on) and this owner keeps the lease (the
    /// document's `following`), until it hands it over, is stopped, or fails;
    /// again after each of its later reconciliations, to record them.
    pub async fn hold_after_completion(
        &self,
        guard: &Guard,
        summary: Option<&serde_json::Value>,
    ) -> Result<(), LeaseWriteError> {
        let write = |now| self.store.hold_after_completion(&self.fence, now, summary);
        self.fenced(guard, write).await
    }

    /// Writes the job's own fields of the document (`update`, given the
    /// server time the write is made at: update operators over fields that
    /// are not the lease's, see [`LEASE_FIELDS`](super::store::LEASE_FIELDS)),
    /// under the fence, where the document also matches `condition` (over
    /// the job's fields; empty: always). A condition that does not match,
    /// with the lease still ours, is `Ok` and writes nothing. The job alone
    /// knows what those fields mean; the lease keeps them across owners and
    /// never resets them.
    pub async fn write_job_fields(
        &self,
        guard: &Guard,
        condition: Document,
        update: impl FnOnce(mongodb::bson::DateTime) -> Document,
    ) -> Result<(), LeaseWriteError> {
        let write = |now| {
            self.store
                .update_job_fields(&self.fence, now, condition, update(now))
        };
        self.fenced(guard, write).await
    }

    /// The document as it is now (one read with the lease's read concern):
    /// the job reads its own fields in `document`.
    pub(crate) async fn read(&self) -> Result<Option<JobRecord>, LeaseWriteError> {
        self.store.read().await.map_err(unconfirmed)
    }

    /// MongoDB's clock (the lease's time source).
    pub(crate) async fn server_now(&self) -> Result<mongodb::bson::DateTime, LeaseWriteError> {
        self.store.server_now().await.map_err(unconfirmed)
    }

    /// Who asked for the lease while we keep it, if anyone did since we
    /// claimed it (one read of the document).
    pub async fn handover_requested_by(&self) -> Result<Option<String>, LeaseWriteError> {
        let record = self.read().await?.filter(|r| r.is_held_under(&self.fence));
        Ok(record.and_then(|r| r.handover_requested_by))
    }

    /// One fenced write at a fresh server time, after the guard's check. A
    /// write that matches nothing means the lease is gone: the guard is
    /// cancelled so the job stops at once.
    async fn fenced<F, Fut>(&self, guard: &Guard, write: F) -> Result<(), LeaseWriteError>
    where
        F: FnOnce(mongodb::bson::DateTime) -> Fut,
        Fut: std::future::Future<Output = mongodb::error::Result<bool>>,
    {
        guard.check()?;
        let now = self.store.server_now().await.map_err(unconfirmed)?;
        guard.check()?;
        match write(now).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                guard.cancel(LeaseLost::TakenOver);
                Err(LeaseLost::TakenOver.into())
            }
            Err(error) => Err(unconfirmed(error)),
        }
    }
}

fn unconfirmed(error: mongodb::error::Error) -> LeaseWriteError {
    LeaseWriteError::Unconfirmed(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fails_after_deadline_and_after_cancel() {
        let guard = Guard::new(Some(Instant::now() + Duration::from_secs(60)), None);
        assert!(guard.check().is_ok());
        guard.extend_to(Instant::now() - Duration::from_millis(1));
        assert_eq!(guard.check(), Err(LeaseLost::SelfFenced));
        assert!(
            guard.token.is_cancelled(),
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
