//! The stand-in's shared state: configuration, the in-memory store (indexes
//! and the task queue, behind one mutex so each task applies atomically), the
//! worker's wake-up signal, the test knobs and the request log.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};

use time::OffsetDateTime;
use tokio::sync::Notify;

use crate::index::Index;
use crate::knobs::Knobs;
use crate::request_log::RequestLog;
use crate::tasks::Task;

/// Settings fixed at start-up.
#[derive(Debug)]
pub struct Config {
    pub master_key: String,
    pub payload_limit_bytes: usize,
}

/// Indexes and tasks. Task uids are dense, so a task's uid is its position.
#[derive(Default)]
pub struct Store {
    pub indexes: BTreeMap<String, Index>,
    pub tasks: Vec<Task>,
    /// Uid of the oldest task not finished; all before it are. Tasks are
    /// processed in uid order, except that the benchmark model's batches
    /// (like Meilisearch's) take later tasks of their index past tasks of
    /// other indexes, which then finish after them.
    pub next_to_process: usize,
    /// Uid of the next batch (every processing step is one batch).
    pub next_batch_uid: u32,
    /// Bumped by `/_standin/reset` so a task in flight does not write into a wiped store.
    pub epoch: u64,
    /// When a task last finished successfully (`lastUpdate` of `GET /stats`).
    pub last_update: Option<OffsetDateTime>,
}

impl Store {
    /// Whether a task touching `uid` is enqueued or processing (`isIndexing`).
    pub fn is_indexing(&self, uid: &str) -> bool {
        self.tasks[self.next_to_process..]
            .iter()
            .any(|task| !task.status.is_finished() && task.index_uid.as_deref() == Some(uid))
    }
}

/// Everything the handlers and the worker share.
pub struct Shared {
    pub config: Config,
    store: Mutex<Store>,
    /// Signalled whenever a task is enqueued.
    pub worker_wakeup: Notify,
    pub knobs: Knobs,
    pub request_log: RequestLog,
}

impl Shared {
    /// Locks the store. A panic while holding it leaves data that is still
    /// usable for a test server, so poisoning is ignored.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Cheap handle on [`Shared`], the axum state.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(config: Config) -> Self {
        Self(Arc::new(Shared {
            config,
            store: Mutex::new(Store::default()),
            worker_wakeup: Notify::new(),
            knobs: Knobs::default(),
            request_log: RequestLog::default(),
        }))
    }
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}
