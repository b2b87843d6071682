//! What follow mode's owner has read but not yet applied or saved
//! (docs/design.md §4.12): the micro-batch being gathered, the pipeline of
//! micro-batches in flight, the resume tokens (the furthest applied, the one
//! saved in the lease), the id-set comparisons owed for deletes without a
//! Meilisearch id, and when the next document expires. `owner` drives it.

use std::time::{Duration, Instant};

use mongodb::bson::{DateTime, Document};
use tracing::{info, warn};

use super::batch::MicroBatch;
use super::expiry::ExpiryClock;
use super::pipeline::Pipeline;
use super::saved;
use crate::lease::{unless_lost, Guard, LeaseHandle, LeaseLost};
use crate::mongo::Collection;

/// What the follow loop has read but not yet applied or saved: the
/// micro-batch being gathered, the resume tokens, and the id-set
/// comparisons that deletes without a Meilisearch id asked for.
pub(super) struct Pending {
    pub(super) batch: MicroBatch,
    /// The micro-batches enqueued and not yet settled.
    pub(super) pipeline: Pipeline,
    pub(super) tokens: Tokens,
    pub(super) orphans: OrphanChecks,
    /// Id-set comparisons owed (a delete without a pre-image applied at
    /// that MongoDB time) and not yet recorded in the lease: the resume
    /// token is not saved past them until they are.
    pub(super) unrecorded: Vec<(Collection, DateTime)>,
    /// When the next document expires (a sweep is due then).
    pub(super) expiry: ExpiryClock,
}

/// While micro-batches are in flight, the next one is enqueued at least
/// this long after the last ([`Pending::due`]).
const ENQUEUE_SPACING: Duration = Duration::from_millis(50);

impl Pending {
    /// Nothing gathered or in flight; `saved`: the resume token saved.
    pub(super) fn new(pipeline: Pipeline, orphan_check_every: Duration, saved: Document) -> Self {
        Pending {
            batch: MicroBatch::default(),
            pipeline,
            tokens: Tokens::new(Some(saved.clone()), Some(saved)),
            orphans: OrphanChecks {
                every: orphan_check_every,
                ..OrphanChecks::default()
            },
            unrecorded: Vec::new(),
            expiry: ExpiryClock::default(),
        }
    }

    /// When the follow loop must look again, at `then` at the latest: a
    /// micro-batch, a comparison or a sweep due. A due micro-batch waits
    /// while the pipeline is full: settling the oldest one makes room.
    pub(super) fn wake(&self, max_wait: Duration, reader_busy: bool, then: Instant) -> Instant {
        let room = self.pipeline.has_room();
        [
            self.due(max_wait, reader_busy).filter(|_| room),
            self.orphans.due(),
            self.expiry.due(),
        ]
        .into_iter()
        .flatten()
        .fold(then, Instant::min)
    }

    /// When the gathered changes are to be enqueued (`None`: nothing
    /// gathered); `reader_busy`: the reader has more changes queued.
    ///
    /// - When the reader has nothing more and nothing is in flight,
    ///   at once: Meilisearch is idle, every moment waited is latency.
    /// - When the reader has nothing more and micro-batches are in flight,
    ///   [`ENQUEUE_SPACING`] after the last one was enqueued: Meilisearch
    ///   merges the tasks it finds waiting, so what is enqueued while it
    ///   indexes is indexed together with the next batch it starts, and a
    ///   short spacing saves the fixed MongoDB round trips of many tiny
    ///   micro-batches (a change waits at most the spacing for it, and
    ///   misses the next indexing batch only when that one starts within
    ///   the spacing).
    /// - `follow.max_wait` after its first change, in any case (a
    ///   continuous stream); at once once it was held for room.
    pub(super) fn due(&self, max_wait: Duration, reader_busy: bool) -> Option<Instant> {
        if self.batch.is_empty() {
            return None;
        }
        let ready = (!reader_busy).then(|| match self.pipeline.last_enqueued() {
            Some(last) if !self.pipeline.is_empty() => last + ENQUEUE_SPACING,
            _ => Instant::now(),
        });
        [self.batch.due(max_wait), ready]
            .into_iter()
            .flatten()
            .min()
    }

