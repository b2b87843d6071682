//! The read-only plan (docs/design.md §4.1): what each index and collection look
//! like and what a reconciliation would do. It writes nothing, takes no lease,
//! and costs a health check, two index lookups (the index and a leftover
//! `<uid>_reindex`), a settings read and a stats read per index, one count
//! aggregation and one count of the excluded documents pending cleanup per
//! collection, and one read of the reindex marker. The `plan` command adds
//! LibreChat's own view ([`librechat_view`]: four more counts per collection).
//! Plain data: its text is `report::plan`'s.
//!
//! JSON shape (stable; camelCase):
//! `{ meiliHealth, serverTime, nothingToDo, indexes: [ { collection, indexUid,
//! exists, primaryKey, expectedPrimaryKey, meiliDocuments, mongo: { indexable,
//! indexed, unindexed, flagged }, pendingCleanup, settingsToApply: {…},
//! rebuild: null | { reason: indexMissing | wrongPrimaryKey | indexLost, … },
//! driftSuspected, exactComparisonPending, leftoverBuildIndex,
//! documentsToIndex, skippedByThreshold, librechat: null | { searchable,
//! processed, pendingIndexing, pendingCleanup, complete } } ] }`.

use mongodb::bson::DateTime;
use mongodb::Database;
use serde::Serialize;
use serde_json::{Map, Value};

use super::error::ReconcileError;
use super::options::{build_uid, SyncOptions};
use super::{marker, settings};
use crate::meili::Meili;
use crate::mongo::{self, Collection, Counts, LibreChatProgress};

/// Why an index must be rebuilt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum RebuildReason {
    /// The index does not exist: create it, reset the flags, index everything.
    IndexMissing,
    /// The primary key cannot be changed in place: delete, recreate, reindex.
    #[serde(rename_all = "camelCase")]
    WrongPrimaryKey { actual: Option<String> },
    /// The index has far fewer documents than MongoDB says are indexed (e.g.
    /// Meilisearch lost its data): reset the flags and reindex into it.
    #[serde(rename_all = "camelCase")]
    IndexLost {
        meili_documents: u64,
        mongo_indexed: u64,
    },
    /// An operator asked for a full reindex (`reindex`).
    Forced,
}

impl RebuildReason {
    /// Whether the index itself must be (re)created.
    pub(crate) fn recreates_index(&self) -> bool {
        !matches!(self, Self::IndexLost { .. } | Self::Forced)
    }
}

/// One index and its collection.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexPlan {
    pub(crate) collection: Collection,
    pub(crate) index_uid: String,
    pub exists: bool,
    pub(crate) primary_key: Option<String>,
    pub(crate) expected_primary_key: String,
    /// Documents in the index (0 when it does not exist).
    pub meili_documents: u64,
    pub mongo: Counts,
    /// Excluded documents (subagent records) that may still be in
    /// Meilisearch, by LibreChat's markers: they will be removed and marked.
    pub(crate) pending_cleanup: u64,
    /// The settings `PATCH` that would be sent (empty: settings are right).
    pub settings_to_apply: Map<String, Value>,
    pub rebuild: Option<RebuildReason>,
    /// The index and the flags disagree on the count: id sets will be compared.
    pub(crate) drift_suspected: bool,
    /// A reindex swapped (or was about to swap) this index and died before
    /// its flags were set exactly: every document will be compared.
    pub(crate) exact_comparison_pending: bool,
    /// A `<uid>_reindex` index left by an interrupted reindex: it will be dropped.
    pub(crate) leftover_build_index: bool,
    /// Documents that would be sent (before drift repair adds any).
    pub documents_to_index: u64,
    /// Unindexed documents below the threshold are left for a later run.
    pub(crate) skipped_by_threshold: bool,
    /// LibreChat's own `getSyncProgress()` of the collection, when asked
    /// for ([`librechat_view`]).
    pub(crate) librechat: Option<LibreChatProgress>,
}

/// The whole plan.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// `GET /health`'s status (`available`).
    pub meili_health: String,
    /// MongoDB's clock when the counts were taken (RFC 3339).
    pub(crate) server_time: String,
    pub indexes: Vec<IndexPlan>,
    /// Nothing would change (ignoring a `--deep` comparison).
    pub nothing_to_do: bool,
}

/// Reads both servers and decides; writes nothing.
pub async fn plan(
    mongo_db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
) -> Result<Plan, ReconcileError> {
    let surveyed = survey(mongo_db, meili, opts).await?;
    surveyed.counted(mongo_db, opts).await
}

/// What the plan reads before MongoDB's counts of the searchable documents
/// (the one part of it that reads every document, seconds at millions):
/// both servers' view of each index. A run may start sending a small
/// backlog while the counts are taken ([`IndexPlan::may_send_before_counts`],
/// design §4.6, Head start).
pub(crate) struct Survey {
    meili_health: String,
    /// MongoDB's clock when the survey began: the counts' `now`.
    pub(crate) now: DateTime,
    /// Each index as surveyed: everything [`IndexPlan::decide`] needs but
    /// the counts, nothing decided yet.
    pub(crate) indexes: Vec<IndexPlan>,
}

