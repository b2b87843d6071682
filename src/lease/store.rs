//! Every MongoDB read and write of a job document, in one place.
//!
//! One document per job in `distributedJobs`, `_id` = the job name:
//! `{ owner, epoch, status: running|completed|failed|released, claimedAt,
//! renewedAt, expiresAt, completedAt, failedAt, releasedAt, error, attempt,
//! retryAt, progress, summary }`.
//!
//! - **Claim**: one `findOneAndUpdate` with `upsert: true` and an update
//!   pipeline (`epoch = ifNull(epoch, 0) + 1`). Its filter is the claimable
//!   state the caller just judged (see `follower.rs`) *and* that state's epoch,
//!   so the claim is a compare-and-swap: if anyone claimed, or the document
//!   appeared, in between, nothing matches, the upsert's insert collides with
//!   the existing `_id` (E11000) and we are a follower.
//! - **Renew / complete / fail / release**: `updateOne` fenced by
//!   `_id + owner + epoch + status running + expiresAt > server now`. Matching
//!   nothing means the lease is no longer ours; the caller reports it as lost,
//!   never as success.
//!
//! All times are server times from [`clock::server_now`](super::clock) passed
//! in by the caller. Values written by the owner's own (non-pipeline) updates
//! are literals; the claim pipeline wraps caller strings in `$literal`.

use std::time::Duration;

use mongodb::bson::{self, doc, Bson, DateTime, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::ReturnDocument;
use mongodb::{Collection, Database};
use serde::Serialize;

use super::clock;
use crate::progress::ProgressSnapshot;

/// The `status` field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Running,
    Completed,
    Failed,
    Released,
    /// Something this version does not write; treated as claimable.
    Other(String),
}

impl JobStatus {
    fn parse(text: &str) -> Self {
        match text {
            "running" => JobStatus::Running,
            "completed" => JobStatus::Completed,
            "failed" => JobStatus::Failed,
            "released" => JobStatus::Released,
            other => JobStatus::Other(other.to_string()),
        }
    }
}

/// A job document as read.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub owner: Option<String>,
    pub epoch: Option<i64>,
    pub status: JobStatus,
    pub claimed_at: Option<DateTime>,
    pub renewed_at: Option<DateTime>,
    pub expires_at: Option<DateTime>,
    pub completed_at: Option<DateTime>,
    pub failed_at: Option<DateTime>,
    pub released_at: Option<DateTime>,
    pub error: Option<String>,
    /// Consecutive failures so far (0 after a completion).
    pub attempt: u32,
    pub retry_at: Option<DateTime>,
    pub progress: Option<ProgressSnapshot>,
    pub summary: Option<serde_json::Value>,
}

impl JobRecord {
    /// Reads the fields leniently: numbers of any BSON numeric type, times as
    /// dates or Int64 milliseconds; a malformed optional field reads as absent.
    pub fn from_document(doc: &Document) -> Self {
        let time = |key: &str| match doc.get(key) {
            Some(Bson::DateTime(at)) => Some(*at),
            Some(Bson::Int64(ms)) => Some(DateTime::from_millis(*ms)),
            _ => None,
        };
        let int = |key: &str| match doc.get(key) {
            Some(Bson::Int32(n)) => Some(i64::from(*n)),
            Some(Bson::Int64(n)) => Some(*n),
            Some(Bson::Double(n)) if n.is_finite() => Some(*n as i64),
            _ => None,
        };
        let text = |key: &str| doc.get_str(key).ok().map(str::to_string);
        JobRecord {
            owner: text("owner"),
            epoch: int("epoch"),
            status: JobStatus::parse(doc.get_str("status").unwrap_or("")),
            claimed_at: time("claimedAt"),
            renewed_at: time("renewedAt"),
            expires_at: time("expiresAt"),
            completed_at: time("completedAt"),
            failed_at: time("failedAt"),
            released_at: time("releasedAt"),
            error: text("error"),
            attempt: int("attempt")
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            retry_at: time("retryAt"),
            progress: doc
                .get("progress")
                .filter(|p| matches!(p, Bson::Document(_)))
                .and_then(|p| bson::from_bson(p.clone()).ok()),
            summary: doc
                .get("summary")
                .filter(|s| !matches!(s, Bson::Null))
                .map(|s| s.clone().into_relaxed_extjson()),
        }
    }

