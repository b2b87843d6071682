//! What [`run_single_flight`](super::run_single_flight) ends with: the
//! job's own output ([`Outcome::Ran`]) or error ([`LeaseError::JobFailed`]),
//! in the job's types, or what the lease itself ran into. Exit codes are not
//! the lease's business: `crate::job` maps these to them, in one place.

use std::time::Duration;

use mongodb::bson::DateTime;

use super::guard::LeaseLost;

/// The job's work is done, by us or by another replica. `T` is the job's
/// output ([`LeasedJob::Output`](super::LeasedJob::Output)).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<T = serde_json::Value> {
    /// We claimed the lease, ran the job and recorded its completion
    /// (`summary`, serialized, is stored in the document).
    Ran { epoch: i64, summary: T },
    /// Another replica completed the job while we waited (or, when forced,
    /// completed a run it claimed after we started waiting): `age` is `None`.
    /// Or a completion younger than `reuse_completion_for` already existed
    /// when we started, so we did not run again (not when forced): `age` is
    /// how old it was.
    CompletedByOther {
        owner: Option<String>,
        epoch: Option<i64>,
        age: Option<Duration>,
        summary: Option<serde_json::Value>,
    },
    /// We kept the lease after completing (`following`), the job ended in
    /// [`JobEnd::HandOver`](super::JobEnd::HandOver), and we handed it over to
    /// `to`, which asked for it; the work goes on there.
    HandedOver { to: String },
}

/// Why the job's work is not (known to be) done. `E` is the job's error
/// ([`LeasedJob::Error`](super::LeasedJob::Error)); only
/// [`LeaseError::JobFailed`] carries one.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LeaseError<E = anyhow::Error> {
    /// We ran the job, it failed with `error`, and the failure is recorded in
    /// the lease document (`error` as its alternate text `{:#}`, `attempt`,
    /// `retryAt`).
    #[error(
        "the job failed (attempt {attempt}; no retry before {}): {error:#}",
        super::clock::rfc3339(retry_at)
    )]
    JobFailed {
        epoch: i64,
        error: E,
        attempt: u32,
        retry_at: DateTime,
    },
    /// We held the lease and lost it: taken over (a fenced write matched
    /// nothing) or self-fenced (renewals failed for `ttl - safety_margin`).
    /// The job was stopped and nothing more was written.
    #[error("lost the lease at epoch {epoch}: {reason}")]
    LeaseLost { epoch: i64, reason: LeaseLost },
    /// `wait_timeout` passed while another replica held the lease (or a
    /// failed run's `retryAt` had not come).
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
    /// to expire.
    #[error("shut down before the job finished (lease released: {released})")]
    ShutDown { released: bool },
    /// MongoDB could not be reached for longer than we may wait, or a
    /// fenced write could not be confirmed before our lease's local deadline.
    #[error("MongoDB is unreachable: {0}")]
    MongoUnavailable(String),
    /// MongoDB refused to let us read, claim or ask for the lease (a
    /// validator on the collection, a missing privilege, a bad value): no
    /// retry would change that.
    #[error("MongoDB refused to {what}: {detail}")]
    Refused { what: String, detail: String },
}

/// A wait as an operator reads it: `5s 2ms`.
fn waited_for(waited: &Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(waited.as_millis() as u64))
}

/// Who held the job when we gave up, if anyone did.
fn held_by(owner: &Option<String>) -> String {
    let held = owner.as_ref().map(|owner| format!(" (held by {owner})"));
    held.unwrap_or_default()
}
