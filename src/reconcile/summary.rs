//! What a run did: a [`RunSummary`] with one [`CollectionSummary`] per
//! collection. Filled by the engine (`run`), a reindex and `verify
//! --repair`; read by the job, the lease document and the CLI. Plain data:
//! its text (also the log line of a run) is `report::summary`'s.

use serde::Serialize;

use super::ack::Tally;
use super::exact;
use super::phases;
use super::plan::RebuildReason;
use super::rejects::Rejected;
use crate::mongo::Collection;

/// What a run did to one collection and its index.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CollectionSummary {
    pub collection: String,
    pub(crate) index_uid: String,
    /// Documents Meilisearch confirmed in this run.
    pub indexed: u64,
    /// Documents deleted from Meilisearch (gone or no longer indexable in Mongo).
    pub deleted: u64,
    /// Flags cleared (index rebuilt, drift, documents no longer indexable,
    /// documents changed while in flight).
    pub flags_cleared: u64,
    /// Flags set by an exact comparison on documents the index already held.
    pub(crate) flags_set: u64,
    /// Documents Meilisearch refused, left unacknowledged.
    pub rejected: Vec<Rejected>,
    /// Settings keys that were changed.
    pub settings_changed: Vec<String>,
    /// Why the index was rebuilt, if it was.
    pub rebuilt: Option<RebuildReason>,
    /// Unindexed documents left alone because they were below the threshold.
    pub(crate) skipped_by_threshold: Option<u64>,
    /// Whether the id sets were compared.
    pub compared_ids: bool,
    /// Hash partitions the id or document comparison ran in: 0 when none
    /// ran; above 1 when `sync.compare_memory` could not hold every id (or
    /// digest) at once, and each side was read once per partition.
    pub comparison_partitions: u64,
    /// What an exact comparison of every document found (before repairing),
    /// when one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) verified: Option<exact::Comparison>,
}

impl CollectionSummary {
    /// Nothing done yet to `collection` and its index `index_uid`.
    pub(crate) fn new(collection: Collection, index_uid: &str) -> Self {
        CollectionSummary {
            collection: collection.name().to_string(),
            index_uid: index_uid.to_string(),
            ..Default::default()
        }
    }

    /// Adds what indexing or a repairing comparison did.
    pub(crate) fn add(&mut self, done: Tally) {
        self.indexed += done.indexed;
        self.deleted += done.deleted;
        self.flags_set += done.flags_set;
        self.flags_cleared += done.flags_cleared;
        self.rejected.extend(done.rejected);
    }

    pub(crate) fn changed_anything(&self) -> bool {
        self.indexed + self.deleted + self.flags_cleared + self.flags_set > 0
            || !self.rejected.is_empty()
            || !self.settings_changed.is_empty()
            || self.rebuilt.is_some()
    }
}

/// The outcome of one reconciliation.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub collections: Vec<CollectionSummary>,
    pub(crate) duration_ms: u64,
    /// Documents indexed per second of the whole run.
    pub(crate) docs_per_sec: f64,
    /// Nothing was changed (documents skipped by the threshold stay as they were).
    pub nothing_to_do: bool,
    /// Where the indexing time went ([`phases`]).
    pub(crate) phases: phases::Phases,
}

impl RunSummary {
    pub(crate) fn rejected_count(&self) -> usize {
        self.collections.iter().map(|c| c.rejected.len()).sum()
    }
}
