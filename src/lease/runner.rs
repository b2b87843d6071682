//! [`run_single_flight`]: wait for our turn, then run the job as the owner
//! under renewals, and record how it ended with a fenced write.

use std::fmt::Display;
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use mongodb::bson::DateTime;
use mongodb::Database;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::clock;
use super::follower::{self, Turn};
use super::guard::{Guard, LeaseHandle, LeaseLost};
use super::job::{JobEnd, LeasedJob};
use super::options::LeaseOptions;
use super::outcome::{LeaseError, Outcome};
use super::store::{Fence, JobStatus, JobStore, RunEnd};
use crate::progress::Progress;

/// How the owner's run ends: the runner's answer.
type Ended<T, E> = Result<Outcome<T>, LeaseError<E>>;

/// How long a shutting-down owner keeps trying to release its lease.
const RELEASE_PATIENCE: Duration = Duration::from_secs(10);

/// Runs `job` on exactly one replica at a time.
///
/// Polls the lease (see `follower.rs`) until the work is done for us or we
/// claim it; as the owner, runs `job` while a timer renews the lease, then
/// records the result with a write fenced by our owner id and epoch.
///
/// Returns the job's own output and error, in its types (`J::Output`,
/// `J::Error`):
/// - `Ok(Outcome::Ran)`: we ran the job and recorded its completion; the
///   job's output is in `summary` (stored serialized);
/// - `Ok(Outcome::CompletedByOther)`: another replica completed it while we
///   waited, or (with its `age`) a completion younger than
///   `reuse_completion_for` existed when we started (never when `force`);
/// - `Ok(Outcome::HandedOver)`: the job ended in [`JobEnd::HandOver`] and
///   we released the lease for the replica that asked for it;
/// - `Err(LeaseError::JobFailed)`: we ran it, it failed with the job's
///   error (in `error`), and `error` (as text), `attempt` and `retryAt` are
///   recorded;
/// - `Err(LeaseError::LeaseLost)`: our lease was taken over or we self-fenced;
///   the job was stopped and nothing more was written (its error, if it had
///   one, is logged, not recorded or returned);
/// - `Err(LeaseError::WaitTimedOut)`: `wait_timeout` passed while we waited;
/// - `Err(LeaseError::ShutDown)`: `shutdown` was cancelled; as the owner we
///   stopped the job and released the lease so a follower claims at once
///   (`released: true`), or, when the job did not stop within
///   `drain_patience` (a write of its may still be under way) or the release
///   could not be confirmed, left the lease to expire (`released: false`);
/// - `Err(LeaseError::MongoUnavailable)`: MongoDB stayed unreachable for
///   `unreachable_timeout` while we waited, or our final write could not be
///   confirmed before our lease's local deadline.
///
/// `progress` is handed to the job and copied into the lease document with
/// every renewal; callers keep a clone to show it elsewhere.
pub async fn run_single_flight<J: LeasedJob>(
    db: &Database,
    opts: &LeaseOptions,
    job: &mut J,
    progress: Progress,
    shutdown: CancellationToken,
) -> Result<Outcome<J::Output>, LeaseError<J::Error>> {
    opts.assert_sane();
    let store = JobStore::new(db, opts);
    let turn = follower::wait_for_turn(&store, opts, &shutdown).await?;
    let claimed = match turn {
        Turn::Finished(outcome) => return Ok(outcome),
        Turn::Claimed(claimed) => *claimed,
    };
    // The owner's run: the job under renewals, then the write that records
    // how it ended.
    let deadline = claimed.deadline;
    let fence = claimed.fence.clone();
    let lease = LeaseHandle {
        store: store.clone(),
        fence,
    };
    let owner = Owner {
        guard: Guard::new(Some(deadline), Some(lease)),
        store,
        opts: opts.clone(),
        fence: claimed.fence,
        progress,
    };
    let renewals = owner.start_renewals(deadline);
    let ran = owner.run_job(job, &shutdown).await;
    // Stopped and waited for, so no renewal runs beside the final write.
    renewals.abort();
    let _ = renewals.await;
    owner.record_end(ran, claimed.record.attempt).await
}

/// How the owner's run of the job ended.
enum Ran<T, E> {
    /// The job returned (the lease may have been lost meanwhile).
    Returned(Result<JobEnd<T>, E>),
    /// The lease was lost, or shutdown stopped the job.
    Stopped,
    /// Shutdown's wait for the job ran out after this long.
    StillRunning(Duration),
}

