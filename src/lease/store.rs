//! Every MongoDB read and write of a job document, in one place.
//!
//! One document per job in `distributedJobs`, `_id` = the job name. The
//! lease's fields ([`LEASE_FIELDS`]): `{ owner, epoch, status:
//! running|completed|failed|released, following, claimedAt, renewedAt,
//! leaseExpiresAt, expiresAt, writtenExpiresAt, updatedAt, completedAt,
//! failedAt, releasedAt, releasedFor, error, attempt, retryAt, progress,
//! summary, handoverRequestedBy, handoverRequestedAt }` (docs/design.md §5.1).
//! Any other field belongs to the job, which writes it under the fence
//! ([`JobStore::update_job_fields`]) and alone knows what it means (follow
//! mode keeps its resume point there); the lease never reads or resets it.
//!
//! The lease is **held** while `status` is `running` (a run), or while
//! `following` is true (an owner that keeps the lease after completing its
//! run: `status` then reads `completed`, which is also what tells
//! LibreChat's waiters the sync is done), and `leaseExpiresAt` is ahead.
//!
//! LibreChat's own `runDistributedJob` claims the same document
//! (`meili-index-sync`) and writes only `status`, `owner`, `expiresAt` and
//! `updatedAt`, from its app server's clock. So:
//!
//! - **Our lease's end is `leaseExpiresAt`** (MongoDB's clock). `expiresAt`
//!   is the field LibreChat's claim filter reads; we write it
//!   `librechat_clock_skew` later than anything we need kept, so a LibreChat
//!   replica whose clock runs that far ahead still cannot take it.
//! - **Who wrote last** is told by `writtenExpiresAt`, a copy of the
//!   `expiresAt` of our last write: LibreChat rewrites `expiresAt` on every
//!   write and never touches the copy ([`JobRecord::holder`]).
//! - **Claim**: one `findOneAndUpdate` with `upsert: true` and an update
//!   pipeline (`epoch = ifNull(epoch, 0) + 1`), filtered by the exact
//!   `status`, `owner`, `epoch` and `expiresAt` the caller judged claimable
//!   (see `follower.rs`). Every write by either protocol changes one of
//!   those, so the claim is a compare-and-swap on the whole judged state: if
//!   anyone wrote in between, nothing matches, the upsert's insert collides
//!   with the existing `_id` (E11000) and we are a follower.
//! - **Renew / end** (completed, failed or released) and the writes of an
//!   owner that keeps the lease (hold after completing, again after each
//!   later completion; the job's own fields): `updateOne`
//!   fenced by `_id + owner + epoch + held + leaseExpiresAt > server now`.
//!   Matching nothing means the lease is no longer ours — unless an earlier
//!   attempt of the same write landed without its reply reaching us, which a
//!   majority read of the document tells ([`JobStore::shows`]).
//!
//! Every write uses the lease's write concern (`majority` + journal + a
//! `wtimeout` by default) and every read its read concern (`majority` by
//! default), so nothing the protocol decides on can be rolled back by a
//! failover. All times are server times from [`clock::server_now`] passed in
//! by the caller. Values written by the owner's own (non-pipeline) updates
//! are literals; the claim pipeline wraps caller strings in `$literal`.

use std::time::Duration;

use mongodb::bson::{self, doc, Bson, DateTime, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::{
    Acknowledgment, CollectionOptions, ReadConcern, ReturnDocument, WriteConcern,
};
use mongodb::{Collection, Database};
use serde::Serialize;

use super::clock;
use super::options::{LeaseOptions, LeaseWriteConcern};
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

/// Which protocol wrote the job document last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Holder {
    /// This service (or no `expiresAt` at all).
    Reconciler,
    /// LibreChat's `runDistributedJob`: its `expiresAt` differs from the copy
    /// we keep of ours. Its `completed` is never a reconciliation.
    #[serde(rename = "librechat")]
    LibreChat,
}

