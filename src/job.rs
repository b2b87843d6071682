//! The reconciliation as a leased job: how settings become the options of
//! the lease and of the engine, how one run is executed under the lease, and
//! how its result is classified for exit codes ([`Exit`], numbered here and
//! nowhere else), `/status` and metrics.
//!
//! `once`, `reindex` and every scheduled run of `run` go through
//! [`run_leased`], so all three share one lease protocol and one meaning of
//! "done".

use mongodb::Database;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::lease::{self, Guard, LeaseError, LeaseOptions, Outcome};
use crate::meili::Meili;
use crate::metrics;
use crate::progress::Progress;
use crate::reconcile::{self, ReconcileError, RunSummary, SyncOptions};

/// The lease options of this replica: `[lease]`, with its owner id. Warns
/// (once per call: the CLI makes one) when the lease is written without
/// `majority`.
pub fn lease_options(settings: &Settings) -> LeaseOptions {
    if let lease::LeaseWriteConcern::Nodes(n) = settings.lease.write_concern {
        tracing::warn!(
            write_concern = n,
            "lease.write_concern is not \"majority\": a replica-set failover can roll back a claim \
             and let two replicas own the same epoch (use it only where a majority cannot acknowledge, \
             e.g. two data nodes and an arbiter)"
        );
    }
    settings.lease.clone()
}

/// The engine's options ([`SyncOptions::new`]). Warns when `sync.in_flight`
/// keeps fewer tasks enqueued than `sync.max_bytes_in_flight` allows (a
/// configuration written for the old task-count bound, e.g. `in_flight = 2`).
pub fn sync_options(settings: &Settings) -> SyncOptions {
    let sync = &settings.sync;
    let tasks_the_budget_allows = sync.max_bytes_in_flight / sync.batch_bytes.max(1);
    if sync.in_flight < tasks_the_budget_allows {
        tracing::warn!(
            in_flight = sync.in_flight,
            max_bytes_in_flight = sync.max_bytes_in_flight,
            batch_bytes = sync.batch_bytes,
            "sync.in_flight caps the Meilisearch tasks enqueued below what sync.max_bytes_in_flight allows \
             ({tasks_the_budget_allows} batches of sync.batch_bytes): Meilisearch can merge fewer tasks \
             into one indexing batch; remove sync.in_flight to let the byte budget decide"
        );
    }
    SyncOptions::new(settings)
}

/// The process exit codes (docs/design.md §1), the one place they are
/// numbered: every command's outcome maps to one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Done: by us, or by the owner we waited for.
    Done = 0,
    /// The run failed (`verify`: differences found).
    Failed = 1,
    /// Bad configuration (nothing was touched).
    BadConfig = 2,
    /// The lease was lost mid-run, or the wait for the owner timed out.
    LeaseLost = 3,
    /// MongoDB or Meilisearch could not be reached.
    Unreachable = 4,
}

impl Exit {
    /// The exit code of a command that failed with the engine's `error`.
    pub fn of_engine_error(error: &ReconcileError) -> Exit {
        RunOutcome::of_engine_error(error, String::new()).exit()
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit as u8)
    }
}

/// How a leased run ended, in the terms operators script against.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum RunOutcome {
    /// We ran it; `rejects` documents were refused by Meilisearch.
    Completed {
        summary: serde_json::Value,
        /// The summary as an operator reads it.
        #[serde(skip)]
        text: String,
        rejects: usize,
    },
    /// Another replica completed it while we waited, or a fresh completion was reused.
    DoneByOther {
        owner: Option<String>,
        summary: Option<serde_json::Value>,
    },
    /// The run failed; the failure is recorded in the lease with its retry time.
    Failed { error: String },
    /// A server could not be reached.
    Unreachable { error: String },
    /// The lease was lost, the wait timed out, or we shut down.
    LeaseLost { error: String },
    /// We held the lease (following change streams) and handed it to `to`,
    /// a replica that asked for it (`once`, `reindex`).
    HandedOver { to: String },
}