/// The owner: what its run of the job, its renewals and its final write
/// need.
#[derive(Clone)]
pub(super) struct Owner {
    pub(super) store: JobStore,
    pub(super) opts: LeaseOptions,
    pub(super) fence: Fence,
    pub(super) guard: Guard,
    pub(super) progress: Progress,
}

impl Owner {
    /// Runs `job` until it returns, the lease is lost or shutdown is asked for.
    async fn run_job<J: LeasedJob>(
        &self,
        job: &mut J,
        shutdown: &CancellationToken,
    ) -> Ran<J::Output, J::Error> {
        let guard = &self.guard;
        let work = job.run(guard.clone(), self.progress.clone());
        tokio::pin!(work);
        tokio::select! {
            biased;
            // Lost: someone else may own the work now; drop the job at once.
            _ = guard.cancelled() => Ran::Stopped,
            _ = shutdown.cancelled() => {
                // Shutdown: every further write fails the guard check, but a write
                // already sent (an acknowledgement `update_many`) is let finish, so
                // none of ours lands after the release hands the work to another
                // replica. Bounded by the lease's own deadline.
                guard.cancel(LeaseLost::ShuttingDown);
                let patience = self.opts.drain_patience.min(deadline_of(guard).saturating_duration_since(Instant::now()));
                match tokio::time::timeout(patience, &mut work).await {
                    Ok(_) => Ran::Stopped,
                    Err(_) => Ran::StillRunning(patience),
                }
            }
            result = &mut work => Ran::Returned(result),
        }
    }

    /// Records how the run ended (`attempt`: the failures before it), or,
    /// when the lease was lost, nothing.
    async fn record_end<T: Serialize, E: Display>(
        &self,
        ran: Ran<T, E>,
        attempt: u32,
    ) -> Ended<T, E> {
        let (fence, epoch) = (&self.fence, self.fence.epoch);
        match (self.guard.check(), ran) {
            // A job that did not stop may have a write on the server still: a
            // release would let a follower claim at once and work beside it.
            // Left to expire, the lease keeps followers out for its rest.
            (Err(LeaseLost::ShuttingDown), Ran::StillRunning(waited)) => {
                warn!(owner = %fence.owner, epoch,
                    "the job did not stop within {waited:?} of shutdown; not releasing the lease, which expires by itself");
                Err(LeaseError::ShutDown { released: false })
            }
            (Err(LeaseLost::ShuttingDown), _) => self.release(None).await,
            (Err(reason), ran) => {
                if let Ran::Returned(Err(job_error)) = &ran {
                    warn!(owner = %fence.owner, epoch, error = %format_args!("{job_error:#}"),
                        "the job ended after the lease was lost; not recorded");
                }
                lost(fence, reason)
            }
            (Ok(()), Ran::Returned(Ok(JobEnd::Completed(summary)))) => self.complete(summary).await,
            (Ok(()), Ran::Returned(Ok(JobEnd::HandOver { to }))) => self.release(Some(&to)).await,
            (Ok(()), Ran::Returned(Err(job_error))) => {
                let attempt = attempt.saturating_add(1);
                self.record_failure(attempt, job_error).await
            }
            (Ok(()), _) => unreachable!("only a cancelled guard interrupts the job"),
        }
    }

    /// Shutdown, or a handover to `to`: sets `released` so a follower (`to`,
    /// when named) claims at once.
    async fn release<T, E>(&self, to: Option<&str>) -> Ended<T, E> {
        let (store, fence) = (&self.store, &self.fence);
        let until = (Instant::now() + RELEASE_PATIENCE).min(deadline_of(&self.guard));
        let snapshot = self.progress.snapshot();
        let write = |now| store.end(fence, now, RunEnd::Released(&snapshot, to));
        match self.fenced_write(JobStatus::Released, until, write).await {
            Ok(true) => match to {
                Some(to) => {
                    info!(owner = %fence.owner, epoch = fence.epoch, to, "lease handed over");
                    Ok(Outcome::HandedOver { to: to.to_string() })
                }
                None => {
                    info!(owner = %fence.owner, epoch = fence.epoch, "shut down; lease released");
                    Err(LeaseError::ShutDown { released: true })
                }
            },
            Ok(false) => lost(fence, LeaseLost::TakenOver),
            Err(err) => {
                warn!(owner = %fence.owner, epoch = fence.epoch, error = %err,
                    "shut down; could not release the lease (it will expire)");
                Err(LeaseError::ShutDown { released: false })
            }
        }
    }

