//! Micro-batching: changes are gathered until the batch holds
//! `follow.max_docs` documents or its first change is `follow.max_wait` old
//! (or the stream has nothing more), then applied together.
//!
//! Only the last change of each document is kept: it carries the document
//! as it was when that change was read, which is at least as new as every
//! earlier one. A Meilisearch id learnt from an earlier change (an insert's
//! document, a pre-image) is kept for a later delete that lacks one.
//!
//! An update that only set `_meiliIndex: true` is an acknowledgement (ours,
//! or LibreChat's save hook saying it indexed that version): it asks for no
//! work. The stream filters those out on the server; should one arrive, it
//! is not a document to apply, but when the batch already holds that
//! document it refreshes what the batch knows of it (a version the hook
//! indexed by flush time is then skipped instead of sent twice).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use mongodb::bson::{DateTime, Document};

use super::stream::Change;
use crate::mongo;

/// Changes waiting to be applied.
#[derive(Debug, Default)]
pub(crate) struct MicroBatch {
    /// The last change of each document (by collection and `_id`).
    pub(crate) changes: HashMap<(&'static str, String), Change>,
    /// Where to resume once this batch is applied: the last change's token.
    pub(crate) token: Option<Document>,
    /// When the first change to apply arrived.
    opened: Option<Instant>,
    /// The newest change's time (MongoDB's).
    pub(crate) newest: Option<DateTime>,
    /// When it was first due while the pipeline had no room for it (it
    /// gathered on meanwhile): the start of its wait for room.
    pub(crate) held: Option<Instant>,
    /// The stream had nothing more after its last change (`token` is the
    /// post-batch token of that `getMore`).
    pub(crate) caught_up: bool,
}

impl MicroBatch {
    pub(crate) fn push(&mut self, change: Change) {
        self.token = Some(change.token.clone());
        self.caught_up = false;
        self.newest = self.newest.max(change.times.written);
        let key = (change.collection.name(), mongo::id_key(&change.id));
        if change.flag_only == Some(true) {
            // Nothing to do for it; but a document already waiting here is
            // now known as of this (later) read.
            if let Some(waiting) = self.changes.get_mut(&key) {
                waiting.full = change.full;
            }
            return;
        }
        self.opened.get_or_insert_with(Instant::now);
        let merged = match self.changes.remove(&key) {
            None => change,
            Some(earlier) => Change {
                meili_id: change.meili_id.or(earlier.meili_id),
                // Only an acknowledgement after an acknowledgement is one.
                flag_only: earlier.flag_only.and(change.flag_only),
                // A version written around the hooks may be what the
                // index holds until this document is sent.
                around_hooks: earlier.around_hooks || change.around_hooks,
                ..change
            },
        };
        self.changes.insert(key, merged);
    }

