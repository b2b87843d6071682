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

use crate::librechat::Collection;

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
const FOLLOW_STAGE_SECONDS: &str = "reconciler_follow_stage_seconds";
const FOLLOW_BATCH_STAGE_SECONDS: &str = "reconciler_follow_batch_stage_seconds";
const FOLLOW_IN_FLIGHT: &str = "reconciler_follow_micro_batches_in_flight";

/// Every value of the `op` label of [`FOLLOW_EVENTS`]: the kind of a
/// document's last change in its micro-batch, or `skipped` (already indexed).
pub(crate) const FOLLOW_OPS: &[&str] = &[
    "insert", "update", "replace", "delete", "skipped", "expired",
];

/// Every value of the `phase` label of [`SYNC_PHASE_MILLISECONDS`], in the
/// order `reconcile::phases::Phases` holds them.
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

/// Every value of the `stage` label of [`FOLLOW_STAGE_SECONDS`]: where a
/// document's delay from MongoDB to Meilisearch goes, in the order it
/// happens (`follow::latency` says what each one is).
pub(crate) const FOLLOW_STAGES: &[&str] = &[
    "delivery",
    "gathering",
    "behind_settle",
    "room_wait",
    "prepare",
    "enqueue",
    "meili_queued",
    "meili_processing",
    "detection",
    "total",
];

/// Every value of the `stage` label of [`FOLLOW_BATCH_STAGE_SECONDS`]: what
/// each micro-batch took after its tasks ended.
pub(crate) const FOLLOW_BATCH_STAGES: &[&str] = &["settle", "token_save"];

/// Batch latencies span milliseconds (stand-in) to minutes (a busy server).
const BATCH_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Follow mode's stages span under 10 ms to tens of seconds (a backlog);
/// finer around its target (p99 ≤ 2 s, docs/design.md §7).
const FOLLOW_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
];

/// Micro-batches in flight: 1 to `follow::pipeline::DEPTH` (32).
const IN_FLIGHT_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
/// When the recorder was installed.
static STARTED: OnceLock<Instant> = OnceLock::new();
/// When a run last succeeded.
static LAST_SUCCESS: Mutex<Option<Instant>> = Mutex::new(None);

/// Installs the process-wide recorder (once), describes every family and
/// registers its series at zero for the index uids `indexes` (label
/// `index`) and every chat collection (label `collection`); returns the
/// handle.
pub(crate) fn install(indexes: &[String]) -> PrometheusHandle {
    let handle = HANDLE.get_or_init(|| {
        let handle = builder().install_recorder();
        let handle = handle.expect("install the Prometheus recorder");
        STARTED.get_or_init(Instant::now);
        describe();
        handle
    });
    register_at_zero(indexes);
    handle.clone()
}

/// The exporter, with each histogram's buckets (without them it renders
/// summaries).
fn builder() -> PrometheusBuilder {
    [
        (BATCH_SECONDS, BATCH_BUCKETS),
        (FOLLOW_STAGE_SECONDS, FOLLOW_BUCKETS),
        (FOLLOW_BATCH_STAGE_SECONDS, FOLLOW_BUCKETS),
        (FOLLOW_IN_FLIGHT, IN_FLIGHT_BUCKETS),
    ]
    .into_iter()
    .fold(PrometheusBuilder::new(), |builder, (name, buckets)| {
        builder
            .set_buckets_for_metric(Matcher::Full(name.into()), buckets)
            .expect("static buckets are valid")
    })
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
    describe_histogram!(
        FOLLOW_STAGE_SECONDS,
        Unit::Seconds,
        "Per document follow mode wrote to Meilisearch, the time each stage took, from MongoDB applying the change to this replica seeing its task end (total)."
    );
    describe_histogram!(
        FOLLOW_BATCH_STAGE_SECONDS,
        Unit::Seconds,
        "Per micro-batch follow mode applied, the time settling it (settle) and saving its resume token (token_save) took."
    );
    describe_histogram!(
        FOLLOW_IN_FLIGHT,
        "Per micro-batch follow mode applied, how many micro-batches were in flight (it included) when it was enqueued."
    );
}