/// A job document as read.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub owner: Option<String>,
    pub epoch: Option<i64>,
    pub status: JobStatus,
    pub claimed_at: Option<DateTime>,
    pub renewed_at: Option<DateTime>,
    /// Our lease's end (server clock).
    pub lease_expires_at: Option<DateTime>,
    /// The field LibreChat's protocol reads and writes.
    expires_at: Option<DateTime>,
    /// The `expiresAt` of our last write.
    written_expires_at: Option<DateTime>,
    pub(crate) completed_at: Option<DateTime>,
    pub failed_at: Option<DateTime>,
    pub(crate) released_at: Option<DateTime>,
    pub error: Option<String>,
    /// Consecutive failures so far (0 after a completion).
    pub attempt: u32,
    pub retry_at: Option<DateTime>,
    pub progress: Option<ProgressSnapshot>,
    pub(crate) summary: Option<serde_json::Value>,
    /// The owner keeps the lease after completing its run (`following`:
    /// the lease stays held, `status` reads `completed`).
    pub following: bool,
    /// Released for this replica, which asked for the lease (§5.12).
    pub(crate) released_for: Option<String>,
    /// A replica that needs the lease (`once`, `reindex`) asked the owner
    /// that keeps it to hand it over.
    pub(crate) handover_requested_by: Option<String>,
    /// The whole document as read: the job's own fields are the job's to
    /// read (the lease reads only its [`LEASE_FIELDS`]); a claim compares
    /// its [`JUDGED_FIELDS`] exactly as read here.
    pub document: Document,
}

/// The fields of the document the lease reads and writes (separated by
/// spaces); every other field is the job's ([`JobStore::update_job_fields`]).
pub(crate) const LEASE_FIELDS: &str = "_id owner epoch status following claimedAt renewedAt \
    leaseExpiresAt expiresAt writtenExpiresAt updatedAt completedAt failedAt releasedAt releasedFor \
    error attempt retryAt progress summary handoverRequestedBy handoverRequestedAt";

/// The fields every write by either protocol changes at least one of.
const JUDGED_FIELDS: [&str; 4] = ["status", "owner", "epoch", "expiresAt"];

impl JobRecord {
    /// Reads the fields leniently: numbers of any BSON numeric type, times as
    /// dates or Int64 milliseconds; a malformed optional field reads as absent.
    pub(crate) fn from_document(doc: &Document) -> Self {
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
        let progress = doc.get_document("progress").ok().cloned();
        let status = match doc.get_str("status").unwrap_or("") {
            "running" => JobStatus::Running,
            "completed" => JobStatus::Completed,
            "failed" => JobStatus::Failed,
            "released" => JobStatus::Released,
            other => JobStatus::Other(other.to_string()),
        };
        let attempt = int("attempt").and_then(|n| u32::try_from(n).ok());
        let summary = doc.get("summary").filter(|s| !matches!(s, Bson::Null));
        JobRecord {
            owner: text("owner"),
            epoch: int("epoch"),
            status,
            claimed_at: time("claimedAt"),
            renewed_at: time("renewedAt"),
            lease_expires_at: time("leaseExpiresAt"),
            expires_at: time("expiresAt"),
            written_expires_at: time("writtenExpiresAt"),
            completed_at: time("completedAt"),
            failed_at: time("failedAt"),
            released_at: time("releasedAt"),
            error: text("error"),
            attempt: attempt.unwrap_or(0),
            retry_at: time("retryAt"),
            progress: progress.and_then(|p| bson::from_document(p).ok()),
            summary: summary.map(|s| s.clone().into_relaxed_extjson()),
            following: doc.get_bool("following").unwrap_or(false),
            released_for: text("releasedFor"),
            handover_requested_by: text("handoverRequestedBy"),
            document: doc.clone(),
        }
    }

    /// Ours and held: `running`, or following (whatever the clock says).
    fn held_by_us_in_form(&self) -> bool {
        self.holder() == Holder::Reconciler && (self.status == JobStatus::Running || self.following)
    }

    /// Who wrote the document last: LibreChat when its `expiresAt` is not
    /// the one our last write left.
    pub(crate) fn holder(&self) -> Holder {
        match self.expires_at {
            Some(at) if self.written_expires_at != Some(at) => Holder::LibreChat,
            _ => Holder::Reconciler,
        }
    }

    /// When the current holder's lease ends on MongoDB's clock: ours at
    /// `leaseExpiresAt`; LibreChat's at `expiresAt` plus `skew`, since its
    /// replica judges that time by its own clock, which may run behind.
    pub(crate) fn holds_until(&self, skew: Duration) -> Option<DateTime> {
        match self.holder() {
            Holder::Reconciler => self.lease_expires_at,
            Holder::LibreChat => self.expires_at.map(|at| clock::later(at, skew)),
        }
    }

