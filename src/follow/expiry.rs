//! The follower's expiry clock (docs/design.md §4.12): expiry writes
//! nothing to the change stream, so the owner asks MongoDB for the earliest
//! expiry among the documents that may still be in Meilisearch
//! (`mongo::next_expiry`, one document sorted by `expiredAt`: LibreChat's
//! TTL index serves it), wakes up at that moment and sweeps
//! (`reconcile::expiry::sweep`: removed from Meilisearch, marked removed).
//! It asks again after each sweep and each periodic reconciliation, and a
//! change whose document expires sooner than the time it knows
//! (LibreChat's retention setting `expiredAt` on a save) moves the wake-up
//! earlier.
//!
//! The earliest expiry may have passed already: a document that expired
//! while the last sweep (or reconciliation) ran, after the time that sweep
//! judged by. That is the next to go, so the wake-up is at once — asking
//! only for expiries still ahead would leave it in Meilisearch until the
//! next reconciliation. What the query skips is what the sweep before it
//! had its chance at: every plan comes after a sweep that began after the
//! previous plan (the follower's own, or the periodic reconciliation's
//! first step), so it asks only for expiries later than the previous plan's
//! time. A document older than that and still unmarked is one that sweep
//! kept (an `expiredAt` array still searchable through a later date) or
//! could not mark for the version it read (saved since: its change removes
//! it) — never a reason to sweep again, so nothing makes the clock spin.

use std::time::{Duration, Instant};

use mongodb::bson::DateTime;

use super::stream::Change;
use crate::librechat::searchable;
use crate::mongo::{self, Collection};
use crate::reconcile::{self, ReconcileError, Run};

/// Woken this long after the expiry, so that MongoDB's clock has passed it
/// however the local one reads (and, with expiries overdue, the shortest
/// pause between two sweeps).
const MARGIN: Duration = Duration::from_millis(50);

/// When the next expiry is, on MongoDB's clock and as a local deadline.
#[derive(Debug, Default)]
pub(crate) struct ExpiryClock {
    at: Option<DateTime>,
    wake: Option<Instant>,
    /// MongoDB's time of the last plan: the sweep after it judged every
    /// expiry up to at least then.
    planned: Option<DateTime>,
}

impl ExpiryClock {
    /// When to wake up for the next expiry (`None`: nothing expires).
    pub(crate) fn due(&self) -> Option<Instant> {
        self.wake
    }

    /// The next expiry on MongoDB's clock, if any (passed already: a sweep
    /// is due at once).
    pub(crate) fn next(&self) -> Option<DateTime> {
        self.at
    }

    fn set(&mut self, at: Option<DateTime>, server_now: DateTime) {
        self.at = at;
        self.wake = at.map(|at| {
            let ms = (at.timestamp_millis() - server_now.timestamp_millis()).max(0);
            Instant::now() + Duration::from_millis(ms as u64) + MARGIN
        });
    }

    /// Asks MongoDB for the next expiry of both collections: the earliest
    /// among the documents that may be in Meilisearch, later than the
    /// previous plan (see the module documentation). Called after a sweep
    /// (the follower's, or the one a reconciliation begins with).
    pub(crate) async fn plan(&mut self, db: &mongodb::Database) -> Result<(), ReconcileError> {
        let now = mongo::server_time(db).await?;
        let mut next = None;
        for collection in Collection::ALL {
            let at = mongo::next_expiry(db, collection, self.planned).await?;
            next = next.into_iter().chain(at).min();
        }
        self.planned = Some(now);
        self.set(next, now);
        tracing::debug!(
            next_expiry = next.map_or_else(|| "none".to_string(), |at| at.to_string()),
            overdue = next.is_some_and(|at| at <= now),
            "asked MongoDB for the next expiry"
        );
        Ok(())
    }

    /// The documents of a micro-batch applied at MongoDB's time `now`
    /// expire at `expiries`: when the soonest still ahead is before the
    /// next expiry known, the wake-up moves earlier. (One already passed
    /// went with the micro-batch itself: it was not searchable at `now`.)
    pub(crate) fn consider(&mut self, expiries: Vec<DateTime>, now: DateTime) {
        if let Some(at) = expiries.into_iter().filter(|at| *at > now).min() {
            if self.at.is_none_or(|known| at < known) {
                self.set(Some(at), now);
            }
        }
    }
}

/// The `expiredAt` dates of the documents read with `changes`. Which is the
/// soonest that matters depends on MongoDB's time when the batch is applied
/// (a passed one is applied as a delete): [`ExpiryClock::consider`] takes
/// the soonest still ahead.
pub(crate) fn expiries(changes: &[Change]) -> Vec<DateTime> {
    changes
        .iter()
        .flat_map(|c| &c.full)
        .filter_map(|doc| doc.get_datetime(searchable::EXPIRY).ok().copied())
        .collect()
}

/// Sweeps both collections' expired documents out of Meilisearch. Returns
/// how many went.
pub(crate) async fn sweep(target: &Run<'_>) -> Result<u64, ReconcileError> {
    let mut removed = 0;
    for collection in Collection::ALL {
        let ctx = target.ctx(collection, target.progress);
        let n = reconcile::expiry::sweep(&ctx).await?;
        crate::metrics::documents(&ctx.uid, 0, n, 0);
        removed += n;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::latency::DocTimes;
    use crate::follow::stream::Op;
    use mongodb::bson::{doc, Bson};

    fn change(expired_at: Option<DateTime>) -> Change {
        let mut full = doc! { "_id": 1, "messageId": "m" };
        if let Some(at) = expired_at {
            full.insert("expiredAt", at);
        }
        Change {
            collection: Collection::Messages,
            op: Op::Update,
            id: Bson::Int32(1),
            meili_id: None,
            full: Some(full),
            flag_only: None,
            around_hooks: false,
            token: doc! {},
            times: DocTimes {
                written: None,
                received: std::time::Instant::now(),
            },
        }
    }

    #[test]
    fn a_change_expiring_sooner_moves_the_wake_up_earlier_never_later() {
        let now = DateTime::from_millis(1_000_000);
        let at = |secs: i64| DateTime::from_millis(1_000_000 + secs * 1_000);
        let mut clock = ExpiryClock::default();
        assert_eq!(clock.due(), None);
        assert!(expiries(&[change(None)]).is_empty());
        clock.consider(expiries(&[change(None), change(Some(at(-5)))]), now);
        assert_eq!(clock.due(), None, "no expiry ahead, or one already passed");
        clock.consider(expiries(&[change(Some(at(90))), change(Some(at(60)))]), now);
        assert_eq!(clock.next(), Some(at(60)));
        let wake = clock.due().unwrap();
        assert!(wake > Instant::now() + Duration::from_secs(59));
        clock.consider(expiries(&[change(Some(at(120)))]), now);
        assert_eq!(clock.next(), Some(at(60)), "a later expiry changes nothing");
        // A passed expiry in the same micro-batch (that document goes with
        // it) hides none that is still ahead.
        clock.consider(expiries(&[change(Some(at(-1))), change(Some(at(2)))]), now);
        assert_eq!(clock.next(), Some(at(2)));
        assert!(clock.due().unwrap() < Instant::now() + Duration::from_secs(3));
    }

    #[test]
    fn a_passed_expiry_is_due_at_once() {
        let now = DateTime::from_millis(1_000_000);
        let mut clock = ExpiryClock::default();
        clock.set(Some(DateTime::from_millis(999_000)), now);
        assert!(clock.due().unwrap() <= Instant::now() + MARGIN);
    }
}
