//! Progress of a reconciliation, shared between the job that advances it and
//! everyone who reports it: the log, the lease document (written with each
//! renewal), `/status` and the terminal progress bar.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One snapshot, as stored in the lease document's `progress` field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressSnapshot {
    /// What the job is doing: `plan`, `settings`, `rebuild`, `index`, `orphans`, `swap`…
    pub phase: String,
    /// Documents done in this phase.
    pub done: u64,
    /// Documents this phase expects to handle (0 when unknown).
    pub total: u64,
    /// Throughput since the phase began.
    pub docs_per_sec: f64,
    /// Estimated seconds left in this phase, when it can be estimated.
    pub eta_secs: Option<u64>,
}

#[derive(Debug)]
struct Inner {
    phase: String,
    done: u64,
    total: u64,
    phase_started: Instant,
}

/// Cheap to clone; all clones share one state.
#[derive(Clone, Debug)]
pub struct Progress {
    inner: Arc<Mutex<Inner>>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            inner: Arc::new(Mutex::new(Inner {
                phase: "starting".into(),
                done: 0,
                total: 0,
                phase_started: Instant::now(),
            })),
        }
    }
}

impl Progress {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a new phase with an expected total (0 if unknown).
    pub fn phase(&self, phase: &str, total: u64) {
        let mut inner = self.inner.lock().expect("progress poisoned");
        inner.phase = phase.to_string();
        inner.done = 0;
        inner.total = total;
        inner.phase_started = Instant::now();
    }

    /// Adds `n` to the documents done in the current phase.
    pub fn advance(&self, n: u64) {
        self.inner.lock().expect("progress poisoned").done += n;
    }

    /// Raises the expected total (more work found during the phase).
    pub fn set_total(&self, total: u64) {
        self.inner.lock().expect("progress poisoned").total = total;
    }

    pub fn snapshot(&self) -> ProgressSnapshot {
        let inner = self.inner.lock().expect("progress poisoned");
        let secs = inner.phase_started.elapsed().as_secs_f64();
        let docs_per_sec = if secs > 0.0 {
            inner.done as f64 / secs
        } else {
            0.0
        };
        let eta_secs = (docs_per_sec > 0.0 && inner.total >= inner.done)
            .then(|| ((inner.total - inner.done) as f64 / docs_per_sec).ceil() as u64);
        ProgressSnapshot {
            phase: inner.phase.clone(),
            done: inner.done,
            total: inner.total,
            docs_per_sec,
            eta_secs,
        }
    }
}