    /// Held and not yet expired at `now` (see [`JobRecord::holds_until`]):
    /// LibreChat's `running`, or ours `running` or following.
    pub(crate) fn is_live(&self, now: DateTime, skew: Duration) -> bool {
        let held = match self.holder() {
            Holder::LibreChat => self.status == JobStatus::Running,
            Holder::Reconciler => self.held_by_us_in_form(),
        };
        held && self.holds_until(skew).is_some_and(|at| at > now)
    }

    /// Our lease, held under `owner` (any epoch).
    pub(crate) fn is_running_for(&self, owner: &str) -> bool {
        self.held_by_us_in_form() && self.owner.as_deref() == Some(owner)
    }

    /// Held under `fence` (owner and epoch), whatever the clock says.
    pub(crate) fn is_held_under(&self, fence: &Fence) -> bool {
        self.is_running_for(&fence.owner) && self.epoch == Some(fence.epoch)
    }
}

/// How an owner's run ends ([`JobStore::end`]).
#[derive(Clone, Copy, Debug)]
pub enum RunEnd<'a> {
    /// A successful run's summary and progress. `expiresAt` moves to `now +
    /// reuse_completion_for + skew`: LibreChat's waiters read "completed and
    /// unexpired" as done, and its claim filter cannot take the document
    /// before then.
    Completed(&'a serde_json::Value, &'a ProgressSnapshot),
    /// A failed run: `error`, the new consecutive `attempt` count and
    /// `retryAt`, when a retry may start; LibreChat's claim filter cannot
    /// take the document before then either.
    Failed(&'a str, u32, DateTime),
    /// The lease given up (shutdown, or a handover to the replica that asked
    /// for it) so one of our followers can claim at once; with the progress.
    /// `expiresAt` is left as the last renewal wrote it: LibreChat's replicas
    /// wait it out, as they would for a lease that ran on.
    Released(&'a ProgressSnapshot, Option<&'a str>),
}

/// What an owner presents with each fenced write: who it is and which claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub owner: String,
    pub epoch: i64,
}

/// Access to one job's document.
#[derive(Clone, Debug)]
pub struct JobStore {
    db: Database,
    jobs: Collection<Document>,
    opts: LeaseOptions,
}

impl JobStore {
    /// The document `_id: opts.job` in `db.(opts.collection)`, read and
    /// written with the lease's concerns; claims and renewals hold the lease
    /// for `opts.ttl`.
    ///
    /// Every lease write is `majority` with journaling, or `w: n`, with a
    /// `wtimeout` of half the renewal period (at most 10 s), so an
    /// unconfirmed write is reported (and resolved by a read) well before
    /// the owner's safety deadline.
    pub fn new(db: &Database, opts: &LeaseOptions) -> Self {
        let (w, read_concern) = match opts.write_concern {
            LeaseWriteConcern::Majority => (Acknowledgment::Majority, ReadConcern::majority()),
            // A majority read would not see our own w:1 writes promptly
            // (and stalls with a data node down in a PSA set).
            LeaseWriteConcern::Nodes(n) => (Acknowledgment::Nodes(n), ReadConcern::local()),
        };
        let w_timeout = (opts.renew_every / 2).min(Duration::from_secs(10));
        let write_concern = WriteConcern::builder().w(w).journal(true);
        let write_concern = write_concern.w_timeout(w_timeout).build();
        let concerns = CollectionOptions::builder().write_concern(write_concern);
        let concerns = concerns.read_concern(read_concern).build();
        JobStore {
            db: db.clone(),
            jobs: db.collection_with_options(&opts.collection, concerns),
            opts: opts.clone(),
        }
    }

    /// The server's clock (see [`clock::server_now`]).
    pub async fn server_now(&self) -> mongodb::error::Result<DateTime> {
        clock::server_now(&self.db).await
    }

    /// The job document, if it exists.
    pub async fn read(&self) -> mongodb::error::Result<Option<JobRecord>> {
        let found = self.jobs.find_one(doc! { "_id": &self.opts.job }).await?;
        Ok(found.as_ref().map(JobRecord::from_document))
    }

