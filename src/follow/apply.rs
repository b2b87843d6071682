//! What one micro-batch does (docs/design.md §4.12): for each changed
//! document, its state as read with the change (`updateLookup`, at least as
//! new as the change) decides, with MongoDB's clock:
//!
//! | document | action |
//! |---|---|
//! | searchable, processed (flagged at the schema version) | skipped: that version is indexed already (LibreChat's save hook, or us) |
//! | searchable, processed, but the change edited its Meilisearch form around LibreChat's hooks (no new version token, flag untouched) | sent: the flag vouches for an older version |
//! | searchable, not processed, but processed by flush time | skipped: the save hook indexed it meanwhile (one `_id` query per micro-batch asks) |
//! | searchable, not processed | sent with the reconciliation's projection and acknowledged version-exactly (the engine's sender) |
//! | not searchable | deleted from Meilisearch; marked removed (LibreChat's cleanup markers) if flagged, attempted or pending cleanup |
//! | not searchable, and the change only cleared its flag or recorded a removal | nothing (whoever did it removed it) |
//! | not searchable, without a Meilisearch id | marked removed as above (it cannot be in the index) |
//! | gone | deleted from Meilisearch by the id its pre-image (or an earlier change) gives |
//! | gone, id unknown | left to the id-set comparison (`follow.orphan_check_every`) |
//!
//! A micro-batch goes through three steps, which the pipeline
//! (`follow::pipeline`) runs at different times: [`prepare`] (MongoDB's
//! clock, the table, the flush-time flag check), [`Prepared::enqueue`]
//! (every Meilisearch write enqueued, none awaited), and, once its tasks
//! ended, [`Enqueued::settle_tasks`] (poison isolation) and
//! [`Group::acknowledge`] (the version-exact acknowledgement, removal
//! markers) — for several consecutive micro-batches at once. Every write checks the lease guard
//! first (the engine's and `mongo::mark_removed` do).

use std::collections::{BTreeMap, HashMap};

use mongodb::bson::{Bson, DateTime, Document};
use mongodb::Database;

use super::latency::DocTimes;
use super::stream::Change;
use crate::librechat::{markers, searchable, Rules};
use crate::meili::TaskOutcome;
use crate::mongo::{self, Collection, DocVersion};
use crate::reconcile::{self, ReconcileError, Run};

/// What to do with one changed document.
#[derive(Debug, PartialEq)]
pub(crate) enum Action {
    Send(Document),
    Skip,
    /// Deleted from Meilisearch by its id, when known (not searchable and
    /// without one, it cannot be in the index), and, with `mark_removed`,
    /// marked removed.
    Remove {
        meili_id: Option<String>,
        mark_removed: bool,
    },
    /// Gone, and which Meilisearch document it was is unknown.
    Unresolved,
    Nothing,
}

/// The table of the module documentation, at MongoDB's time `now`.
pub(crate) fn decide(rules: &Rules, change: &Change, now: DateTime) -> Action {
    let collection = change.collection;
    match &change.full {
        Some(doc) if searchable::is_searchable(rules, collection, doc, now) => {
            if markers::is_processed(rules, doc) && !change.around_hooks {
                Action::Skip
            } else {
                Action::Send(doc.clone())
            }
        }
        Some(_) if change.flag_only == Some(false) => Action::Nothing,
        Some(doc) => {
            let mark_removed = markers::wants_removed_marker(rules, collection, doc);
            let meili_id = mongo::meili_id(collection, doc).or_else(|| change.meili_id.clone());
            if meili_id.is_none() && !mark_removed {
                return Action::Nothing;
            }
            Action::Remove {
                meili_id,
                mark_removed,
            }
        }
        None if change.meili_id.is_none() => Action::Unresolved,
        None => Action::Remove {
            meili_id: change.meili_id.clone(),
            mark_removed: false,
        },
    }
}

/// What a micro-batch asks of one collection's index.
#[derive(Default)]
struct Work {
    /// Documents to send (searchable at the micro-batch's clock).
    send: Vec<Document>,
    /// Meilisearch ids to delete.
    remove: Vec<String>,
    /// The versions to mark removed: as read with their change, so a
    /// document saved since keeps the markers of its newer version.
    mark: Vec<DocVersion>,
}