/// Reads everything the plan needs but MongoDB's counts; writes nothing.
pub(crate) async fn survey(
    mongo_db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
) -> Result<Survey, ReconcileError> {
    let meili_health = meili.health().await?;
    let now = mongo::server_time(mongo_db).await?;
    let desired = settings::desired(&opts.filterable_attributes);
    let pending = marker::pending(mongo_db, opts).await?;
    let mut indexes = Vec::new();
    for collection in Collection::ALL {
        let index_uid = collection.index_uid(&opts.index_prefix);
        let info = meili.index(&index_uid).await?;
        let leftover_build_index = meili.index(&build_uid(&index_uid)).await?.is_some();
        let pending_cleanup =
            mongo::count_pending_cleanup(mongo_db, &opts.rules, collection).await?;
        let (meili_documents, actual_settings) = match &info {
            Some(_) => (
                meili.document_count(&index_uid).await?,
                meili.settings(&index_uid).await?,
            ),
            None => (0, Value::Object(Map::new())),
        };
        indexes.push(IndexPlan {
            collection,
            exact_comparison_pending: pending.contains(&index_uid),
            index_uid,
            exists: info.is_some(),
            primary_key: info.and_then(|i| i.primary_key),
            expected_primary_key: collection.primary_key().to_string(),
            meili_documents,
            mongo: Counts::default(),
            settings_to_apply: settings::diff(&actual_settings, &desired),
            pending_cleanup,
            rebuild: None,
            drift_suspected: false,
            leftover_build_index,
            documents_to_index: 0,
            skipped_by_threshold: false,
            librechat: None,
        });
    }
    Ok(Survey {
        meili_health,
        now,
        indexes,
    })
}

/// MongoDB's counts of `collection`'s searchable documents at `now`: one
/// aggregation over every one of them, timed (at millions of documents a
/// fixed cost of every run).
pub(crate) async fn count(
    mongo_db: &Database,
    opts: &SyncOptions,
    collection: Collection,
    now: DateTime,
) -> Result<Counts, ReconcileError> {
    let counting = std::time::Instant::now();
    let counts = mongo::counts(mongo_db, &opts.rules, collection, now).await?;
    let ms = counting.elapsed().as_millis() as u64;
    tracing::debug!(collection = collection.name(), ms, "plan counted");
    Ok(counts)
}

impl Survey {
    /// The plan: each surveyed index counted ([`count`]) and decided
    /// ([`IndexPlan::decide`]).
    pub(crate) async fn counted(
        self,
        mongo_db: &Database,
        opts: &SyncOptions,
    ) -> Result<Plan, ReconcileError> {
        let mut indexes = Vec::new();
        for surveyed in &self.indexes {
            let counts = count(mongo_db, opts, surveyed.collection, self.now).await?;
            indexes.push(surveyed.decide(counts, opts));
        }
        let nothing_to_do = indexes.iter().all(|i| {
            i.settings_to_apply.is_empty()
                && i.pending_cleanup + i.documents_to_index == 0
                && i.rebuild.is_none()
                && !(i.drift_suspected || i.exact_comparison_pending || i.leftover_build_index)
        });
        let now = self.now;
        let millis = || now.timestamp_millis().to_string();
        Ok(Plan {
            meili_health: self.meili_health,
            server_time: now.try_to_rfc3339_string().unwrap_or_else(|_| millis()),
            indexes,
            nothing_to_do,
        })
    }
}

impl IndexPlan {
    /// Whether documents may be sent to this index before the counts are
    /// known: it exists with the right primary key and settings (nothing to
    /// create or wait for before a document write), and nothing but
    /// indexing and the drift check can follow — no cleanup of excluded
    /// documents, no exact comparison pending, no leftover build index to
    /// drop. Only the counts can then still decide a rebuild (the index
    /// lost), which the run sees before any flag is written.
    pub(crate) fn may_send_before_counts(&self) -> bool {
        self.primary_key.as_ref() == Some(&self.expected_primary_key)
            && self.settings_to_apply.is_empty()
            && self.pending_cleanup == 0
            && !self.exact_comparison_pending
            && !self.leftover_build_index
    }

