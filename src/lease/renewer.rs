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

use std::time::Instant;

use backon::BackoffBuilder;
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, error, warn};

use super::guard::LeaseLost;
use super::runner::Owner;

impl Owner {
    /// Starts renewing the lease, safely ours until the local instant
    /// `deadline` (the first renewal is due `renew_every` after the send
    /// time that deadline implies). Dropping the handle (the job panicked,
    /// or the caller dropped `run_single_flight`) stops the timer, so a
    /// lease is never renewed for work that no longer runs; stopping drops
    /// the task at its next await: an attempt in flight is abandoned.
    pub(super) fn start_renewals(&self, deadline: Instant) -> AbortOnDropHandle<()> {
        AbortOnDropHandle::new(tokio::spawn(self.clone().keep_renewed(deadline)))
    }

    /// The renewal timer's task.
    async fn keep_renewed(self, mut deadline: Instant) {
        let (owner, epoch) = (&self.fence.owner, self.fence.epoch);
        let holds_for = self.opts.holds_for();
        // How long before the deadline a renewal is due.
        let ahead = holds_for - self.opts.renew_every;
        loop {
            // Due `renew_every` after the send time of the last good renewal.
            let due = deadline.checked_sub(ahead).unwrap_or_else(Instant::now);
            tokio::select! {
                _ = self.guard.cancelled() => return,
                _ = tokio::time::sleep_until(due.into()) => {}
            }
            let renewed = tokio::select! {
                biased;
                _ = tokio::time::sleep_until(deadline.into()) => {
                    error!(%owner, epoch,
                        "lease renewals failed for ttl - safety_margin; stopping the job before the lease can expire");
                    self.guard.cancel(LeaseLost::SelfFenced);
                    return;
                }
                renewed = self.renew(deadline) => renewed,
            };
            let Some(sent) = renewed else {
                self.guard.cancel(LeaseLost::TakenOver);
                return;
            };
            debug!(%owner, epoch, "lease renewed");
            deadline = sent + holds_for;
            self.guard.extend_to(deadline);
        }
    }

    /// Renews until a renewal is confirmed (the local instant before it was
    /// sent) or the lease shows lost (`None`), retrying errors with backoff.
    /// The caller abandons it at the local `deadline`.
    async fn renew(&self, deadline: Instant) -> Option<Instant> {
        let (owner, epoch) = (&self.fence.owner, self.fence.epoch);
        let renew_every = self.opts.renew_every;
        let mut delays = crate::retry::lease_store(renew_every).build();
        loop {
            let sent = Instant::now();
            let attempt = async {
                let now = self.store.server_now().await?;
                let progress = self.progress.snapshot();
                self.store.renew(&self.fence, now, &progress).await
            };
            let err = match attempt.await {
                Ok(true) => return Some(sent),
                Ok(false) => {
                    error!(%owner, epoch,
                        "lease lost: the renewal matched nothing (taken over or expired); stopping the job");
                    return None;
                }
                Err(err) => err,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            warn!(%owner, epoch, error = %err, left_ms = left.as_millis() as u64,
                "lease renewal failed (its outcome is unknown); reading the lease, then retrying");
            if let Ok(false) = self.store.still_held(&self.fence).await {
                error!(%owner, epoch,
                    "lease lost: the document no longer shows our claim; stopping the job");
                return None;
            }
            tokio::time::sleep(delays.next().unwrap_or(renew_every)).await;
        }
    }
}