/// A micro-batch decided, nothing written yet.
pub(crate) struct Prepared {
    /// MongoDB's clock when the batch was judged.
    pub(crate) now: DateTime,
    /// Documents applied, by the kind of their last change (`skipped`:
    /// already indexed).
    pub(crate) by_op: BTreeMap<&'static str, u64>,
    /// Collections with deletes whose Meilisearch id is unknown.
    pub(crate) unresolved: Vec<Collection>,
    /// The times of the documents it writes to Meilisearch.
    pub(crate) written: Vec<DocTimes>,
    work: Vec<(Collection, Work)>,
}

/// Decides what `changes` (at most one per document) ask for, at MongoDB's
/// clock read now: the table of the module documentation, then — just
/// before sending — which of the documents to send were indexed and
/// flagged meanwhile (LibreChat's save hook), left out.
pub(crate) async fn prepare(
    target: &Run<'_>,
    changes: Vec<Change>,
) -> Result<Prepared, ReconcileError> {
    let now = mongo::server_time(target.db).await?;
    let mut prepared = Prepared {
        now,
        by_op: BTreeMap::new(),
        unresolved: Vec::new(),
        written: Vec::new(),
        work: Vec::new(),
    };
    let rules = &target.opts.rules;
    for collection in Collection::ALL {
        let mut send: Vec<(Document, &Change)> = Vec::new();
        let mut work = Work::default();
        let mut unresolved = false;
        for change in changes.iter().filter(|c| c.collection == collection) {
            let label = match decide(rules, change, now) {
                Action::Send(doc) => {
                    // Counted once the flush-time check below has kept it.
                    send.push((doc, change));
                    continue;
                }
                Action::Skip => "skipped",
                Action::Remove {
                    meili_id,
                    mark_removed,
                } => {
                    if let Some(meili_id) = meili_id {
                        work.remove.push(meili_id);
                        prepared.written.push(change.times);
                    }
                    if mark_removed {
                        work.mark.extend(change.full.as_ref().map(DocVersion::of));
                    }
                    change.op.label()
                }
                Action::Unresolved => {
                    unresolved = true;
                    change.op.label()
                }
                Action::Nothing => continue,
            };
            *prepared.by_op.entry(label).or_default() += 1;
        }
        if unresolved {
            prepared.unresolved.push(collection);
        }
        work.send = leave_out_flagged(target.db, rules, collection, send, &mut prepared).await?;
        if !(work.send.is_empty() && work.remove.is_empty() && work.mark.is_empty()) {
            prepared.work.push((collection, work));
        }
    }
    Ok(prepared)
}

/// A micro-batch whose Meilisearch writes are all enqueued (none awaited).
pub(crate) struct Enqueued {
    parts: Vec<(Collection, reconcile::apply::Enqueued, Vec<DocVersion>)>,
}

impl Prepared {
    /// Enqueues every Meilisearch write of the micro-batch — each
    /// collection's additions and deletions — and returns without waiting
    /// for any (every request checks the guard first).
    pub(crate) async fn enqueue(&mut self, target: &Run<'_>) -> Result<Enqueued, ReconcileError> {
        let mut parts = Vec::with_capacity(self.work.len());
        for (collection, work) in std::mem::take(&mut self.work) {
            let ctx = target.ctx(collection, target.progress).with_scattered_ids();
            let enqueued =
                reconcile::apply::enqueue_documents(&ctx, work.send, self.now, &work.remove)
                    .await?;
            parts.push((collection, enqueued, work.mark));
        }
        Ok(Enqueued { parts })
    }
}

impl Enqueued {
    /// Its tasks, in the order they were enqueued.
    pub(crate) fn tasks(&self) -> Vec<u64> {
        self.parts.iter().flat_map(|(_, e, _)| e.tasks()).collect()
    }