    /// `running` and not yet expired at `now`.
    pub fn is_live(&self, now: DateTime) -> bool {
        self.status == JobStatus::Running && self.expires_at.is_some_and(|at| at > now)
    }
}

/// What an owner presents with each fenced write: who it is and which claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub owner: String,
    pub epoch: i64,
}

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimResult {
    /// We hold the lease; the document as we wrote it.
    Won(Box<JobRecord>),
    /// Someone else claimed first (E11000, or another owner in the result).
    Lost,
}

/// Access to one job's document.
#[derive(Clone, Debug)]
pub struct JobStore {
    db: Database,
    jobs: Collection<Document>,
    job: String,
    ttl: Duration,
}

impl JobStore {
    /// The document `_id: job` in `db.collection`; claims and renewals hold
    /// the lease for `ttl`.
    pub fn new(db: &Database, collection: &str, job: &str, ttl: Duration) -> Self {
        JobStore {
            db: db.clone(),
            jobs: db.collection(collection),
            job: job.to_string(),
            ttl,
        }
    }

    /// The server's clock (see [`clock::server_now`]).
    pub async fn server_now(&self) -> mongodb::error::Result<DateTime> {
        clock::server_now(&self.db).await
    }

    /// The job document, if it exists.
    pub async fn read(&self) -> mongodb::error::Result<Option<JobRecord>> {
        let found = self.jobs.find_one(doc! { "_id": &self.job }).await?;
        Ok(found.as_ref().map(JobRecord::from_document))
    }

    /// Claims the lease for `owner` at server time `now`, provided the
    /// document is still in the claimable state the caller judged: epoch
    /// `seen_epoch` (`None`: no document or no epoch) and not live.
    pub async fn claim(
        &self,
        owner: &str,
        now: DateTime,
        seen_epoch: Option<i64>,
    ) -> mongodb::error::Result<ClaimResult> {
        let epoch_unchanged = match seen_epoch {
            Some(epoch) => Bson::Int64(epoch),
            None => Bson::Document(doc! { "$exists": false }),
        };
        let filter = doc! {
            "_id": &self.job,
            "epoch": epoch_unchanged,
            "$or": [
                { "status": { "$ne": "running" } },
                { "expiresAt": { "$lte": now } },
            ],
        };
        let claim = vec![doc! { "$set": {
            "owner": { "$literal": owner },
            "status": "running",
            "epoch": { "$add": [ { "$ifNull": ["$epoch", 0_i64] }, 1_i64 ] },
            "claimedAt": now,
            "renewedAt": now,
            "expiresAt": clock::later(now, self.ttl),
            "progress": Bson::Null,
        } }];
        let result = self
            .jobs
            .find_one_and_update(filter, claim)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await;
        match result {
            Ok(Some(doc)) => {
                let record = JobRecord::from_document(&doc);
                Ok(if record.owner.as_deref() == Some(owner) {
                    ClaimResult::Won(Box::new(record))
                } else {
                    ClaimResult::Lost
                })
            }
            // Upsert always returns the document; be defensive anyway.
            Ok(None) => Ok(ClaimResult::Lost),
            Err(error) if is_duplicate_key(&error) => Ok(ClaimResult::Lost),
            Err(error) => Err(error),
        }
    }

    /// Extends the lease to `now + ttl` and records `progress`. `Ok(false)`:
    /// the fence matched nothing (the lease is lost).
    pub async fn renew(
        &self,
        fence: &Fence,
        now: DateTime,
        progress: &ProgressSnapshot,
    ) -> mongodb::error::Result<bool> {
        self.fenced_update(
            fence,
            now,
            doc! { "$set": {
                "renewedAt": now,
                "expiresAt": clock::later(now, self.ttl),
                "progress": progress_bson(progress),
            } },
        )
        .await
    }

