//! The Prometheus metrics of the `run` mode: their names, their help texts,
//! and the one place that records them.
//!
//! The `metrics` facade records; `metrics-exporter-prometheus` renders the
//! text format for `/metrics`. Keeping every name here means the exported
//! series are documented in one place (and in docs/operations.md's table). Every
//! family is described and registered at zero when the recorder is installed,
//! so the first scrape of a replica that has not run yet already shows each
//! family with `# HELP` and `# TYPE` (and each known label value at 0), and
//! dashboards and alerts need not special-case a fresh replica.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

const RUNS: &str = "reconciler_runs_total";
const DOCUMENTS_INDEXED: &str = "reconciler_documents_indexed_total";
const DOCUMENTS_DELETED: &str = "reconciler_documents_deleted_total";
const DOCUMENTS_REJECTED: &str = "reconciler_documents_rejected_total";
const BATCH_SECONDS: &str = "reconciler_batch_seconds";
const LEASE_CLAIMS: &str = "reconciler_lease_claims_total";
const LEASE_TAKEOVERS: &str = "reconciler_lease_takeovers_total";
const LEASE_LOSSES: &str = "reconciler_lease_losses_total";
const SECONDS_SINCE_SUCCESS: &str = "reconciler_seconds_since_last_success";
const UNINDEXED: &str = "reconciler_unindexed_documents";
const FLAG_WRITE_RETRIES: &str = "reconciler_flag_write_retries_total";
/// Milliseconds, not seconds: the `metrics` facade's counters are integers.
const SYNC_PHASE_MILLISECONDS: &str = "reconciler_sync_phase_milliseconds_total";
const FOLLOW_EVENTS: &str = "reconciler_follow_events_total";
const FOLLOW_LAG: &str = "reconciler_follow_lag_seconds";

/// Every value of the `op` label of [`FOLLOW_EVENTS`]: the kind of a
/// document's last change in its micro-batch, or `skipped` (already indexed).
pub(crate) const FOLLOW_OPS: &[&str] = &[
    "insert", "update", "replace", "delete", "skipped", "expired",
];

/// Every value of the `phase` label of [`SYNC_PHASE_MILLISECONDS`]
/// (`reconcile::phases::Phase::label`, in `Phase::ALL`'s order).
pub(crate) const SYNC_PHASES: &[&str] = &[
    "read",
    "build",
    "send",
    "meili_wait",
    "ack",
    "ack_waited",
    "reader_waited",
    "pipeline_waited",
];

/// Every value of the `outcome` label of [`RUNS`] (`RunOutcome::metric_label`).
pub(crate) const RUN_OUTCOMES: &[&str] = &[
    "completed",
    "completed_with_rejects",
    "done_by_other",
    "failed",
    "unreachable",
    "lease_lost",
    "handed_over",
];

/// Batch latencies span milliseconds (stand-in) to minutes (a busy server).
const BATCH_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
/// When the recorder was installed, and when a run last succeeded.
static CLOCK: OnceLock<Mutex<SuccessClock>> = OnceLock::new();

struct SuccessClock {
    started: Instant,
    last_success: Option<Instant>,
}

fn clock() -> &'static Mutex<SuccessClock> {
    CLOCK.get_or_init(|| {
        Mutex::new(SuccessClock {
            started: Instant::now(),
            last_success: None,
        })
    })
}

/// The label values known before the first run: the index uids (label
/// `index`) and the collection names (label `collection`).
#[derive(Clone, Debug, Default)]
pub(crate) struct KnownLabels {
    pub(crate) indexes: Vec<String>,
    pub(crate) collections: Vec<String>,
}

/// Installs the process-wide recorder (once), describes every family and
/// registers its series at zero for `known`; returns the handle.
pub(crate) fn install(known: &KnownLabels) -> PrometheusHandle {
    let handle = HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(BATCH_SECONDS.into()), BATCH_BUCKETS)
                .expect("static buckets are valid")
                .install_recorder()
                .expect("install the Prometheus recorder");
            clock();
            describe();
            handle
        })
        .clone();
    register_at_zero(known);
    handle
}

fn describe() {
    describe_counter!(RUNS, "Runs of this replica, by outcome.");
    describe_counter!(
        DOCUMENTS_INDEXED,
        "Documents this replica indexed into Meilisearch (acknowledged in MongoDB), by index."
    );
    describe_counter!(
        DOCUMENTS_DELETED,
        "Documents this replica deleted from Meilisearch (gone or no longer indexable in MongoDB), by index."
    );
    describe_counter!(
        DOCUMENTS_REJECTED,
        "Documents Meilisearch refused in this replica's runs (left unindexed), by index."
    );
    describe_histogram!(
        BATCH_SECONDS,
        Unit::Seconds,
        "Time from sending a batch to Meilisearch to its task's success."
    );
    describe_counter!(LEASE_CLAIMS, "Leases this replica claimed.");
    describe_counter!(
        LEASE_TAKEOVERS,
        "Claims that took over from another owner (its lease expired, was released or failed)."
    );
    describe_counter!(
        LEASE_LOSSES,
        "Leases this replica lost while running (its work was stopped)."
    );
    describe_gauge!(
        SECONDS_SINCE_SUCCESS,
        Unit::Seconds,
        "Seconds since this replica last saw a run succeed (by it or another replica); before the first, seconds since it started."
    );
    describe_counter!(
        FLAG_WRITE_RETRIES,
        "Flag writes sent again after a transient MongoDB error (failover, write-concern error, lost connection)."
    );
    describe_counter!(
        SYNC_PHASE_MILLISECONDS,
        Unit::Milliseconds,
        "Milliseconds this replica's completed runs spent in each phase of indexing (read, build, send, meili_wait, ack, ack_waited, reader_waited, pipeline_waited; phases of concurrent stages overlap)."
    );
    describe_gauge!(
        UNINDEXED,
        "Indexable documents not yet in Meilisearch, by collection, as counted after this replica's last run (0 before the first count)."
    );
    describe_counter!(
        FOLLOW_EVENTS,
        "Documents this replica applied from the change stream (follow mode), by the kind of their last change; skipped: already indexed (LibreChat's save hook)."
    );
    describe_gauge!(
        FOLLOW_LAG,
        Unit::Seconds,
        "How far (MongoDB's clock) this replica's change stream is behind; 0 when caught up or not following."
    );
}