    /// Claims the lease for `owner` at server time `now`, provided the
    /// document is still exactly as `seen` (`None`: there was none), which
    /// the caller judged claimable at `now`, and is not a live lease.
    /// `Some`: we hold the lease, and the document is as we wrote it;
    /// `None`: someone else claimed first (E11000, or another owner in the
    /// result).
    ///
    /// `Err` is ambiguous (a write-concern error, a timeout or a lost reply
    /// may hide a claim that was applied): the caller reads the document
    /// again before deciding (`follower.rs`).
    pub async fn claim(
        &self,
        owner: &str,
        now: DateTime,
        seen: Option<&JobRecord>,
    ) -> mongodb::error::Result<Option<JobRecord>> {
        let mut filter = doc! { "_id": &self.opts.job };
        let absent = Bson::Document(doc! { "$exists": false });
        for field in JUDGED_FIELDS {
            let value = seen.and_then(|record| record.document.get(field));
            filter.insert(field, value.unwrap_or(&absent).clone());
        }
        // The state is pinned; its liveness is checked here too, so no
        // caller's misjudgement can take a live lease.
        let expired = match seen.map(JobRecord::holder) {
            Some(Holder::LibreChat) => doc! {
                "expiresAt": { "$lte": clock::earlier(now, self.opts.librechat_clock_skew) }
            },
            _ => doc! { "leaseExpiresAt": { "$lte": now } },
        };
        let not_held = doc! { "status": { "$ne": "running" }, "following": { "$ne": true } };
        filter.insert("$or", vec![not_held, expired]);
        let lease_expires_at = clock::later(now, self.opts.ttl);
        let expires_at = clock::later(lease_expires_at, self.opts.librechat_clock_skew);
        let claim = vec![doc! { "$set": {
            "owner": { "$literal": owner },
            "status": "running",
            "epoch": { "$add": [ { "$ifNull": ["$epoch", 0_i64] }, 1_i64 ] },
            "claimedAt": now,
            "renewedAt": now,
            "leaseExpiresAt": lease_expires_at,
            "expiresAt": expires_at,
            "writtenExpiresAt": expires_at,
            "updatedAt": now,
            "progress": Bson::Null,
            "following": false,
            "releasedFor": Bson::Null,
            "handoverRequestedBy": Bson::Null,
            "handoverRequestedAt": Bson::Null,
        } }];
        let claiming = self.jobs.find_one_and_update(filter, claim).upsert(true);
        let result = claiming.return_document(ReturnDocument::After).await;
        match result {
            Ok(Some(doc)) if doc.get_str("owner").ok() == Some(owner) => {
                Ok(Some(JobRecord::from_document(&doc)))
            }
            // Another owner in the document. Upsert always returns the
            // document; be defensive anyway.
            Ok(_) => Ok(None),
            Err(error) if error_code(&error) == Some(DUPLICATE_KEY) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Extends the lease to `now + ttl` and records `progress`. `Ok(false)`:
    /// the fence matched nothing (the lease is lost). `Err` is ambiguous: the
    /// renewal may or may not have been applied.
    pub async fn renew(&self, fence: &Fence, now: DateTime, progress: &ProgressSnapshot) -> Answer {
        let lease_expires_at = clock::later(now, self.opts.ttl);
        let expires_at = clock::later(lease_expires_at, self.opts.librechat_clock_skew);
        let update = doc! { "$set": {
            "renewedAt": now,
            "leaseExpiresAt": lease_expires_at,
            "expiresAt": expires_at,
            "writtenExpiresAt": expires_at,
            "updatedAt": now,
            "progress": progress_bson(progress),
        } };
        self.fenced_update(fence, now, update, None).await
    }

    /// Ends the run as `end` says, no longer following. `Ok(false)`: the
    /// lease is lost.
    pub async fn end(&self, fence: &Fence, now: DateTime, end: RunEnd<'_>) -> Answer {
        let skew = self.opts.librechat_clock_skew;
        let (to, mut set, expires_at) = match end {
            RunEnd::Completed(summary, progress) => {
                let set = doc! {
                    "completedAt": now,
                    "summary": summary_bson(summary),
                    "progress": progress_bson(progress),
                    "attempt": 0_i32,
                };
                let visible_until = clock::later(now, self.opts.reuse_completion_for);
                (
                    JobStatus::Completed,
                    set,
                    Some(clock::later(visible_until, skew)),
                )
            }
            RunEnd::Failed(error, attempt, retry_at) => {
                let set = doc! {
                    "failedAt": now,
                    "error": error,
                    "attempt": i64::from(attempt),
                    "retryAt": retry_at,
                };
                (JobStatus::Failed, set, Some(clock::later(retry_at, skew)))
            }
            RunEnd::Released(progress, to) => {
                let to = to.map_or(Bson::Null, |to| Bson::String(to.to_string()));
                let set = doc! { "releasedFor": to, "releasedAt": now, "progress": progress_bson(progress) };
                (JobStatus::Released, set, None)
            }
        };
        let status = bson::to_bson(&to).expect("a run's end serializes");
        set.extend(doc! { "status": status, "following": false, "updatedAt": now });
        if let Some(expires_at) = expires_at {
            set.extend(doc! { "expiresAt": expires_at, "writtenExpiresAt": expires_at });
        }
        let mut update = doc! { "$set": set };
        if to == JobStatus::Completed {
            update.insert("$unset", doc! { "error": "", "retryAt": "" });
        }
        self.fenced_update(fence, now, update, Some(to)).await
    }

    /// Whether the document shows `status` under `fence` (owner and epoch),
    /// and no longer held, read with the lease's read concern.
    pub(crate) async fn shows(&self, fence: &Fence, status: &JobStatus) -> Answer {
        Ok(self.read().await?.is_some_and(|record| {
            record.holder() == Holder::Reconciler
                && record.owner.as_deref() == Some(fence.owner.as_str())
                && record.epoch == Some(fence.epoch)
                && &record.status == status
                && !record.following
        }))
    }

    /// Whether the document still shows the lease held under `fence`.
    pub(crate) async fn still_held(&self, fence: &Fence) -> Answer {
        let record = self.read().await?;
        Ok(record.is_some_and(|record| record.is_held_under(fence)))
    }

    /// The run's work is done (`summary`; `None` when a fresh completion by
    /// someone else was relied on) and the owner keeps the lease
    /// (`following`). `status` reads `completed`, so LibreChat's waiters are
    /// done; `following` keeps it ours. Written again with each of the
    /// owner's later completions (its periodic reconciliations).
    pub(crate) async fn hold_after_completion(
        &self,
        fence: &Fence,
        now: DateTime,
        summary: Option<&serde_json::Value>,
    ) -> Answer {
        let mut set = doc! {
            "status": "completed",
            "following": true,
            "attempt": 0_i32,
            "updatedAt": now,
        };
        if let Some(summary) = summary {
            set.insert("completedAt", now);
            set.insert("summary", summary_bson(summary));
        }
        let update = doc! { "$set": set, "$unset": { "error": "", "retryAt": "" } };
        self.fenced_update(fence, now, update, None).await
    }

    /// The job's own write: `update` (update operators over the job's
    /// fields only) applied under the fence where the document also matches
    /// `condition` (over the job's fields only; empty: always). `Ok(true)`:
    /// the lease is still held (the update applied, or `condition` did not
    /// match); `Ok(false)`: the lease is lost.
    ///
    /// # Panics
    ///
    /// When `update` or `condition` names a lease field ([`LEASE_FIELDS`]),
    /// or `condition` an operator: the fence and the lease's own fields are
    /// not the job's to change.
    pub(crate) async fn update_job_fields(
        &self,
        fence: &Fence,
        now: DateTime,
        condition: Document,
        update: Document,
    ) -> Answer {
        for (operator, fields) in &update {
            let operates = operator.starts_with('$');
            assert!(operates, "not an update operator: {operator}");
            let Bson::Document(fields) = fields else {
                panic!("{operator} takes a document of fields");
            };
            fields.keys().for_each(|field| assert_job_field(field));
        }
        for field in condition.keys() {
            let named = !field.starts_with('$');
            assert!(named, "a condition names fields only: {field}");
            assert_job_field(field);
        }
        let unconditional = condition.is_empty();
        let mut filter = self.fence_filter(fence, now);
        filter.extend(condition);
        if self.jobs.update_one(filter, update).await?.matched_count == 1 {
            return Ok(true);
        }
        // The condition did not hold, or the lease is gone: which?
        Ok(!unconditional && self.still_held(fence).await?)
    }

    /// A replica that needs the lease (`once`, `reindex`) asks the owner
    /// that keeps it after completing (`following`) to hand it over. Not fenced (the asker holds
    /// nothing) and touching only the two request fields; matches only a
    /// following lease. `Ok(false)`: there was none to ask.
    pub(crate) async fn request_handover(&self, requester: &str, now: DateTime) -> Answer {
        let filter = doc! { "_id": &self.opts.job, "following": true };
        let update = doc! { "$set": {
            "handoverRequestedBy": requester,
            "handoverRequestedAt": now,
        } };
        Ok(self.jobs.update_one(filter, update).await?.matched_count == 1)
    }

    /// The one fence every owner write goes through. Matching nothing is a
    /// loss, unless the write ends the run in `to` and the document already
    /// shows `to` under our fence: an earlier attempt whose reply was lost
    /// may have landed.
    async fn fenced_update(
        &self,
        fence: &Fence,
        now: DateTime,
        update: Document,
        to: Option<JobStatus>,
    ) -> Answer {
        let filter = self.fence_filter(fence, now);
        if self.jobs.update_one(filter, update).await?.matched_count == 1 {
            return Ok(true);
        }
        let Some(to) = to else { return Ok(false) };
        self.shows(fence, &to).await
    }

    /// The lease document as long as `fence` holds it at `now`.
    fn fence_filter(&self, fence: &Fence, now: DateTime) -> Document {
        doc! {
            "_id": &self.opts.job,
            "owner": &fence.owner,
            "epoch": fence.epoch,
            "leaseExpiresAt": { "$gt": now },
            "$or": [ { "status": "running" }, { "following": true } ],
        }
    }
}

/// Panics when `path` (dotted) lies in a lease field.
fn assert_job_field(path: &str) {
    let top = path.split('.').next().unwrap_or(path);
    let leased = LEASE_FIELDS.split_whitespace().any(|field| field == top);
    assert!(!leased, "{path} is a lease field, not the job's");
}

fn summary_bson(summary: &serde_json::Value) -> Bson {
    bson::to_bson(summary).unwrap_or_else(|e| Bson::String(e.to_string()))
}

fn progress_bson(progress: &ProgressSnapshot) -> Bson {
    bson::to_bson(progress).unwrap_or(Bson::Null)
}

/// A yes or no from MongoDB; for a fenced write, `Ok(false)`: the fence
/// matched nothing.
type Answer = mongodb::error::Result<bool>;

/// E11000: the upsert's insert collided with an existing `_id`.
const DUPLICATE_KEY: i32 = 11000;

/// The code a server error carries, if it is one.
pub(super) fn error_code(error: &mongodb::error::Error) -> Option<i32> {
    match &*error.kind {
        ErrorKind::Command(command) => Some(command.code),
        ErrorKind::Write(WriteFailure::WriteError(write)) => Some(write.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_writes_its_own_fields_only() {
        assert_job_field("followToken");
        assert_job_field("followOrphanChecks.messages");
        for lease_field in ["owner", "epoch", "leaseExpiresAt", "summary.indexed"] {
            let wrote = std::panic::catch_unwind(|| assert_job_field(lease_field));
            assert!(wrote.is_err(), "{lease_field} is the lease's");
        }
    }

    #[test]
    fn reads_documents_leniently() {
        let at = DateTime::from_millis(1_000);
        let record = JobRecord::from_document(&doc! {
            "_id": "job", "owner": "a", "epoch": 3_i32, "status": "failed",
            "expiresAt": 1_000_i64, "writtenExpiresAt": at, "retryAt": at, "attempt": 2.0,
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
        assert_eq!(record.holder(), Holder::Reconciler);
        assert!(!record.is_live(DateTime::from_millis(0), Duration::ZERO));
    }

    #[test]
    fn a_document_librechat_wrote_last_is_theirs_until_expires_at_plus_skew() {
        let ours = DateTime::from_millis(5_000);
        let theirs = DateTime::from_millis(9_000);
        let skew = Duration::from_secs(2);
        let record = JobRecord::from_document(&doc! {
            "status": "running", "owner": "uuid", "epoch": 4_i64,
            "leaseExpiresAt": DateTime::from_millis(3_000),
            "expiresAt": theirs, "writtenExpiresAt": ours,
        });
        assert_eq!(record.holder(), Holder::LibreChat);
        assert_eq!(
            record.holds_until(skew),
            Some(DateTime::from_millis(11_000))
        );
        assert!(record.is_live(DateTime::from_millis(10_999), skew));
        assert!(!record.is_live(DateTime::from_millis(11_000), skew));
        assert!(!record.is_running_for("uuid"));

        // LibreChat's very first claim: no copy of ours at all.
        let fresh = JobRecord::from_document(&doc! { "status": "running", "expiresAt": theirs });
        assert_eq!(fresh.holder(), Holder::LibreChat);

        let mine = JobRecord::from_document(&doc! {
            "status": "running", "owner": "me", "epoch": 1_i64,
            "leaseExpiresAt": DateTime::from_millis(3_000),
            "expiresAt": ours, "writtenExpiresAt": ours,
        });
        assert_eq!(mine.holder(), Holder::Reconciler);
        assert_eq!(mine.holds_until(skew), Some(DateTime::from_millis(3_000)));
        assert!(mine.is_running_for("me"));
    }
}
