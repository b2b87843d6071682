//! What follow mode's owner has applied but not yet saved, or owes
//! (docs/design.md §4.12): the resume tokens (the furthest applied, the one
//! saved in the lease) and the id-set comparisons owed for deletes without
//! a Meilisearch id. `owner`'s follower holds them beside the micro-batch
//! being gathered, the pipeline and the expiry clock.

use std::time::{Duration, Instant};

use mongodb::bson::Document;
use tracing::{info, warn};

use super::saved;
use crate::lease::{unless_lost, Guard, LeaseHandle, LeaseLost};
use crate::mongo::Collection;

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
    /// None owed yet; each runs at most once per `every`.
    pub(super) fn every(every: Duration) -> Self {
        OrphanChecks {
            every,
            ..OrphanChecks::default()
        }
    }

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