impl RunOutcome {
    /// How a leased job of the engine ended (`once`, `reindex`,
    /// `verify --repair`, each scheduled run, a follow-mode owner): the
    /// runner's answer. Counts a lost lease in the metrics.
    pub(crate) fn of_lease(
        result: Result<Outcome<RunSummary>, LeaseError<ReconcileError>>,
    ) -> Self {
        let error = match result {
            Ok(Outcome::Ran { summary, .. }) => return RunOutcome::completed(&summary),
            Ok(Outcome::HandedOver { to }) => return RunOutcome::HandedOver { to },
            Ok(Outcome::CompletedByOther { owner, summary, .. }) => {
                return RunOutcome::DoneByOther { owner, summary }
            }
            Err(error) => error,
        };
        let text = error.to_string();
        match error {
            LeaseError::JobFailed { error, .. } => RunOutcome::of_engine_error(&error, text),
            LeaseError::Refused { .. } => RunOutcome::Failed { error: text },
            LeaseError::MongoUnavailable(_) => RunOutcome::Unreachable { error: text },
            LeaseError::LeaseLost { .. } => {
                metrics::lease_lost();
                RunOutcome::LeaseLost { error: text }
            }
            LeaseError::WaitTimedOut { .. } | LeaseError::ShutDown { .. } => {
                RunOutcome::LeaseLost { error: text }
            }
        }
    }

    /// A run that failed with the engine's `error`, said as `text`: its kind
    /// tells a failure from an unreachable server.
    fn of_engine_error(error: &ReconcileError, text: String) -> Self {
        match error {
            ReconcileError::MeiliUnreachable(_) | ReconcileError::MongoUnreachable(_) => {
                RunOutcome::Unreachable { error: text }
            }
            _ => RunOutcome::Failed { error: text },
        }
    }

    fn completed(summary: &RunSummary) -> Self {
        RunOutcome::Completed {
            summary: serde_json::to_value(summary).unwrap_or_default(),
            text: summary.to_string(),
            rejects: summary.rejected_count(),
        }
    }

    /// The exit code (docs/design.md §1).
    pub fn exit(&self) -> Exit {
        self.classified().1
    }

    /// The `outcome` label of the runs metric.
    pub(crate) fn metric_label(&self) -> &'static str {
        self.classified().0
    }

    /// The metric label and the exit code, side by side.
    fn classified(&self) -> (&'static str, Exit) {
        match self {
            RunOutcome::Completed { rejects: 0, .. } => ("completed", Exit::Done),
            RunOutcome::Completed { .. } => ("completed_with_rejects", Exit::Done),
            RunOutcome::DoneByOther { .. } => ("done_by_other", Exit::Done),
            RunOutcome::HandedOver { .. } => ("handed_over", Exit::Done),
            RunOutcome::Failed { .. } => ("failed", Exit::Failed),
            RunOutcome::Unreachable { .. } => ("unreachable", Exit::Unreachable),
            RunOutcome::LeaseLost { .. } => ("lease_lost", Exit::LeaseLost),
        }
    }

    pub(crate) fn is_success(&self) -> bool {
        self.exit() == Exit::Done
    }
}

/// The servers and options one run needs.
#[derive(Clone)]
pub struct Reconciler {
    pub db: Database,
    pub meili: Meili,
    pub sync: SyncOptions,
}

/// Runs `work` under the lease and classifies the result. `work` gets the
/// guard and progress; its error kind decides between exit codes 1, 3 and 4.
pub async fn run_leased<W, Fut>(
    db: &Database,
    lease: &LeaseOptions,
    progress: Progress,
    shutdown: CancellationToken,
    mut work: W,
) -> RunOutcome
where
    W: FnMut(Guard, Progress) -> Fut + Send,
    Fut: std::future::Future<Output = Result<RunSummary, ReconcileError>> + Send,
{
    let mut job = move |guard: Guard, progress: Progress| {
        let run = work(guard, progress);
        async move { run.await.inspect(record_documents) }
    };
    let result = lease::run_single_flight(db, lease, &mut job, progress, shutdown).await;
    let outcome = RunOutcome::of_lease(result);
    metrics::run_finished(outcome.metric_label(), outcome.is_success());
    outcome
}

/// A reconciliation that finished inside a longer leased job (a follow-mode
/// owner's first or periodic run): recorded in the metrics as a run of its own.
pub(crate) fn record_completed(summary: &RunSummary) -> RunOutcome {
    record_documents(summary);
    let outcome = RunOutcome::completed(summary);
    metrics::run_finished(outcome.metric_label(), true);
    outcome
}