    /// Settles the micro-batch's tasks once they all ended (`outcomes`, by
    /// uid) — poison isolation included (`reconcile::apply::settle_enqueued`)
    /// — and adds what it sent and Meilisearch accepted, and what it
    /// deleted, to `group`, which acknowledges them. `true` when a batch
    /// was refused and parts of it sent again (isolation).
    pub(crate) async fn settle_tasks(
        self,
        target: &Run<'_>,
        outcomes: &mut HashMap<u64, TaskOutcome>,
        group: &mut Group,
    ) -> Result<bool, ReconcileError> {
        let mut isolated = false;
        for (collection, enqueued, mark) in self.parts {
            let ctx = target.ctx(collection, target.progress).with_scattered_ids();
            let part = group.part(collection);
            let done =
                reconcile::apply::settle_enqueued(&ctx, enqueued, outcomes, &mut part.accepted)
                    .await?;
            isolated |= done.isolated;
            for rejected in &done.rejected {
                tracing::warn!(index = %ctx.uid, id = ?rejected.id, code = %rejected.code, message = %rejected.message,
                    "Meilisearch refused a changed document; it stays unindexed (the next reconciliation reports it)");
            }
            part.indexed += done.indexed;
            part.deleted += done.deleted;
            part.rejected += done.rejected.len() as u64;
            part.mark.extend(mark);
        }
        Ok(isolated)
    }
}

/// What consecutive micro-batches whose tasks ended left to do, per
/// collection: the accepted documents to acknowledge (the latest version
/// of each) and the versions to mark removed.
#[derive(Default)]
pub(crate) struct Group {
    parts: Vec<(Collection, GroupPart)>,
}

#[derive(Default)]
struct GroupPart {
    accepted: reconcile::apply::Accepted,
    mark: Vec<DocVersion>,
    indexed: u64,
    deleted: u64,
    rejected: u64,
}

impl Group {
    fn part(&mut self, collection: Collection) -> &mut GroupPart {
        let at = self.parts.iter().position(|(c, _)| *c == collection);
        let at = at.unwrap_or_else(|| {
            self.parts.push((collection, GroupPart::default()));
            self.parts.len() - 1
        });
        &mut self.parts[at].1
    }

    /// Documents to acknowledge.
    pub(crate) fn accepted(&self) -> usize {
        self.parts.iter().map(|(_, p)| p.accepted.len()).sum()
    }

    /// Acknowledges the accepted documents version-exactly
    /// (`reconcile::apply::acknowledge_accepted`), then marks removed, each
    /// version-exactly, what the micro-batches deleted.
    pub(crate) async fn acknowledge(self, target: &Run<'_>) -> Result<(), ReconcileError> {
        for (collection, part) in self.parts {
            let ctx = target.ctx(collection, target.progress).with_scattered_ids();
            let acked = reconcile::apply::acknowledge_accepted(&ctx, part.accepted).await?;
            mongo::mark_removed(target.db, collection, &part.mark, target.guard).await?;
            crate::metrics::documents(
                &ctx.uid,
                part.indexed,
                acked.deleted + part.deleted,
                part.rejected,
            );
        }
        Ok(())
    }
}