/// Creates every series whose labels are known, without changing a value
/// already recorded (so calling it again is harmless).
fn register_at_zero(indexes: &[String]) {
    for outcome in RUN_OUTCOMES {
        counter!(RUNS, "outcome" => *outcome).increment(0);
    }
    for index in indexes {
        for name in [DOCUMENTS_INDEXED, DOCUMENTS_DELETED, DOCUMENTS_REJECTED] {
            counter!(name, "index" => index.clone()).increment(0);
        }
    }
    for collection in Collection::ALL {
        gauge!(UNINDEXED, "collection" => collection.name()).increment(0.0);
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
    for stage in FOLLOW_STAGES {
        let _ = histogram!(FOLLOW_STAGE_SECONDS, "stage" => *stage);
    }
    for stage in FOLLOW_BATCH_STAGES {
        let _ = histogram!(FOLLOW_BATCH_STAGE_SECONDS, "stage" => *stage);
    }
    let _ = histogram!(FOLLOW_IN_FLIGHT);
}

/// Checks, in debug builds, that `value` is one of the values of the
/// family's `label` listed above (the ones registered at zero).
fn listed(values: &[&str], label: &str, value: &str) {
    debug_assert!(values.contains(&value), "unlisted {label} {value}");
}

/// The text for `/metrics`, with the time-since-success gauge brought up to date.
pub(crate) fn render(handle: &PrometheusHandle) -> String {
    let last_success = *LAST_SUCCESS.lock().expect("poisoned");
    let since = last_success
        .unwrap_or(*STARTED.get_or_init(Instant::now))
        .elapsed();
    gauge!(SECONDS_SINCE_SUCCESS).set(since.as_secs_f64());
    handle.render()
}

/// A run ended; `outcome` is one of [`RUN_OUTCOMES`].
pub(crate) fn run_finished(outcome: &'static str, successful: bool) {
    listed(RUN_OUTCOMES, "outcome", outcome);
    counter!(RUNS, "outcome" => outcome).increment(1);
    if successful {
        *LAST_SUCCESS.lock().expect("poisoned") = Some(Instant::now());
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
        listed(SYNC_PHASES, "phase", phase);
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
    listed(FOLLOW_OPS, "op", op);
    counter!(FOLLOW_EVENTS, "op" => op).increment(n);
}

pub(crate) fn follow_lag(secs: f64) {
    gauge!(FOLLOW_LAG).set(secs);
}

/// `docs` documents took `took` in `stage`, one of [`FOLLOW_STAGES`].
pub(crate) fn follow_stage(stage: &'static str, took: Duration, docs: usize) {
    listed(FOLLOW_STAGES, "stage", stage);
    histogram!(FOLLOW_STAGE_SECONDS, "stage" => stage).record_many(took.as_secs_f64(), docs);
}

/// A micro-batch took `took` in `stage`, one of [`FOLLOW_BATCH_STAGES`].
pub(crate) fn follow_batch_stage(stage: &'static str, took: Duration) {
    listed(FOLLOW_BATCH_STAGES, "stage", stage);
    histogram!(FOLLOW_BATCH_STAGE_SECONDS, "stage" => stage).record(took.as_secs_f64());
}

/// A micro-batch was applied that was enqueued with `depth` in flight.
pub(crate) fn follow_in_flight(depth: usize) {
    histogram!(FOLLOW_IN_FLIGHT).record(depth as f64);
}

pub(crate) fn unindexed_backlog(collection: &str, count: u64) {
    gauge!(UNINDEXED, "collection" => collection.to_string()).set(count as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The follow histograms are there at zero for every stage before
    /// anything is recorded, and in the buckets set for them.
    #[test]
    fn follow_stages_are_registered_at_zero_and_bucketed() {
        let recorder = builder().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe();
            register_at_zero(&[]);
            follow_stage("total", Duration::from_millis(15), 2);
            follow_batch_stage("token_save", Duration::from_secs(90));
            follow_in_flight(3);
        });
        let text = handle.render();
        let line = |l: &str| assert!(text.lines().any(|x| x == l), "{l} missing:\n{text}");
        line("# TYPE reconciler_follow_stage_seconds histogram");
        for stage in FOLLOW_STAGES.iter().filter(|s| **s != "total") {
            line(&format!(
                "reconciler_follow_stage_seconds_count{{stage=\"{stage}\"}} 0"
            ));
        }
        line("reconciler_follow_stage_seconds_bucket{stage=\"total\",le=\"0.01\"} 0");
        line("reconciler_follow_stage_seconds_bucket{stage=\"total\",le=\"0.025\"} 2");
        line("reconciler_follow_batch_stage_seconds_count{stage=\"settle\"} 0");
        line("reconciler_follow_batch_stage_seconds_bucket{stage=\"token_save\",le=\"60\"} 0");
        line("reconciler_follow_batch_stage_seconds_bucket{stage=\"token_save\",le=\"+Inf\"} 1");
        line("reconciler_follow_micro_batches_in_flight_bucket{le=\"4\"} 1");
    }
}
