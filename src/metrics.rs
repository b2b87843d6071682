//! The Prometheus metrics of the `run` mode: their names, and the one place
//! that records them.
//!
//! The `metrics` facade records; `metrics-exporter-prometheus` renders the
//! text format for `/metrics`. Keeping every name here means the exported
//! series are documented in one place (and in the README's table).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const RUNS: &str = "reconciler_runs_total";
pub const DOCUMENTS_INDEXED: &str = "reconciler_documents_indexed_total";
pub const DOCUMENTS_DELETED: &str = "reconciler_documents_deleted_total";
pub const DOCUMENTS_REJECTED: &str = "reconciler_documents_rejected_total";
pub const BATCH_SECONDS: &str = "reconciler_batch_seconds";
pub const LEASE_CLAIMS: &str = "reconciler_lease_claims_total";
pub const LEASE_TAKEOVERS: &str = "reconciler_lease_takeovers_total";
pub const LEASE_LOSSES: &str = "reconciler_lease_losses_total";
pub const SECONDS_SINCE_SUCCESS: &str = "reconciler_seconds_since_last_success";
pub const UNINDEXED: &str = "reconciler_unindexed_documents";

/// Batch latencies span milliseconds (stand-in) to minutes (a busy server).
const BATCH_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static LAST_SUCCESS: OnceLock<std::sync::Mutex<Option<Instant>>> = OnceLock::new();

/// Installs the process-wide recorder (once) and returns its handle.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(BATCH_SECONDS.into()), BATCH_BUCKETS)
                .expect("static buckets are valid")
                .install_recorder()
                .expect("install the Prometheus recorder")
        })
        .clone()
}

/// The text for `/metrics`, with the time-since-success gauge brought up to date.
pub fn render(handle: &PrometheusHandle) -> String {
    if let Some(at) = *last_success().lock().expect("poisoned") {
        gauge!(SECONDS_SINCE_SUCCESS).set(at.elapsed().as_secs_f64());
    }
    handle.render()
}

fn last_success() -> &'static std::sync::Mutex<Option<Instant>> {
    LAST_SUCCESS.get_or_init(|| std::sync::Mutex::new(None))
}

/// A run ended; `outcome` is one of `completed`, `completed_with_rejects`,
/// `waited`, `reused`, `skipped`, `failed`, `lease_lost`, `unreachable`.
pub fn run_finished(outcome: &'static str, successful: bool) {
    counter!(RUNS, "outcome" => outcome).increment(1);
    if successful {
        *last_success().lock().expect("poisoned") = Some(Instant::now());
        gauge!(SECONDS_SINCE_SUCCESS).set(0.0);
    }
}

pub fn documents(index: &str, indexed: u64, deleted: u64, rejected: u64) {
    let index = index.to_string();
    counter!(DOCUMENTS_INDEXED, "index" => index.clone()).increment(indexed);
    counter!(DOCUMENTS_DELETED, "index" => index.clone()).increment(deleted);
    counter!(DOCUMENTS_REJECTED, "index" => index).increment(rejected);
}

pub fn batch_latency(elapsed: Duration) {
    histogram!(BATCH_SECONDS).record(elapsed.as_secs_f64());
}

pub fn lease_claimed(takeover: bool) {
    counter!(LEASE_CLAIMS).increment(1);
    if takeover {
        counter!(LEASE_TAKEOVERS).increment(1);
    }
}

pub fn lease_lost() {
    counter!(LEASE_LOSSES).increment(1);
}

pub fn unindexed_backlog(collection: &str, count: u64) {
    gauge!(UNINDEXED, "collection" => collection.to_string()).set(count as f64);
}
