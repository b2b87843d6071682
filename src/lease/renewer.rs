//! The owner's renewal timer (docs/design.md §5.5).
//!
//! Every `renew_every` after the last good renewal it reads the server clock
//! and extends the lease (`store.renew`, fenced), copying the job's progress
//! into the document. Outcomes:
//!
//! - matched: the guard's local deadline moves to `sent + ttl - safety_margin`,
//!   where `sent` is the local monotonic time *before* the clock read, so the
//!   deadline always falls before the server-side `expiresAt`;
//! - matched nothing: the lease is lost — the guard is cancelled
//!   ([`LeaseLost::TakenOver`]) at once and the timer stops;
//! - an error: ambiguous — a write-concern error, a timeout or a lost reply
//!   may hide a renewal that was applied (or one a failover will roll back).
//!   It never moves the deadline. The document is read again (majority):
//!   if it no longer shows our owner and epoch holding it, the lease is lost
//!   and the guard is cancelled at once; otherwise the renewal is retried
//!   with backoff, and if the local deadline comes first the guard is
//!   cancelled ([`LeaseLost::SelfFenced`]) before any other replica can
//!   claim. An attempt still in flight at the deadline is abandoned.

use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::guard::{Guard, LeaseLost};
use super::options::LeaseOptions;
use super::store::{Fence, JobStore};
use crate::progress::Progress;

/// A running renewal timer; stop it with [`Renewer::stop`]. Dropping it
/// (the job panicked, or the caller dropped `run_single_flight`) also stops
/// it, so a lease is never renewed for work that no longer runs.
pub(crate) struct Renewer {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the renewal timer works with.
struct Renewal {
    store: JobStore,
    fence: Fence,
    guard: Guard,
    progress: Progress,
    renew_every: Duration,
    /// `ttl - safety_margin`.
    holds_for: Duration,
}

impl Renewer {
    /// Starts renewing a lease that is safely ours until the local instant
    /// `deadline` (the first renewal is due `renew_every` after the send
    /// time that deadline implies).
    pub(crate) fn start(
        store: &JobStore,
        fence: &Fence,
        guard: &Guard,
        progress: &Progress,
        opts: &LeaseOptions,
        deadline: Instant,
    ) -> Self {
        let stop = CancellationToken::new();
        let renewal = Renewal {
            store: store.clone(),
            fence: fence.clone(),
            guard: guard.clone(),
            progress: progress.clone(),
            renew_every: opts.renew_every,
            holds_for: opts.holds_for(),
        };
        Renewer {
            task: Some(tokio::spawn(renewal.run(deadline, stop.clone()))),
            stop,
        }
    }

    /// Stops the timer and waits for it, so no renewal runs concurrently with
    /// the owner's final write.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Renewal {
    async fn run(self, mut deadline: Instant, stop: CancellationToken) {
        loop {
            // Due `renew_every` after the send time of the last good renewal.
            let due = deadline
                .checked_sub(self.holds_for - self.renew_every)
                .unwrap_or_else(Instant::now);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.guard.cancelled() => return,
                _ = tokio::time::sleep_until(due.into()) => {}
            }
            let mut delays = crate::retry::lease_store(self.renew_every).build();
            loop {
                let sent = Instant::now();
                let attempt = async {
                    let now = self.store.server_now().await?;
                    self.store
                        .renew(&self.fence, now, &self.progress.snapshot())
                        .await
                };
                let result = tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(deadline.into()) => {
                        error!(owner = %self.fence.owner, epoch = self.fence.epoch,
                            "lease renewals failed for ttl - safety_margin; stopping the job before the lease can expire");
                        self.guard.cancel(LeaseLost::SelfFenced);
                        return;
                    }
                    result = attempt => result,
                };
                match result {
                    Ok(true) => {
                        debug!(owner = %self.fence.owner, epoch = self.fence.epoch, "lease renewed");
                        deadline = sent + self.holds_for;
                        self.guard.extend_to(deadline);
                        break;
                    }
                    Ok(false) => {
                        error!(owner = %self.fence.owner, epoch = self.fence.epoch,
                            "lease lost: the renewal matched nothing (taken over or expired); stopping the job");
                        self.guard.cancel(LeaseLost::TakenOver);
                        return;
                    }
                    Err(err) => {
                        let delay = delays.next().unwrap_or(self.renew_every);
                        warn!(owner = %self.fence.owner, epoch = self.fence.epoch, error = %err,
                            left_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
                            "lease renewal failed (its outcome is unknown); reading the lease, then retrying");
                        let still_ours = tokio::select! {
                            biased;
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep_until(deadline.into()) => continue,
                            read = self.store.still_held(&self.fence) => read,
                        };
                        if let Ok(false) = still_ours {
                            error!(owner = %self.fence.owner, epoch = self.fence.epoch,
                                "lease lost: the document no longer shows our claim; stopping the job");
                            self.guard.cancel(LeaseLost::TakenOver);
                            return;
                        }
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(delay) => {}
                            // The deadline branch above fires on the next pass.
                            _ = tokio::time::sleep_until(deadline.into()) => {}
                        }
                    }
                }
            }
        }
    }
}