    /// Documents waiting.
    pub(crate) fn len(&self) -> usize {
        self.changes.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The stream had nothing more after what this batch holds: `token`
    /// (the post-batch token) is where to resume once it is applied.
    pub(crate) fn caught_up(&mut self, token: Document) {
        self.token = Some(token);
        self.caught_up = true;
    }

    /// When the batch must be applied at the latest (`None`: nothing waits):
    /// `max_wait` after its first change, or since it was held.
    pub(crate) fn due(&self, max_wait: Duration) -> Option<Instant> {
        let waited = self.opened.map(|opened| opened + max_wait);
        [self.held, waited].into_iter().flatten().min()
    }

    /// It is due, but the pipeline has no room for it: it goes on gathering
    /// until there is (the first call says since when it waits).
    pub(crate) fn hold(&mut self) {
        if !self.changes.is_empty() {
            self.held.get_or_insert_with(Instant::now);
        }
    }

    /// Takes everything, leaving an empty batch.
    pub(crate) fn drain(&mut self) -> MicroBatch {
        std::mem::take(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::latency::DocTimes;
    use crate::follow::stream::Op;
    use crate::mongo::Collection;
    use mongodb::bson::{doc, Bson};

    fn change(id: i32, op: Op, full: Option<Document>, n: i64) -> Change {
        Change {
            collection: Collection::Messages,
            op,
            id: Bson::Int32(id),
            meili_id: full
                .as_ref()
                .and_then(|d| mongo::meili_id(Collection::Messages, d)),
            full,
            flag_only: None,
            around_hooks: false,
            token: doc! { "_data": n.to_string() },
            times: DocTimes {
                written: Some(DateTime::from_millis(n)),
                received: std::time::Instant::now(),
            },
        }
    }

    #[test]
    fn keeps_the_last_change_per_document_and_what_earlier_ones_knew() {
        let mut batch = MicroBatch::default();
        batch.push(change(
            1,
            Op::Insert,
            Some(doc! { "_id": 1, "messageId": "m1", "text": "a" }),
            1,
        ));
        batch.push(change(
            2,
            Op::Insert,
            Some(doc! { "_id": 2, "messageId": "m2" }),
            2,
        ));
        batch.push(change(1, Op::Delete, None, 3));
        assert_eq!(batch.len(), 2);
        let drained = batch.drain();
        assert_eq!(batch.len(), 0);
        assert_eq!(drained.token, Some(doc! { "_data": "3" }));
        assert_eq!(drained.newest, Some(DateTime::from_millis(3)));
        let deleted = drained
            .changes
            .values()
            .find(|c| c.id == Bson::Int32(1))
            .unwrap();
        assert_eq!(deleted.op, Op::Delete);
        assert_eq!(
            deleted.meili_id.as_deref(),
            Some("m1"),
            "the insert's id serves the delete"
        );
    }

    #[test]
    fn acknowledgements_ask_for_nothing_but_refresh_what_waits() {
        let mut batch = MicroBatch::default();
        let mut ack = change(
            7,
            Op::Update,
            Some(doc! { "_id": 7, "_meiliIndex": true }),
            1,
        );
        ack.flag_only = Some(true);
        batch.push(ack.clone());
        assert_eq!(batch.len(), 0, "an acknowledgement alone is no work");
        assert!(batch.due(Duration::from_millis(500)).is_none());
        assert_eq!(
            batch.drain().token,
            Some(doc! { "_data": "1" }),
            "it still moves the token"
        );

        batch.push(change(
            7,
            Op::Update,
            Some(doc! { "_id": 7, "_meiliIndex": false }),
            2,
        ));
        ack.token = doc! { "_data": "3" };
        batch.push(ack);
        let drained = batch.drain();
        assert_eq!(drained.changes.len(), 1);
        assert_eq!(
            drained
                .changes
                .values()
                .next()
                .unwrap()
                .full
                .as_ref()
                .unwrap()
                .get_bool("_meiliIndex"),
            Ok(true),
            "the later read says the hook indexed it"
        );
        assert_eq!(
            drained.changes.values().next().unwrap().flag_only,
            None,
            "still the edit, not an acknowledgement"
        );

        // A flag cleared after an edit: the edit's meaning stays.
        let mut cleared = change(8, Op::Update, Some(doc! { "_id": 8 }), 4);
        cleared.flag_only = Some(false);
        batch.push(change(8, Op::Update, Some(doc! { "_id": 8 }), 4));
        batch.push(cleared.clone());
        assert_eq!(
            batch.drain().changes.values().next().unwrap().flag_only,
            None
        );
        batch.push(cleared);
        assert_eq!(
            batch.drain().changes.values().next().unwrap().flag_only,
            Some(false)
        );
    }

    #[test]
    fn is_due_max_wait_after_its_first_change() {
        let mut batch = MicroBatch::default();
        let before = Instant::now();
        batch.push(change(1, Op::Insert, Some(doc! { "_id": 1 }), 1));
        let due = batch.due(Duration::from_millis(500)).unwrap();
        assert!(due >= before + Duration::from_millis(500));
        assert!(due <= Instant::now() + Duration::from_millis(500));
    }
}
