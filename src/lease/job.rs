//! The job a lease protects: [`LeasedJob`], and how a run of it ends
//! ([`JobEnd`]).

use std::fmt::Display;
use std::future::Future;

use serde::Serialize;

use super::guard::Guard;
use crate::progress::Progress;

/// How a run of a [`LeasedJob`] ended, when it did not fail.
#[derive(Clone, Debug, PartialEq)]
pub enum JobEnd<T> {
    /// The work is done: the runner records the completion, with `T`
    /// (serialized) as the `summary`.
    Completed(T),
    /// Another replica asked for the lease (`to`) while the job kept it after
    /// its work (`Guard::lease`'s `hold_after_completion`): the runner releases
    /// the lease for `to` instead of recording anything else.
    HandOver { to: String },
}

/// Work that must run on one replica at a time.
///
/// `run` receives the lease's [`Guard`] — call [`Guard::check`] before every
/// side effect and select on [`Guard::cancelled`] while waiting — and the
/// [`Progress`] that each renewal copies into the lease document.
///
/// Its outcome and its error keep their own types through the runner:
/// [`run_single_flight`](super::run_single_flight) returns the
/// [`Output`](LeasedJob::Output) in `Outcome::Ran` and the
/// [`Error`](LeasedJob::Error) in `LeaseError::JobFailed`. In the document,
/// the output is stored serialized (`summary`) and the error as its
/// alternate text (`{:#}`: `error`, with `attempt` and `retryAt`).
///
/// When the lease is lost or shutdown is requested, the future is dropped at
/// its next await point, so a job that only writes after `check` makes no
/// write after the loss. Tasks it spawns must check the guard themselves.
///
/// Closures `FnMut(Guard, Progress) -> impl Future<Output = Result<T, E>>`
/// implement it (they always end in [`JobEnd::Completed`]).
pub trait LeasedJob: Send {
    /// What a completed run returns.
    type Output: Serialize + Send;
    /// Why a run failed.
    type Error: Display + Send;

    fn run(
        &mut self,
        guard: Guard,
        progress: Progress,
    ) -> impl Future<Output = Result<JobEnd<Self::Output>, Self::Error>> + Send;
}

impl<F, Fut, T, E> LeasedJob for F
where
    F: FnMut(Guard, Progress) -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + Send,
    E: Display + Send,
{
    type Output = T;
    type Error = E;

    fn run(
        &mut self,
        guard: Guard,
        progress: Progress,
    ) -> impl Future<Output = Result<JobEnd<T>, E>> + Send {
        let run = self(guard, progress);
        async move { run.await.map(JobEnd::Completed) }
    }
}
