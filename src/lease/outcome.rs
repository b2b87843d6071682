//! What [`run_single_flight`](super::run_single_flight) ends with, and the
//! exit codes of docs/design.md §1 they map to.

use std::time::Duration;

use mongodb::bson::DateTime;

use super::guard::LeaseLost;

/// The job's work is done, by us or by another replica.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// We claimed the lease, ran the job and recorded its completion.
    Ran {
        epoch: i64,
        summary: serde_json::Value,
    },
    /// Another replica completed the job while we waited (or, when forced,
    /// completed a run it claimed after we started waiting).
    CompletedByOther {
        owner: Option<String>,
        epoch: Option<i64>,
        summary: Option<serde_json::Value>,
    },
    /// We held the lease (following change streams) and handed it over to
    /// `to`, which asked for it; the work goes on there.
    HandedOver { to: String },
    /// A completion younger than `reuse_completion_for` already existed when
    /// we started, so we did not run again (not when forced).
    ReusedCompletion {
        owner: Option<String>,
        epoch: Option<i64>,
        age: Duration,
        summary: Option<serde_json::Value>,
    },
}

impl Outcome {
    /// Always 0: done, by us or by the owner we waited for.
    pub fn exit_code(&self) -> i32 {
        0
    }
}

/// Why the job's work is not (known to be) done.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LeaseError {
    /// We ran the job, it failed, and the failure is recorded in the lease
    /// document (`error`, `attempt`, `retryAt`). Exit 1.
    #[error(
        "the job failed (attempt {attempt}; no retry before {}): {error}",
        rfc3339(retry_at)
    )]
    JobFailed {
        epoch: i64,
        error: String,
        attempt: u32,
        retry_at: DateTime,
    },
    /// We held the lease and lost it: taken over (a fenced write matched
    /// nothing) or self-fenced (renewals failed for `ttl - safety_margin`).
    /// The job was stopped and nothing more was written. Exit 3.
    #[error("lost the lease at epoch {epoch}: {reason}")]
    LeaseLost { epoch: i64, reason: LeaseLost },
    /// `wait_timeout` passed while another replica held the lease (or a
    /// failed run's `retryAt` had not come). Exit 3.
    #[error(
        "gave up after waiting {} for the job{}",
        waited_for(waited),
        held_by(owner)
    )]
    WaitTimedOut {
        waited: Duration,
        owner: Option<String>,
    },
    /// Shutdown was requested. If we were the owner the job was stopped and
    /// the lease released (`released`) so a follower can claim at once — or,
    /// if the job did not stop in time or the release went unconfirmed, left
    /// to expire. Exit 3.
    #[error("shut down before the job finished (lease released: {released})")]
    ShutDown { released: bool },
    /// MongoDB could not be reached for longer than we may wait, or a
    /// fenced write could not be confirmed before our lease's local deadline.
    /// Exit 4.
    #[error("MongoDB is unreachable: {0}")]
    MongoUnavailable(String),
    /// MongoDB refused to let us read, claim or ask for the lease (a
    /// validator on the collection, a missing privilege, a bad value): no
    /// retry would change that. Exit 1.
    #[error("MongoDB refused to {what}: {detail}")]
    Refused { what: String, detail: String },
}

/// A MongoDB time as an operator reads it: `2026-12-01T12:54:35.764Z`.
fn rfc3339(at: &DateTime) -> String {
    at.try_to_rfc3339_string()
        .unwrap_or_else(|_| at.to_string())
}

/// A wait as an operator reads it: `5s 2ms`.
fn waited_for(waited: &Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(waited.as_millis() as u64))
}

/// Who held the job when we gave up, if anyone did.
fn held_by(owner: &Option<String>) -> String {
    match owner {
        Some(owner) => format!(" (held by {owner})"),
        None => String::new(),
    }
}

impl LeaseError {
    /// The process exit code of docs/design.md §1 (`once`, `reindex`).
    pub fn exit_code(&self) -> i32 {
        match self {
            LeaseError::JobFailed { .. } | LeaseError::Refused { .. } => 1,
            LeaseError::LeaseLost { .. }
            | LeaseError::WaitTimedOut { .. }
            | LeaseError::ShutDown { .. } => 3,
            LeaseError::MongoUnavailable(_) => 4,
        }
    }
}

/// Returned (as the job's error) by a job that stops because another replica
/// asked for the lease: the runner releases it for `to` instead of
/// recording a failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("handing the lease over to {to}, which asked for it")]
pub struct HandOver {
    pub to: String,
}
