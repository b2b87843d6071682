//! The `status` reader: the lease as an operator sees it (`meili-reconciler
//! status [--json]`, and `lease` in `/status`), with every duration computed
//! against the server's clock, never the local one. A document LibreChat's
//! own `runDistributedJob` wrote last is named as such ("held by a LibreChat
//! replica"), and our last reconciliation's fields stay visible under it.
//! Plain data: its text is `report::status`'s.

use std::convert::Infallible;

use mongodb::bson::{DateTime, Document};
use mongodb::Database;
use serde::Serialize;

use super::clock;
use super::options::LeaseOptions;
use super::outcome::LeaseError;
use super::store::{Holder, JobRecord, JobStatus, JobStore};
use crate::progress::ProgressSnapshot;

/// Where the job stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// No job document yet.
    #[default]
    NeverRun,
    /// An owner holds an unexpired lease.
    Running,
    /// An owner holds an unexpired lease that it keeps after completing its
    /// run (`following`; `status` reads `completed` in the document).
    Following,
    /// The owner stopped renewing (crashed or partitioned); claimable.
    Expired,
    Completed,
    Failed,
    Released,
    /// A status this version does not know.
    Unknown,
}

/// The lease and the last run, as of `server_time`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseStatus {
    pub(crate) job: String,
    pub state: LeaseState,
    /// Which protocol wrote the document last (`librechat`: LibreChat's own
    /// start-up sync; its `completed` is not a reconciliation).
    pub(crate) holder: Option<Holder>,
    pub owner: Option<String>,
    pub epoch: Option<i64>,
    /// The server's clock when this was read (RFC 3339).
    pub(crate) server_time: String,
    claimed_at: Option<String>,
    renewed_at: Option<String>,
    /// When the holder's lease ends: our `leaseExpiresAt`, or LibreChat's
    /// `expiresAt` plus `lease.librechat_clock_skew`.
    expires_at: Option<String>,
    /// Seconds until then by the server's clock (negative: expired).
    pub expires_in_secs: Option<f64>,
    pub progress: Option<ProgressSnapshot>,
    pub(crate) completed_at: Option<String>,
    pub summary: Option<serde_json::Value>,
    pub(crate) failed_at: Option<String>,
    pub(crate) error: Option<String>,
    /// Consecutive failures (0 after a completion).
    pub(crate) attempt: u32,
    pub(crate) retry_at: Option<String>,
    /// Seconds until a retry may start (negative: it may now).
    pub(crate) retry_in_secs: Option<f64>,
    released_at: Option<String>,
    /// A handover was asked for by this replica, from the owner that keeps
    /// the lease.
    pub(crate) handover_requested_by: Option<String>,
    /// What the job keeps in the document, as the job shows it (see
    /// [`read_status`]).
    #[serde(flatten)]
    pub(crate) job_fields: JobFields,
}

/// The job's own fields of the document as an operator sees them: the job
/// alone knows their names and meaning, so it describes them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobFields {
    /// Keys of `status --json` (and of `lease` in `/status`), after the
    /// lease's own.
    #[serde(flatten)]
    pub(crate) json: serde_json::Map<String, serde_json::Value>,
    /// Lines of `status`, after the progress.
    #[serde(skip)]
    pub(crate) lines: Vec<String>,
}

/// Reads the job's lease document and the server's clock: the lease's own
/// fields, and the job's as `describe` shows them (given the document as
/// read; `None`: there is none yet).
pub async fn read_status(
    db: &Database,
    opts: &LeaseOptions,
    describe: impl FnOnce(Option<&Document>) -> JobFields,
) -> Result<LeaseStatus, LeaseError<Infallible>> {
    let store = JobStore::new(db, opts);
    let unavailable = |e: mongodb::error::Error| LeaseError::MongoUnavailable(e.to_string());
    // The document first, then the clock: "expires in" is never overstated
    // by a renewal landing between the two reads.
    let record = store.read().await.map_err(unavailable)?;
    let now = store.server_now().await.map_err(unavailable)?;
    let mut status =
        LeaseStatus::from_record(&opts.job, record.as_ref(), now, opts.librechat_clock_skew);
    status.job_fields = describe(record.as_ref().map(|record| &record.document));
    Ok(status)
}

