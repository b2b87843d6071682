//! What a reconciliation may do and how hard it pushes ([`SyncOptions`],
//! from the settings), and the uids of the indexes it works on: a live
//! index's ([`Collection::index_uid`] under `index_prefix`) and the index a
//! zero-downtime reindex builds beside it ([`build_uid`]). Below every step of the engine,
//! which all read them.

use std::time::Duration;

use crate::config::{self, Settings};
use crate::librechat::Rules;
use crate::mongo::Collection;

/// What a reconciliation may do and how hard it pushes.
#[derive(Clone, Debug)]
pub struct SyncOptions {
    /// Prefix of both index uids (`""`: LibreChat's `messages` and `convos`).
    pub index_prefix: String,
    /// Most documents per Meilisearch task.
    pub batch_docs: usize,
    /// Most bytes of NDJSON per Meilisearch task.
    pub batch_bytes: usize,
    /// Most Meilisearch tasks outstanding at once (an upper bound beside
    /// `max_bytes_in_flight`).
    pub in_flight: usize,
    /// Most bytes of NDJSON enqueued in Meilisearch and not yet indexed and
    /// acknowledged: enough that Meilisearch finds several tasks waiting and
    /// merges them into one indexing batch.
    pub max_bytes_in_flight: usize,
    /// Memory the drift check and the exact comparison may hold their
    /// per-document state in; beyond it they compare in hash partitions.
    pub compare_memory: usize,
    /// Acknowledgement commands sent side by side per collection: a
    /// server that works in parallel (one PostgreSQL backend per
    /// connection under DocumentDB) writes flags that much faster.
    pub ack_writers: usize,
    /// Below this many unindexed documents a collection is skipped (§3.8).
    pub threshold: u64,
    /// Pause between pages read from MongoDB.
    pub delay: Duration,
    /// `filterableAttributes` of both indexes.
    pub filterable_attributes: Vec<String>,
    /// Ignore the threshold and compare id sets.
    pub force: bool,
    /// Compare every document's contents (the exact comparison) instead of
    /// only the id sets when the counts disagree.
    pub deep: bool,
    /// Collection of the reconciler's state document (the lease's collection).
    pub state_collection: String,
    /// The lease's job id: the state document is `<state_job>:indexes`.
    pub state_job: String,
    /// LibreChat's rules that are configurable: exclusion paths, schema version.
    pub rules: Rules,
}

impl Default for SyncOptions {
    /// The compiled-in defaults (config/default.toml).
    fn default() -> Self {
        SyncOptions::new(&config::built_in())
    }
}

impl SyncOptions {
    /// The engine's options from the settings: `[sync]`, the index prefix
    /// and filterable attributes of `[meili]`, the lease's collection and
    /// job (where the state document lives).
    pub(crate) fn new(settings: &Settings) -> Self {
        let sync = &settings.sync;
        SyncOptions {
            index_prefix: settings.meili.index_prefix.clone(),
            batch_docs: sync.batch_docs,
            batch_bytes: sync.batch_bytes,
            in_flight: sync.in_flight,
            max_bytes_in_flight: sync.max_bytes_in_flight,
            compare_memory: sync.compare_memory,
            ack_writers: sync.ack_writers,
            threshold: sync.threshold,
            delay: sync.delay,
            filterable_attributes: settings.meili.filterable_attributes.clone(),
            force: false,
            deep: false,
            state_collection: settings.lease.collection.clone(),
            state_job: settings.lease.job.clone(),
            rules: sync.rules(),
        }
    }
}

/// Suffix of the index a zero-downtime reindex builds.
const BUILD_SUFFIX: &str = "_reindex";

/// The index a zero-downtime reindex of `live_uid` builds (and, after the
/// swap, the old index until it is dropped).
pub fn build_uid(live_uid: &str) -> String {
    format!("{live_uid}{BUILD_SUFFIX}")
}

/// The collections a command works on: `only` one, or all.
pub(crate) fn collections(only: Option<Collection>) -> Vec<Collection> {
    only.map_or_else(|| Collection::ALL.to_vec(), |collection| vec![collection])
}
