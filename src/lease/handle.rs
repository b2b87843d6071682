//! What an owner's job may write to its own lease document besides the
//! runner's claim/renew/complete/fail/release: the follow-mode writes
//! (docs/design.md §5.12). A [`LeaseHandle`] is reached through the job's
//! [`Guard`](super::Guard) (`guard.lease()`), so every write is made under
//! the same fence and local deadline as the job's other side effects.

use mongodb::bson::Document;

use super::guard::{Guard, LeaseLost};
use super::store::{Fence, JobStore};

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

/// The owner's view of its own lease.
#[derive(Clone, Debug)]
pub struct LeaseHandle {
    store: JobStore,
    fence: Fence,
}

impl LeaseHandle {
    pub(crate) fn new(store: JobStore, fence: Fence) -> Self {
        LeaseHandle { store, fence }
    }

    /// Our owner id and epoch.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The run's reconciliation is done (`summary`; `None` when a fresh one
    /// was relied on) and this owner now follows change streams, keeping
    /// the lease.
    pub async fn start_following(
        &self,
        guard: &Guard,
        summary: Option<&serde_json::Value>,
    ) -> Result<(), LeaseWriteError> {
        self.fenced(guard, |now| {
            self.store.start_following(&self.fence, now, summary)
        })
        .await
    }

    /// A periodic reconciliation while following finished.
    pub async fn record_run(
        &self,
        guard: &Guard,
        summary: &serde_json::Value,
    ) -> Result<(), LeaseWriteError> {
        self.fenced(guard, |now| {
            self.store.record_run(&self.fence, now, summary)
        })
        .await
    }

    /// Where the next owner resumes the change stream.
    pub async fn save_follow_token(
        &self,
        guard: &Guard,
        token: &Document,
    ) -> Result<(), LeaseWriteError> {
        self.fenced(guard, |now| {
            self.store.save_follow_token(&self.fence, now, token)
        })
        .await
    }

    /// The saved resume token, if any (read at the start of following).
    pub async fn follow_token(&self) -> Result<Option<Document>, LeaseWriteError> {
        let record = self.store.read().await.map_err(unconfirmed)?;
        Ok(record.and_then(|r| r.follow_token))
    }

    /// Who asked for the lease while we follow, if anyone did since we
    /// claimed it (one read of the document).
    pub async fn handover_requested_by(&self) -> Result<Option<String>, LeaseWriteError> {
        let record = self.store.read().await.map_err(unconfirmed)?;
        Ok(record
            .filter(|r| r.is_held_under(&self.fence))
            .and_then(|r| r.handover_requested_by))
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

/// Returned (as the job's error) by a job that stops because another replica
/// asked for the lease: the runner releases it for `to` instead of
/// recording a failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("handing the lease over to {to}, which asked for it")]
pub struct HandOver {
    pub to: String,
}