/// A completed reconciliation's documents and phases, in the metrics, and
/// its rejects said once.
fn record_documents(summary: &RunSummary) {
    metrics::sync_phases(&summary.phases);
    for c in &summary.collections {
        metrics::documents(&c.index_uid, c.indexed, c.deleted, c.rejected.len() as u64);
    }
    let rejects = summary.rejected_count();
    if rejects > 0 {
        tracing::warn!(
            rejects,
            "completed with rejects: Meilisearch refused some documents; they stay unindexed"
        );
    }
}

/// One reconciliation under the lease (`once`, and each scheduled run).
pub async fn reconcile_once(
    reconciler: &Reconciler,
    lease: &LeaseOptions,
    progress: Progress,
    shutdown: CancellationToken,
) -> RunOutcome {
    let r = reconciler;
    let work = |guard: Guard, progress: Progress| async move {
        reconcile::reconcile(&r.db, &r.meili, &r.sync, &guard, &progress).await
    };
    run_leased(&r.db, lease, progress, shutdown, work).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::RUN_OUTCOMES;

    #[test]
    fn each_way_a_leased_run_ends_has_its_exit_code() {
        let at = mongodb::bson::DateTime::from_millis(0);
        let failed = |error| LeaseError::JobFailed {
            epoch: 1,
            error,
            attempt: 1,
            retry_at: at,
        };
        let cases = [
            (
                Ok(Outcome::Ran {
                    epoch: 1,
                    summary: RunSummary::default(),
                }),
                Exit::Done,
            ),
            (
                Ok(Outcome::CompletedByOther {
                    owner: None,
                    epoch: None,
                    age: None,
                    summary: None,
                }),
                Exit::Done,
            ),
            (Ok(Outcome::HandedOver { to: "b".into() }), Exit::Done),
            (
                Ok(Outcome::CompletedByOther {
                    owner: None,
                    epoch: None,
                    age: Some(std::time::Duration::ZERO),
                    summary: None,
                }),
                Exit::Done,
            ),
            (Err(failed(ReconcileError::Other("x".into()))), Exit::Failed),
            (
                Err(failed(ReconcileError::MeiliUnreachable("x".into()))),
                Exit::Unreachable,
            ),
            (
                Err(failed(ReconcileError::MongoUnreachable("x".into()))),
                Exit::Unreachable,
            ),
            (
                Err(LeaseError::Refused {
                    what: "claim".into(),
                    detail: "x".into(),
                }),
                Exit::Failed,
            ),
            (
                Err(LeaseError::LeaseLost {
                    epoch: 1,
                    reason: lease::LeaseLost::TakenOver,
                }),
                Exit::LeaseLost,
            ),
            (
                Err(LeaseError::WaitTimedOut {
                    waited: std::time::Duration::ZERO,
                    owner: None,
                }),
                Exit::LeaseLost,
            ),
            (
                Err(LeaseError::ShutDown { released: true }),
                Exit::LeaseLost,
            ),
            (
                Err(LeaseError::MongoUnavailable("x".into())),
                Exit::Unreachable,
            ),
        ];
        for (result, exit) in cases {
            let shown = format!("{result:?}");
            let outcome = RunOutcome::of_lease(result);
            assert_eq!(outcome.exit(), exit, "{shown}");
        }
        assert_eq!(Exit::Unreachable as u8, 4);
        assert_eq!(Exit::LeaseLost as u8, 3);
        assert_eq!(Exit::BadConfig as u8, 2);
        assert_eq!(Exit::Failed as u8, 1);
        assert_eq!(Exit::Done as u8, 0);
    }

    #[test]
    fn every_run_outcome_label_is_registered_at_start() {
        let outcomes = [
            RunOutcome::Completed {
                summary: serde_json::Value::Null,
                text: String::new(),
                rejects: 0,
            },
            RunOutcome::Completed {
                summary: serde_json::Value::Null,
                text: String::new(),
                rejects: 1,
            },
            RunOutcome::DoneByOther {
                owner: None,
                summary: None,
            },
            RunOutcome::Failed {
                error: String::new(),
            },
            RunOutcome::Unreachable {
                error: String::new(),
            },
            RunOutcome::LeaseLost {
                error: String::new(),
            },
            RunOutcome::HandedOver { to: String::new() },
        ];
        let mut labels: Vec<&str> = outcomes.iter().map(RunOutcome::metric_label).collect();
        labels.sort();
        let mut listed = RUN_OUTCOMES.to_vec();
        listed.sort();
        assert_eq!(labels, listed);
    }
}