    /// The decisions for this index as surveyed, given MongoDB's counts.
    pub(crate) fn decide(&self, mongo: Counts, opts: &SyncOptions) -> IndexPlan {
        let meili_documents = self.meili_documents;
        let pk = &self.primary_key;
        let rebuild = match self.exists.then_some(pk) {
            None => Some(RebuildReason::IndexMissing),
            Some(pk) if pk.as_ref() != Some(&self.expected_primary_key) => {
                Some(RebuildReason::WrongPrimaryKey { actual: pk.clone() })
            }
            // "Much smaller": less than half of what MongoDB says is in it
            // (flagged, whatever the schema version).
            Some(_) if mongo.flagged > 0 && meili_documents.saturating_mul(2) < mongo.flagged => {
                Some(RebuildReason::IndexLost {
                    meili_documents,
                    mongo_indexed: mongo.flagged,
                })
            }
            Some(_) => None,
        };
        let drift_suspected = rebuild.is_none() && meili_documents != mongo.flagged;
        let exempt = opts.force || rebuild.is_some() || mongo.indexed == 0;
        let skipped_by_threshold =
            mongo.unindexed > 0 && mongo.unindexed < opts.threshold && !exempt && !drift_suspected;
        let documents_to_index = if rebuild.is_some() {
            mongo.indexable
        } else if skipped_by_threshold {
            0
        } else {
            mongo.unindexed
        };
        IndexPlan {
            mongo,
            rebuild,
            drift_suspected,
            documents_to_index,
            skipped_by_threshold,
            ..self.clone()
        }
    }
}

/// Adds LibreChat's own view to `plan`: its `getSyncProgress()` of each
/// collection (four counts each, over the whole collection), so an operator
/// sees whether LibreChat agrees with us.
pub async fn librechat_view(
    mongo_db: &Database,
    opts: &SyncOptions,
    plan: &mut Plan,
) -> Result<(), ReconcileError> {
    let now = mongo::server_time(mongo_db).await?;
    for index in &mut plan.indexes {
        index.librechat =
            Some(mongo::librechat_progress(mongo_db, &opts.rules, index.collection, now).await?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(indexable: u64, indexed: u64) -> Counts {
        Counts {
            indexable,
            indexed,
            unindexed: indexable - indexed,
            flagged: indexed,
        }
    }

    fn decide_for(pk: Option<Option<&str>>, docs: u64, c: Counts, opts: &SyncOptions) -> IndexPlan {
        let surveyed = IndexPlan {
            collection: Collection::Messages,
            index_uid: "messages".into(),
            exists: pk.is_some(),
            primary_key: pk.flatten().map(str::to_string),
            expected_primary_key: "messageId".into(),
            meili_documents: docs,
            mongo: Counts::default(),
            pending_cleanup: 0,
            settings_to_apply: Map::new(),
            rebuild: None,
            drift_suspected: false,
            exact_comparison_pending: false,
            leftover_build_index: false,
            documents_to_index: 0,
            skipped_by_threshold: false,
            librechat: None,
        };
        surveyed.decide(c, opts)
    }

    #[test]
    fn missing_index_and_wrong_primary_key_rebuild() {
        let opts = SyncOptions::default();
        let p = decide_for(None, 0, counts(10, 5), &opts);
        assert_eq!(p.rebuild, Some(RebuildReason::IndexMissing));
        assert_eq!(p.documents_to_index, 10);
        let p = decide_for(Some(Some("id")), 5, counts(10, 5), &opts);
        assert_eq!(
            p.rebuild,
            Some(RebuildReason::WrongPrimaryKey {
                actual: Some("id".into())
            })
        );
        let p = decide_for(Some(None), 0, counts(10, 0), &opts);
        assert!(matches!(
            p.rebuild,
            Some(RebuildReason::WrongPrimaryKey { actual: None })
        ));
    }

    #[test]
    fn an_emptied_index_is_rebuilt_in_place() {
        let opts = SyncOptions::default();
        let p = decide_for(Some(Some("messageId")), 0, counts(5000, 4000), &opts);
        assert!(matches!(p.rebuild, Some(RebuildReason::IndexLost { .. })));
        assert!(!p.rebuild.unwrap().recreates_index());
    }

    #[test]
    fn threshold_skips_only_small_backlogs_of_an_indexed_collection() {
        let opts = SyncOptions::default();
        let p = decide_for(Some(Some("messageId")), 4000, counts(4010, 4000), &opts);
        assert!(p.skipped_by_threshold);
        assert_eq!(p.documents_to_index, 0);
        assert!(!p.drift_suspected);
        // Nothing indexed yet: never skipped.
        let p = decide_for(Some(Some("messageId")), 0, counts(10, 0), &opts);
        assert!(!p.skipped_by_threshold);
        assert_eq!(p.documents_to_index, 10);
        // Forced: never skipped.
        let forced = SyncOptions {
            force: true,
            ..SyncOptions::default()
        };
        let p = decide_for(Some(Some("messageId")), 4000, counts(4010, 4000), &forced);
        assert!(!p.skipped_by_threshold);
    }

    #[test]
    fn count_mismatch_is_drift() {
        let opts = SyncOptions::default();
        let p = decide_for(Some(Some("messageId")), 4003, counts(4000, 4000), &opts);
        assert!(p.drift_suspected);
        assert!(p.rebuild.is_none());
    }
}