/// The documents of `send` that nobody has marked indexed since their
/// change was read (but those edited around LibreChat's hooks, whose flag
/// was already set): a document processed by flush time was indexed by
/// LibreChat's save hook (at that version or a newer one), so
/// sending the version in hand would only double Meilisearch's work — or
/// briefly put an older version back. Those are counted as `skipped`, the
/// rest by the kind of their change.
async fn leave_out_flagged(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    send: Vec<(Document, &Change)>,
    prepared: &mut Prepared,
) -> Result<Vec<Document>, ReconcileError> {
    let ids: Vec<Bson> = send
        .iter()
        .filter(|(_, change)| !change.around_hooks)
        .filter_map(|(doc, _)| doc.get("_id").cloned())
        .collect();
    let flagged = mongo::processed_among(db, rules, collection, &ids).await?;
    let mut kept = Vec::with_capacity(send.len());
    for (doc, change) in send {
        let indexed_meanwhile =
            !change.around_hooks && doc.get("_id").is_some_and(|id| flagged.contains(id));
        let label = if indexed_meanwhile {
            "skipped"
        } else {
            change.op.label()
        };
        *prepared.by_op.entry(label).or_default() += 1;
        if !indexed_meanwhile {
            prepared.written.push(change.times);
            kept.push(doc);
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::latency::DocTimes;
    use crate::follow::stream::Op;
    use mongodb::bson::doc;

    fn change(full: Option<Document>, flag_only: Option<bool>) -> Change {
        Change {
            collection: Collection::Messages,
            op: Op::Update,
            id: Bson::Int32(1),
            meili_id: Some("from-pre-image".into()),
            full,
            flag_only,
            around_hooks: false,
            token: doc! {},
            times: DocTimes {
                written: None,
                received: std::time::Instant::now(),
            },
        }
    }

    #[test]
    fn each_document_state_has_its_action() {
        let rules = Rules::default();
        let decide = |change: &Change, now| decide(&rules, change, now);
        let now = DateTime::from_millis(1_000);
        let plain = doc! { "_id": 1, "messageId": "m1", "user": "u", "_meiliIndex": false };
        assert_eq!(
            decide(&change(Some(plain.clone()), None), now),
            Action::Send(plain.clone())
        );
        let hooked = doc! { "_id": 1, "messageId": "m1", "user": "u", "_meiliIndex": true, "_meiliIndexSchemaVersion": 1 };
        assert_eq!(
            decide(&change(Some(hooked.clone()), None), now),
            Action::Skip
        );
        // Edited around LibreChat's hooks: its flag vouches for an older version.
        let mut edited = change(Some(hooked.clone()), None);
        edited.around_hooks = true;
        assert_eq!(decide(&edited, now), Action::Send(hooked));
        // Indexed under an older schema version: sent again.
        let old_schema = doc! { "_id": 1, "messageId": "m1", "user": "u", "_meiliIndex": true };
        assert_eq!(
            decide(&change(Some(old_schema.clone()), None), now),
            Action::Send(old_schema)
        );
        let temporary = doc! { "_id": 1, "messageId": "m1", "user": "u", "isTemporary": true, "_meiliIndex": true };
        assert_eq!(
            decide(&change(Some(temporary.clone()), None), now),
            Action::Remove {
                meili_id: Some("m1".into()),
                mark_removed: true
            }
        );
        assert_eq!(
            decide(&change(Some(temporary), Some(false)), now),
            Action::Nothing,
            "a flag cleared on an unsearchable document is someone's removal"
        );
        let expired = doc! { "_id": 1, "messageId": "m1", "user": "u", "isTemporary": false, "expiredAt": now };
        assert_eq!(
            decide(&change(Some(expired), None), now),
            Action::Remove {
                meili_id: Some("m1".into()),
                mark_removed: false
            }
        );
        // A subagent record LibreChat's cleanup has not marked yet.
        let subagent = doc! { "_id": 1, "messageId": "m1", "user": "u", "subagentTask": {}, "_meiliIndex": false };
        assert_eq!(
            decide(&change(Some(subagent), None), now),
            Action::Remove {
                meili_id: Some("m1".into()),
                mark_removed: true
            }
        );
        assert_eq!(
            decide(&change(None, None), now),
            Action::Remove {
                meili_id: Some("from-pre-image".into()),
                mark_removed: false
            }
        );
        let mut unknown = change(None, None);
        unknown.meili_id = None;
        assert_eq!(decide(&unknown, now), Action::Unresolved);
        // Never sendable (no id), so never in the index: only its markers.
        let mut no_id = change(Some(doc! { "_id": 1, "_meiliIndex": true }), None);
        no_id.meili_id = None;
        assert_eq!(
            decide(&no_id, now),
            Action::Remove {
                meili_id: None,
                mark_removed: true
            }
        );
        no_id.full = Some(doc! { "_id": 1 });
        assert_eq!(decide(&no_id, now), Action::Nothing);
        // A flag cleared on a searchable document: it is sent again.
        assert_eq!(
            decide(&change(Some(plain.clone()), Some(false)), now),
            Action::Send(plain)
        );
    }
}
