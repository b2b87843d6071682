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
//! Every write checks the lease guard first (the engine's and
//! `mongo::mark_removed` do).

use std::collections::BTreeMap;

use mongodb::bson::{Bson, DateTime, Document};
use mongodb::Database;

use super::stream::Change;
use crate::lease::Guard;
use crate::librechat::{markers, searchable, Rules};
use crate::meili::Meili;
use crate::mongo::{self, Collection, DocVersion};
use crate::progress::Progress;
use crate::reconcile::{self, Ctx, ReconcileError, SyncOptions};

/// What to do with one changed document.
#[derive(Debug, PartialEq)]
pub(crate) enum Action {
    Send(Document),
    Skip,
    Remove {
        meili_id: String,
        mark_removed: bool,
    },
    /// Not searchable and without a Meilisearch id, but with markers that
    /// say it may be indexed.
    MarkRemoved,
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
            match mongo::meili_id(collection, doc).or_else(|| change.meili_id.clone()) {
                Some(meili_id) => Action::Remove {
                    meili_id,
                    mark_removed,
                },
                None if mark_removed => Action::MarkRemoved,
                None => Action::Nothing,
            }
        }
        None => match &change.meili_id {
            Some(meili_id) => Action::Remove {
                meili_id: meili_id.clone(),
                mark_removed: false,
            },
            None => Action::Unresolved,
        },
    }
}

/// What applying a micro-batch did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Documents applied, by the kind of their last change (`skipped`:
    /// already indexed).
    pub by_op: BTreeMap<&'static str, u64>,
    /// Collections with deletes whose Meilisearch id is unknown.
    pub unresolved: Vec<Collection>,
    /// MongoDB's clock when the batch was judged.
    pub now: Option<DateTime>,
}

/// The servers and options a micro-batch is applied with.
pub(crate) struct Target<'a> {
    pub db: &'a Database,
    pub meili: &'a Meili,
    pub sync: &'a SyncOptions,
    pub guard: &'a Guard,
    pub progress: &'a Progress,
}

impl<'a> Target<'a> {
    /// The context of `collection`'s work on its index.
    pub fn ctx(&self, collection: Collection) -> Ctx<'a> {
        Ctx::new(
            self.db,
            self.meili,
            self.sync,
            self.guard,
            self.progress,
            collection,
            self.sync.index_uid(collection),
        )
    }
}

/// Applies `changes` (at most one per document).
pub(crate) async fn apply(
    target: &Target<'_>,
    changes: Vec<Change>,
) -> Result<Applied, ReconcileError> {
    let mut applied = Applied::default();
    if changes.is_empty() {
        return Ok(applied);
    }
    let now = mongo::server_time(target.db).await?;
    applied.now = Some(now);
    let rules = &target.sync.rules;
    for collection in Collection::ALL {
        let mut send: Vec<(Document, &'static str, bool)> = Vec::new();
        let mut remove = Vec::new();
        // The versions to mark removed: as read with their change, so a
        // document saved since keeps the markers of its newer version.
        let mut mark: Vec<DocVersion> = Vec::new();
        let mut unresolved = false;
        for change in changes.iter().filter(|c| c.collection == collection) {
            let label = match decide(rules, change, now) {
                Action::Send(doc) => {
                    // Counted once the flush-time check below has kept it.
                    send.push((doc, change.op.label(), change.around_hooks));
                    continue;
                }
                Action::Skip => "skipped",
                Action::Remove {
                    meili_id,
                    mark_removed,
                } => {
                    remove.push(meili_id);
                    if mark_removed {
                        mark.extend(change.full.as_ref().map(DocVersion::of));
                    }
                    change.op.label()
                }
                Action::MarkRemoved => {
                    mark.extend(change.full.as_ref().map(DocVersion::of));
                    change.op.label()
                }
                Action::Unresolved => {
                    unresolved = true;
                    change.op.label()
                }
                Action::Nothing => continue,
            };
            *applied.by_op.entry(label).or_default() += 1;
        }
        if unresolved {
            applied.unresolved.push(collection);
        }
        let checked = std::time::Instant::now();
        let send = leave_out_flagged(target.db, rules, collection, send, &mut applied).await?;
        let check_ms = checked.elapsed().as_millis() as u64;
        if send.is_empty() && remove.is_empty() && mark.is_empty() {
            continue;
        }
        let ctx = target.ctx(collection).with_scattered_ids();
        let (settled, deleted) = tokio::try_join!(
            reconcile::apply::index_documents(&ctx, send, now),
            ctx.delete_documents(&remove)
        )?;
        let sent_ms = checked.elapsed().as_millis() as u64 - check_ms;
        mongo::mark_removed(target.db, collection, &mark, target.guard).await?;
        tracing::debug!(index = %ctx.uid, check_ms, sent_ms, "micro-batch of one collection applied");
        for rejected in &settled.rejected {
            tracing::warn!(index = %ctx.uid, id = ?rejected.id, code = %rejected.code, message = %rejected.message,
                "Meilisearch refused a changed document; it stays unindexed (the next reconciliation reports it)");
        }
        crate::metrics::documents(
            &ctx.uid,
            settled.indexed,
            settled.deleted + deleted,
            settled.rejected.len() as u64,
        );
    }
    Ok(applied)
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
    send: Vec<(Document, &'static str, bool)>,
    applied: &mut Applied,
) -> Result<Vec<Document>, ReconcileError> {
    let ids: Vec<Bson> = send
        .iter()
        .filter(|(_, _, around_hooks)| !around_hooks)
        .filter_map(|(doc, _, _)| doc.get("_id").cloned())
        .collect();
    let flagged = mongo::processed_among(db, rules, collection, &ids).await?;
    let mut kept = Vec::with_capacity(send.len());
    for (doc, label, around_hooks) in send {
        let indexed_meanwhile =
            !around_hooks && doc.get("_id").is_some_and(|id| flagged.contains(id));
        let label = if indexed_meanwhile { "skipped" } else { label };
        *applied.by_op.entry(label).or_default() += 1;
        if !indexed_meanwhile {
            kept.push(doc);
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            at: None,
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
                meili_id: "m1".into(),
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
                meili_id: "m1".into(),
                mark_removed: false
            }
        );
        // A subagent record LibreChat's cleanup has not marked yet.
        let subagent = doc! { "_id": 1, "messageId": "m1", "user": "u", "subagentTask": {}, "_meiliIndex": false };
        assert_eq!(
            decide(&change(Some(subagent), None), now),
            Action::Remove {
                meili_id: "m1".into(),
                mark_removed: true
            }
        );
        assert_eq!(
            decide(&change(None, None), now),
            Action::Remove {
                meili_id: "from-pre-image".into(),
                mark_removed: false
            }
        );
        let mut unknown = change(None, None);
        unknown.meili_id = None;
        assert_eq!(decide(&unknown, now), Action::Unresolved);
        // Never sendable (no id), so never in the index: only its markers.
        let mut no_id = change(Some(doc! { "_id": 1, "_meiliIndex": true }), None);
        no_id.meili_id = None;
        assert_eq!(decide(&no_id, now), Action::MarkRemoved);
        no_id.full = Some(doc! { "_id": 1 });
        assert_eq!(decide(&no_id, now), Action::Nothing);
        // A flag cleared on a searchable document: it is sent again.
        assert_eq!(
            decide(&change(Some(plain.clone()), Some(false)), now),
            Action::Send(plain)
        );
    }
}
