//! What a reconciliation may do and how hard it pushes ([`SyncOptions`],
//! from the `[sync]` settings), and the uids of the indexes it works on: a
//! live index's ([`SyncOptions::index_uid`]) and the index a zero-downtime
//! reindex builds beside it ([`build_uid`]). Below every step of the engine,
//! which all read them.

use std::time::Duration;

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

/// Default of `sync.in_flight`.
pub const DEFAULT_IN_FLIGHT: usize = 64;
/// Default of `sync.max_bytes_in_flight`.
pub const DEFAULT_MAX_BYTES_IN_FLIGHT: usize = 64 * 1024 * 1024;
/// Default of `sync.compare_memory`.
pub const DEFAULT_COMPARE_MEMORY: usize = 64 * 1024 * 1024;
/// Default of `sync.ack_writers`.
pub const DEFAULT_ACK_WRITERS: usize = 2;

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            index_prefix: String::new(),
            batch_docs: 10_000,
            batch_bytes: 8 * 1024 * 1024,
            in_flight: DEFAULT_IN_FLIGHT,
            max_bytes_in_flight: DEFAULT_MAX_BYTES_IN_FLIGHT,
            compare_memory: DEFAULT_COMPARE_MEMORY,
            ack_writers: DEFAULT_ACK_WRITERS,
            threshold: 1000,
            delay: Duration::ZERO,
            filterable_attributes: vec!["user".into()],
            force: false,
            deep: false,
            state_collection: "distributedJobs".into(),
            state_job: "meili-index-sync".into(),
            rules: Rules::default(),
        }
    }
}

impl SyncOptions {
    /// The Meilisearch index uid that `collection` feeds.
    pub fn index_uid(&self, collection: Collection) -> String {
        format!("{}{}", self.index_prefix, collection.index_name())
    }
}

/// Suffix of the index a zero-downtime reindex builds.
pub const BUILD_SUFFIX: &str = "_reindex";

/// The index a zero-downtime reindex of `live_uid` builds (and, after the
/// swap, the old index until it is dropped).
pub fn build_uid(live_uid: &str) -> String {
    format!("{live_uid}{BUILD_SUFFIX}")
}
