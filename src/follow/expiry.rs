//! The follower's expiry clock (docs/design.md §4.12): expiry writes
//! nothing to the change stream, so the owner asks MongoDB when the next
//! document that may be in Meilisearch expires (`mongo::next_expiry`, one
//! document sorted by `expiredAt`: LibreChat's TTL index serves it), wakes
//! up at that moment and sweeps (`reconcile::expiry::sweep`: removed from
//! Meilisearch, marked removed). It asks again after each sweep and each
//! periodic reconciliation, and a change whose document expires sooner than
//! the time it knows (LibreChat's retention setting `expiredAt` on a save)
//! moves the wake-up earlier.

use std::time::{Duration, Instant};

use mongodb::bson::{DateTime, Document};

use super::apply::Target;
use super::stream::Change;
use crate::librechat::searchable;
use crate::mongo::{self, Collection};
use crate::reconcile::{self, ReconcileError};

/// Woken this long after the expiry, so that MongoDB's clock has passed it
/// however the local one reads.
const MARGIN: Duration = Duration::from_millis(50);

/// When the next expiry is, on MongoDB's clock and as a local deadline.
#[derive(Debug, Default)]
pub(crate) struct ExpiryClock {
    at: Option<DateTime>,
    wake: Option<Instant>,
}

impl ExpiryClock {
    /// When to wake up for the next expiry (`None`: nothing expires).
    pub fn due(&self) -> Option<Instant> {
        self.wake
    }

    /// The next expiry on MongoDB's clock, if any.
    pub fn next(&self) -> Option<DateTime> {
        self.at
    }

    fn set(&mut self, at: Option<DateTime>, server_now: DateTime) {
        self.at = at;
        self.wake = at.map(|at| {
            let ms = (at.timestamp_millis() - server_now.timestamp_millis()).max(0);
            Instant::now() + Duration::from_millis(ms as u64) + MARGIN
        });
    }

    /// Asks MongoDB for the next expiry of both collections.
    pub async fn plan(&mut self, db: &mongodb::Database) -> Result<(), ReconcileError> {
        let now = mongo::server_time(db).await?;
        let mut next: Option<DateTime> = None;
        for collection in Collection::ALL {
            if let Some(at) = mongo::next_expiry(db, collection, now).await? {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        self.set(next, now);
        if let Some(at) = next {
            tracing::debug!(next_expiry = %at, "the follower wakes up for the next expiry");
        }
        Ok(())
    }

    /// A document of a micro-batch applied at MongoDB's time `now` expires
    /// at `soonest` (the earliest of [`soonest`]): when that is still ahead
    /// and before the next expiry known, the wake-up moves earlier.
    pub fn consider(&mut self, soonest: Option<DateTime>, now: DateTime) {
        if let Some(at) = soonest.filter(|at| *at > now) {
            if self.at.is_none_or(|known| at < known) {
                self.set(Some(at), now);
            }
        }
    }
}

/// The earliest `expiredAt` among the documents read with `changes`.
pub(crate) fn soonest(changes: &[Change]) -> Option<DateTime> {
    changes
        .iter()
        .filter_map(|c| expiry_of(c.full.as_ref()?))
        .min()
}

fn expiry_of(doc: &Document) -> Option<DateTime> {
    doc.get_datetime(searchable::EXPIRY).ok().copied()
}

/// Sweeps both collections' expired documents out of Meilisearch. Returns
/// how many went.
pub(crate) async fn sweep(target: &Target<'_>) -> Result<u64, ReconcileError> {
    let mut removed = 0;
    for collection in Collection::ALL {
        let ctx = target.ctx(collection);
        let n = reconcile::expiry::sweep(&ctx).await?;
        crate::metrics::documents(&ctx.uid, 0, n, 0);
        removed += n;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            at: None,
            received: std::time::Instant::now(),
        }
    }

    #[test]
    fn a_change_expiring_sooner_moves_the_wake_up_earlier_never_later() {
        let now = DateTime::from_millis(1_000_000);
        let at = |secs: i64| DateTime::from_millis(1_000_000 + secs * 1_000);
        let mut clock = ExpiryClock::default();
        assert_eq!(clock.due(), None);
        assert_eq!(soonest(&[change(None)]), None);
        clock.consider(soonest(&[change(None), change(Some(at(-5)))]), now);
        assert_eq!(clock.due(), None, "no expiry ahead, or one already passed");
        assert_eq!(
            soonest(&[change(Some(at(60))), change(Some(at(90)))]),
            Some(at(60))
        );
        clock.consider(soonest(&[change(Some(at(60)))]), now);
        assert_eq!(clock.next(), Some(at(60)));
        let wake = clock.due().unwrap();
        assert!(wake > Instant::now() + Duration::from_secs(59));
        clock.consider(Some(at(120)), now);
        assert_eq!(clock.next(), Some(at(60)), "a later expiry changes nothing");
        clock.consider(Some(at(2)), now);
        assert_eq!(clock.next(), Some(at(2)));
        assert!(clock.due().unwrap() < Instant::now() + Duration::from_secs(3));
    }
}