    /// Records a successful run. `Ok(false)`: the lease is lost.
    pub async fn complete(
        &self,
        fence: &Fence,
        now: DateTime,
        summary: &serde_json::Value,
        progress: &ProgressSnapshot,
    ) -> mongodb::error::Result<bool> {
        let summary = bson::to_bson(summary).unwrap_or_else(|e| Bson::String(e.to_string()));
        self.fenced_update(
            fence,
            now,
            doc! {
                "$set": {
                    "status": "completed",
                    "completedAt": now,
                    "summary": summary,
                    "progress": progress_bson(progress),
                    "attempt": 0_i32,
                },
                "$unset": { "error": "", "retryAt": "" },
            },
        )
        .await
    }

    /// Records a failed run: `error`, the new consecutive `attempt` count and
    /// when a retry may start. `Ok(false)`: the lease is lost.
    pub async fn fail(
        &self,
        fence: &Fence,
        now: DateTime,
        error: &str,
        attempt: u32,
        retry_at: DateTime,
    ) -> mongodb::error::Result<bool> {
        self.fenced_update(
            fence,
            now,
            doc! { "$set": {
                "status": "failed",
                "failedAt": now,
                "error": error,
                "attempt": i64::from(attempt),
                "retryAt": retry_at,
            } },
        )
        .await
    }

    /// Gives the lease up (shutdown) so a follower can claim at once.
    /// `Ok(false)`: the lease was already lost.
    pub async fn release(
        &self,
        fence: &Fence,
        now: DateTime,
        progress: &ProgressSnapshot,
    ) -> mongodb::error::Result<bool> {
        self.fenced_update(
            fence,
            now,
            doc! { "$set": {
                "status": "released",
                "releasedAt": now,
                "progress": progress_bson(progress),
            } },
        )
        .await
    }

    /// The one fence every owner write goes through.
    async fn fenced_update(
        &self,
        fence: &Fence,
        now: DateTime,
        update: Document,
    ) -> mongodb::error::Result<bool> {
        let filter = doc! {
            "_id": &self.job,
            "owner": &fence.owner,
            "epoch": fence.epoch,
            "status": "running",
            "expiresAt": { "$gt": now },
        };
        let result = self.jobs.update_one(filter, update).await?;
        Ok(result.matched_count == 1)
    }
}

fn progress_bson(progress: &ProgressSnapshot) -> Bson {
    bson::to_bson(progress).unwrap_or(Bson::Null)
}

/// E11000: the upsert's insert collided with an existing `_id`.
fn is_duplicate_key(error: &mongodb::error::Error) -> bool {
    const DUPLICATE_KEY: i32 = 11000;
    match &*error.kind {
        ErrorKind::Command(command) => command.code == DUPLICATE_KEY,
        ErrorKind::Write(WriteFailure::WriteError(write)) => write.code == DUPLICATE_KEY,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_documents_leniently() {
        let at = DateTime::from_millis(1_000);
        let record = JobRecord::from_document(&doc! {
            "_id": "job", "owner": "a", "epoch": 3_i32, "status": "failed",
            "expiresAt": 1_000_i64, "retryAt": at, "attempt": 2.0,
            "progress": { "phase": "index", "done": 5_i64, "total": 10_i64, "docsPerSec": 1.5, "etaSecs": Bson::Null },
            "summary": { "indexed": 5_i32 },
        });
        assert_eq!(record.owner.as_deref(), Some("a"));
        assert_eq!(record.epoch, Some(3));
        assert_eq!(record.status, JobStatus::Failed);
        assert_eq!(record.expires_at, Some(at));
        assert_eq!(record.retry_at, Some(at));
        assert_eq!(record.attempt, 2);
        assert_eq!(record.progress.as_ref().map(|p| p.done), Some(5));
        assert_eq!(record.summary, Some(serde_json::json!({ "indexed": 5 })));
        assert!(!record.is_live(DateTime::from_millis(0)));
    }
}
