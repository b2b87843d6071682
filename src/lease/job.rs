//! The job a lease protects: [`LeasedJob`].

use std::future::Future;

use super::guard::Guard;
use crate::progress::Progress;

/// Work that must run on one replica at a time.
///
/// `run` receives the lease's [`Guard`] — call [`Guard::check`] before every
/// side effect and select on [`Guard::cancelled`] while waiting — and the
/// [`Progress`] that each renewal copies into the lease document. Its `Ok`
/// value is the run's summary, stored as `summary` on completion; an `Err` is
/// recorded as the failure (`error`, `attempt`, `retryAt`).
///
/// When the lease is lost or shutdown is requested, the future is dropped at
/// its next await point, so a job that only writes after `check` makes no
/// write after the loss. Tasks it spawns must check the guard themselves.
///
/// Closures `FnMut(Guard, Progress) -> impl Future<Output = anyhow::Result<Value>>`
/// implement it.
pub trait LeasedJob: Send {
    fn run(
        &mut self,
        guard: Guard,
        progress: Progress,
    ) -> impl Future<Output = anyhow::Result<serde_json::Value>> + Send;
}

impl<F, Fut> LeasedJob for F
where
    F: FnMut(Guard, Progress) -> Fut + Send,
    Fut: Future<Output = anyhow::Result<serde_json::Value>> + Send,
{
    fn run(
        &mut self,
        guard: Guard,
        progress: Progress,
    ) -> impl Future<Output = anyhow::Result<serde_json::Value>> + Send {
        self(guard, progress)
    }
}