    /// Records the owed comparisons not yet in the lease. `false`: some
    /// could not be (not confirmed); they are tried again with the next save.
    pub(super) async fn record_owed(
        &mut self,
        guard: &Guard,
        lease: &LeaseHandle,
    ) -> Result<bool, LeaseLost> {
        while let Some(&(collection, since)) = self.unrecorded.first() {
            let owed = saved::owe_orphan_check(lease, guard, collection.name(), since);
            if let Err(error) = unless_lost(owed.await)? {
                warn!(%error, collection = collection.name(),
                    "could not record an owed id-set comparison in the lease; the resume token waits until it is");
                return Ok(false);
            }
            self.unrecorded.remove(0);
        }
        Ok(true)
    }

    /// Saves the safe resume token — only once every comparison owed for
    /// the deletes behind it is recorded in the lease, so that an owner
    /// resuming from the token, or taking over, still makes it.
    pub(super) async fn save_token(
        &mut self,
        guard: &Guard,
        lease: &LeaseHandle,
    ) -> Result<(), LeaseLost> {
        if self.record_owed(guard, lease).await? {
            self.tokens.save(guard, lease).await?;
        }
        Ok(())
    }
}

/// The resume tokens: the furthest one up to which everything is applied
/// (`safe`), and the one saved in the lease.
pub(super) struct Tokens {
    pub(super) safe: Option<Document>,
    pub(super) saved: Option<Document>,
    pub(super) saved_at: Instant,
}

impl Tokens {
    /// Everything up to `safe` is applied; `saved` is in the lease.
    pub(super) fn new(safe: Option<Document>, saved: Option<Document>) -> Self {
        Tokens {
            safe,
            saved,
            saved_at: Instant::now(),
        }
    }

    /// Saves the safe token if it moved. A save that is not confirmed is
    /// only logged: the next owner then resumes from an earlier token and
    /// applies a few changes again, which is harmless.
    pub(super) async fn save(
        &mut self,
        guard: &Guard,
        lease: &LeaseHandle,
    ) -> Result<(), LeaseLost> {
        self.saved_at = Instant::now();
        let Some(safe) = &self.safe else {
            return Ok(());
        };
        if self.saved.as_ref() == Some(safe) {
            return Ok(());
        }
        match unless_lost(saved::save_token(lease, guard, safe).await)? {
            Ok(()) => self.saved = Some(safe.clone()),
            Err(error) => {
                warn!(%error, "could not save the resume token (the next owner resumes from an earlier one)")
            }
        }
        Ok(())
    }
}

/// Deletes without a known Meilisearch id wait for the id-set comparison,
/// which runs at most once per `follow.orphan_check_every`.
#[derive(Default)]
pub(super) struct OrphanChecks {
    every: Duration,
    pending: Vec<Collection>,
    last: Option<Instant>,
    due: Option<Instant>,
}

impl OrphanChecks {
    pub(super) fn note(&mut self, collections: &[Collection]) {
        for collection in collections {
            if !self.pending.contains(collection) {
                info!(
                    collection = collection.name(),
                    "a delete without a pre-image: its Meilisearch document goes with the next id-set comparison (follow.orphan_check_every)"
                );
                self.pending.push(*collection);
            }
        }
        if !self.pending.is_empty() && self.due.is_none() {
            let now = Instant::now();
            self.due = Some(self.last.map_or(now, |last| (last + self.every).max(now)));
        }
    }

    /// Comparisons owed from before this stream began (the lease says so):
    /// due at once.
    pub(super) fn owed(&mut self, collections: &[Collection]) {
        for collection in collections {
            if !self.pending.contains(collection) {
                self.pending.push(*collection);
            }
        }
        self.due = Some(Instant::now());
    }

    /// When the comparison is due (`None`: nothing waits for it).
    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    pub(super) fn take(&mut self) -> Vec<Collection> {
        self.last = Some(Instant::now());
        self.due = None;
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphan_checks_run_at_once_then_at_most_once_per_period() {
        let mut checks = OrphanChecks {
            every: Duration::from_secs(60),
            ..OrphanChecks::default()
        };
        assert!(checks.due().is_none());
        checks.note(&[Collection::Messages]);
        checks.note(&[Collection::Messages]);
        assert!(
            checks.due().unwrap() <= Instant::now(),
            "the first runs at once"
        );
        assert_eq!(checks.take(), vec![Collection::Messages]);
        assert!(checks.due().is_none());
        checks.note(&[Collection::Conversations]);
        assert!(
            checks.due().unwrap() >= Instant::now() + Duration::from_secs(59),
            "debounced"
        );
        // Owed by an earlier owner: at once, whatever the period.
        checks.owed(&[Collection::Messages]);
        assert!(checks.due().unwrap() <= Instant::now());
        assert_eq!(
            checks.take(),
            vec![Collection::Conversations, Collection::Messages]
        );
    }
}