impl LeaseStatus {
    /// The status of `record` (absent: never run) at server time `now`.
    pub(crate) fn from_record(
        job: &str,
        record: Option<&JobRecord>,
        now: DateTime,
        librechat_clock_skew: std::time::Duration,
    ) -> Self {
        let rfc3339 = |at: Option<DateTime>| at.as_ref().map(clock::rfc3339);
        let secs_until =
            |at: Option<DateTime>| at.map(|at| clock::millis_between(now, at) as f64 / 1000.0);
        let never_run = LeaseStatus {
            job: job.to_string(),
            server_time: clock::rfc3339(&now),
            ..LeaseStatus::default()
        };
        let Some(record) = record else {
            return never_run;
        };
        let live = record.is_live(now, librechat_clock_skew);
        let following = record.following && record.holder() == Holder::Reconciler;
        let state = match &record.status {
            _ if following && live => LeaseState::Following,
            _ if following => LeaseState::Expired,
            JobStatus::Running if live => LeaseState::Running,
            JobStatus::Running => LeaseState::Expired,
            JobStatus::Completed => LeaseState::Completed,
            JobStatus::Failed => LeaseState::Failed,
            JobStatus::Released => LeaseState::Released,
            JobStatus::Other(_) => LeaseState::Unknown,
        };
        LeaseStatus {
            state,
            holder: Some(record.holder()),
            owner: record.owner.clone(),
            epoch: record.epoch,
            claimed_at: rfc3339(record.claimed_at),
            renewed_at: rfc3339(record.renewed_at),
            expires_at: rfc3339(record.holds_until(librechat_clock_skew)),
            expires_in_secs: secs_until(record.holds_until(librechat_clock_skew)),
            progress: record.progress.clone(),
            completed_at: rfc3339(record.completed_at),
            summary: record.summary.clone(),
            failed_at: rfc3339(record.failed_at),
            error: record.error.clone(),
            attempt: record.attempt,
            retry_at: rfc3339(record.retry_at),
            retry_in_secs: secs_until(record.retry_at),
            released_at: rfc3339(record.released_at),
            handover_requested_by: record.handover_requested_by.clone().filter(|_| following),
            ..never_run
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_run_and_expired_read_against_server_time() {
        let now = DateTime::from_millis(10_000);
        let skew = std::time::Duration::from_secs(1);
        let status = LeaseStatus::from_record("job", None, now, skew);
        assert_eq!(status.state, LeaseState::NeverRun);

        let ours = |lease_end: i64| {
            JobRecord::from_document(&mongodb::bson::doc! {
                "owner": "a", "epoch": 2_i64, "status": "running",
                "leaseExpiresAt": DateTime::from_millis(lease_end),
                "expiresAt": DateTime::from_millis(lease_end + 1_000),
                "writtenExpiresAt": DateTime::from_millis(lease_end + 1_000),
            })
        };
        let record = ours(8_000);
        let status = LeaseStatus::from_record("job", Some(&record), now, skew);
        assert_eq!(status.state, LeaseState::Expired);
        assert_eq!(status.expires_in_secs, Some(-2.0));

        let record = ours(13_500);
        let status = LeaseStatus::from_record("job", Some(&record), now, skew);
        assert_eq!(status.state, LeaseState::Running);
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["state"], "running");
        assert_eq!(json["expiresInSecs"], 3.5);
        assert_eq!(json["holder"], "reconciler");
    }

    #[test]
    fn a_librechat_holder_is_read_as_such() {
        let now = DateTime::from_millis(10_000);
        let skew = std::time::Duration::from_secs(1);
        let record = JobRecord::from_document(&mongodb::bson::doc! {
            "owner": "3b241101-e2bb-4255-8caf-4136c566a962", "status": "running",
            "expiresAt": DateTime::from_millis(40_000), "epoch": 7_i64,
            "writtenExpiresAt": DateTime::from_millis(9_000),
        });
        let status = LeaseStatus::from_record("job", Some(&record), now, skew);
        assert_eq!(status.state, LeaseState::Running);
        assert_eq!(status.expires_in_secs, Some(31.0));
        assert_eq!(
            serde_json::to_value(&status).unwrap()["holder"],
            "librechat"
        );
    }
}