    /// Success: sets `completed` with the summary (the job's output, serialized).
    async fn complete<T: Serialize, E>(&self, summary: T) -> Ended<T, E> {
        let (store, fence) = (&self.store, &self.fence);
        let snapshot = self.progress.snapshot();
        let stored = serde_json::to_value(&summary).unwrap_or_else(|e| {
            serde_json::Value::String(format!("the summary did not serialize: {e}"))
        });
        let write = |now| store.end(fence, now, RunEnd::Completed(&stored, &snapshot));
        let until = deadline_of(&self.guard);
        match self.fenced_write(JobStatus::Completed, until, write).await {
            Ok(true) => {
                info!(owner = %fence.owner, epoch = fence.epoch, summary = %stored, "job completed");
                Ok(Outcome::Ran {
                    epoch: fence.epoch,
                    summary,
                })
            }
            Ok(false) => lost(fence, LeaseLost::TakenOver),
            Err(err) => unconfirmed(fence, "completion", err),
        }
    }

    /// Failure: sets `failed` with the error, the consecutive `attempt` and a
    /// `retryAt` backed off exponentially.
    async fn record_failure<T, E: Display>(&self, attempt: u32, job_error: E) -> Ended<T, E> {
        let (store, fence) = (&self.store, &self.fence);
        let message = format!("{job_error:#}");
        let backoff = self.opts.failure_backoff_for(attempt);
        let mut retry_at = DateTime::MIN;
        let write = |now| {
            retry_at = clock::later(now, backoff);
            store.end(fence, now, RunEnd::Failed(&message, attempt, retry_at))
        };
        let until = deadline_of(&self.guard);
        match self.fenced_write(JobStatus::Failed, until, write).await {
            Ok(true) => {
                error!(owner = %fence.owner, epoch = fence.epoch, attempt, error = %message,
                    retry_in_ms = backoff.as_millis() as u64, "job failed");
                Err(LeaseError::JobFailed {
                    epoch: fence.epoch,
                    error: job_error,
                    attempt,
                    retry_at,
                })
            }
            Ok(false) => {
                warn!(owner = %fence.owner, epoch = fence.epoch, error = %message,
                    "the job failed and the lease is lost");
                lost(fence, LeaseLost::TakenOver)
            }
            Err(err) => unconfirmed(fence, "failure", err),
        }
    }

    /// One of the owner's final fenced writes (ending the run in `to`), with a
    /// fresh server time per attempt, retried on errors until `until` (never
    /// past the lease's local deadline: after it the lease may belong to
    /// someone else).
    ///
    /// An error leaves the outcome unknown (a write-concern error or a lost
    /// reply may hide an applied write), so the next attempt first reads the
    /// document: if it already shows `to` under our fence, the write is done.
    /// Writing again would match nothing; the store re-reads in that case too.
    /// `Ok(false)`: the lease is lost; `Err`: unconfirmed by `until`.
    async fn fenced_write<F, Fut>(
        &self,
        to: JobStatus,
        until: Instant,
        mut write: F,
    ) -> Result<bool, String>
    where
        F: FnMut(DateTime) -> Fut,
        Fut: std::future::Future<Output = mongodb::error::Result<bool>>,
    {
        let mut delays = crate::retry::lease_store(Duration::from_secs(1)).build();
        let mut last_error = String::from("the lease's local deadline passed before the write");
        let mut unsure = false;
        while Instant::now() < until {
            let attempt = async {
                if unsure && self.store.shows(&self.fence, &to).await? {
                    return Ok(true);
                }
                let now = self.store.server_now().await?;
                write(now).await
            };
            match tokio::time::timeout_at(until.into(), attempt).await {
                Ok(Ok(written)) => return Ok(written),
                Ok(Err(err)) => {
                    unsure = true;
                    last_error = err.to_string();
                    warn!(error = %last_error, "fenced lease write failed (its outcome is unknown); reading the lease, then retrying");
                }
                Err(_elapsed) => break,
            }
            let delay = delays.next().unwrap_or(Duration::from_secs(1));
            tokio::time::sleep(delay.min(until.saturating_duration_since(Instant::now()))).await;
        }
        Err(last_error)
    }
}

fn deadline_of(guard: &Guard) -> Instant {
    guard.deadline().unwrap_or_else(Instant::now)
}

fn lost<T, E>(fence: &Fence, reason: LeaseLost) -> Ended<T, E> {
    error!(owner = %fence.owner, epoch = fence.epoch, %reason, "lease lost");
    Err(LeaseError::LeaseLost {
        epoch: fence.epoch,
        reason,
    })
}

fn unconfirmed<T, E>(fence: &Fence, what: &str, err: String) -> Ended<T, E> {
    error!(owner = %fence.owner, epoch = fence.epoch, error = %err, "could not record the job's {what}");
    Err(LeaseError::MongoUnavailable(err))
}