/// Creates every series whose labels are known, without changing a value
/// already recorded (so calling it again is harmless).
fn register_at_zero(known: &KnownLabels) {
    for outcome in RUN_OUTCOMES {
        counter!(RUNS, "outcome" => *outcome).increment(0);
    }
    for index in &known.indexes {
        for name in [DOCUMENTS_INDEXED, DOCUMENTS_DELETED, DOCUMENTS_REJECTED] {
            counter!(name, "index" => index.clone()).increment(0);
        }
    }
    for collection in &known.collections {
        gauge!(UNINDEXED, "collection" => collection.clone()).increment(0.0);
    }
    // A histogram appears (empty: count 0) once registered.
    let _ = histogram!(BATCH_SECONDS);
    counter!(LEASE_CLAIMS).increment(0);
    counter!(LEASE_TAKEOVERS).increment(0);
    counter!(LEASE_LOSSES).increment(0);
    counter!(FLAG_WRITE_RETRIES).increment(0);
    for phase in SYNC_PHASES {
        counter!(SYNC_PHASE_MILLISECONDS, "phase" => *phase).increment(0);
    }
    gauge!(SECONDS_SINCE_SUCCESS).increment(0.0);
    for op in FOLLOW_OPS {
        counter!(FOLLOW_EVENTS, "op" => *op).increment(0);
    }
    gauge!(FOLLOW_LAG).increment(0.0);
}

/// The text for `/metrics`, with the time-since-success gauge brought up to date.
pub(crate) fn render(handle: &PrometheusHandle) -> String {
    let since = {
        let clock = clock().lock().expect("poisoned");
        clock.last_success.unwrap_or(clock.started).elapsed()
    };
    gauge!(SECONDS_SINCE_SUCCESS).set(since.as_secs_f64());
    handle.render()
}

/// A run ended; `outcome` is one of [`RUN_OUTCOMES`].
pub(crate) fn run_finished(outcome: &'static str, successful: bool) {
    debug_assert!(
        RUN_OUTCOMES.contains(&outcome),
        "unlisted outcome {outcome}"
    );
    counter!(RUNS, "outcome" => outcome).increment(1);
    if successful {
        clock().lock().expect("poisoned").last_success = Some(Instant::now());
        gauge!(SECONDS_SINCE_SUCCESS).set(0.0);
    }
}

pub(crate) fn documents(index: &str, indexed: u64, deleted: u64, rejected: u64) {
    let index = index.to_string();
    counter!(DOCUMENTS_INDEXED, "index" => index.clone()).increment(indexed);
    counter!(DOCUMENTS_DELETED, "index" => index.clone()).increment(deleted);
    counter!(DOCUMENTS_REJECTED, "index" => index).increment(rejected);
}

/// Adds a completed run's phase breakdown, as (phase, seconds) with each
/// phase one of [`SYNC_PHASES`], to the phase counters.
pub(crate) fn sync_phases(phases: impl IntoIterator<Item = (&'static str, f64)>) {
    for (phase, secs) in phases {
        debug_assert!(SYNC_PHASES.contains(&phase), "unlisted phase {phase}");
        let ms = (secs * 1000.0).round() as u64;
        counter!(SYNC_PHASE_MILLISECONDS, "phase" => phase).increment(ms);
    }
}

pub(crate) fn batch_latency(elapsed: Duration) {
    histogram!(BATCH_SECONDS).record(elapsed.as_secs_f64());
}

pub(crate) fn lease_claimed(takeover: bool) {
    counter!(LEASE_CLAIMS).increment(1);
    if takeover {
        counter!(LEASE_TAKEOVERS).increment(1);
    }
}

pub(crate) fn lease_lost() {
    counter!(LEASE_LOSSES).increment(1);
}

pub(crate) fn flag_write_retried() {
    counter!(FLAG_WRITE_RETRIES).increment(1);
}

/// `n` documents applied from the change stream; `op` is one of [`FOLLOW_OPS`].
pub(crate) fn follow_events(op: &'static str, n: u64) {
    debug_assert!(FOLLOW_OPS.contains(&op), "unlisted op {op}");
    counter!(FOLLOW_EVENTS, "op" => op).increment(n);
}

pub(crate) fn follow_lag(secs: f64) {
    gauge!(FOLLOW_LAG).set(secs);
}

pub(crate) fn unindexed_backlog(collection: &str, count: u64) {
    gauge!(UNINDEXED, "collection" => collection.to_string()).set(count as f64);
}
