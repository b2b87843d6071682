//! A protocol double of LibreChat's own `runDistributedJob` (LibreChat's
//! `packages/api/src/cluster/DistributedJob.ts`), written from its
//! description of its protocol (docs/design.md §5.10), for the mixed-fleet tests. It claims the same
//! `distributedJobs` document this service does, with LibreChat's rules:
//!
//! - every time is the replica's own clock (here: the local clock plus
//!   `clock_offset`), never MongoDB's;
//! - claim: `findOneAndUpdate` with upsert, filter `{ _id, $or: [{ expiresAt:
//!   { $lte: now } }, { expiresAt: { $exists: false } }] }` — the status is not
//!   looked at — setting `status: running`, `owner`, `expiresAt = now + lease`,
//!   `updatedAt`; E11000 or another owner in the result: not claimed;
//! - a waiter reads the document every `poll`; `completed` with `expiresAt >
//!   now` is done, anything else means trying the claim again;
//! - refresh every `refresh`: `updateOne` fenced by `{ _id, status: running,
//!   owner, expiresAt: { $gt: now } }`; no match: the lease is lost; a
//!   watchdog declares it lost `safety` before its own `expiresAt`;
//! - completion / failure: the same fence, `status` completed (`expiresAt =
//!   now + completion_ttl`) or failed (`now + failure_ttl`), `$unset owner`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongodb::bson::{doc, DateTime, Document};
use mongodb::error::ErrorKind;
use mongodb::options::ReturnDocument;
use mongodb::Collection;

/// LibreChat's timings, scaled down for tests (its defaults: lease 30 min,
/// refresh 60 s, completion 10 min, failure 30 s, poll 2 s, safety 5 s).
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub lease: Duration,
    pub refresh: Duration,
    pub completion_ttl: Duration,
    pub failure_ttl: Duration,
    pub poll: Duration,
    pub safety: Duration,
}

impl Timings {
    /// LibreChat's proportions at test speed; a refresh has the suite's
    /// headroom (`support::timing`) to land before the watchdog fires.
    pub fn fast() -> Self {
        let refresh = Duration::from_millis(400);
        let safety = Duration::from_millis(300);
        Timings {
            lease: refresh + safety + super::timing::headroom(),
            refresh,
            completion_ttl: Duration::from_millis(1_000),
            failure_ttl: Duration::from_millis(300),
            poll: Duration::from_millis(100),
            safety,
        }
    }
}

/// One LibreChat replica's view of the job.
#[derive(Clone)]
pub struct LibreChatReplica {
    pub jobs: Collection<Document>,
    pub job: String,
    /// `crypto.randomUUID()`, as LibreChat names its owners.
    pub owner: String,
    /// Milliseconds this replica's clock is ahead of the real one.
    pub clock_offset_ms: i64,
    pub timings: Timings,
}

/// How one `runDistributedJob` call ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ended {
    /// We claimed and ran the handler; `lost` when a refresh, the watchdog
    /// or the final write found the lease gone.
    Ran { completed: bool, lost: bool },
    /// A waiter saw `completed` with `expiresAt > now`: this document.
    Done(Document),
}

impl LibreChatReplica {
    pub fn new(jobs: Collection<Document>, job: &str, clock_offset_ms: i64) -> Self {
        LibreChatReplica {
            jobs,
            job: job.to_string(),
            owner: uuid::Uuid::new_v4().to_string(),
            clock_offset_ms,
            timings: Timings::fast(),
        }
    }

    /// This replica's clock.
    pub fn now(&self) -> DateTime {
        DateTime::from_millis(DateTime::now().timestamp_millis() + self.clock_offset_ms)
    }

    fn later(&self, at: DateTime, by: Duration) -> DateTime {
        DateTime::from_millis(at.timestamp_millis() + by.as_millis() as i64)
    }

    /// The claim; `Some(expiresAt)` when we hold the lease.
    async fn try_acquire(&self) -> mongodb::error::Result<Option<DateTime>> {
        let now = self.now();
        let filter = doc! {
            "_id": &self.job,
            "$or": [ { "expiresAt": { "$lte": now } }, { "expiresAt": { "$exists": false } } ],
        };
        let update = doc! { "$set": {
            "status": "running",
            "owner": &self.owner,
            "expiresAt": self.later(now, self.timings.lease),
            "updatedAt": now,
        } };
        match self
            .jobs
            .find_one_and_update(filter, update)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await
        {
            Ok(Some(state)) if state.get_str("owner").ok() == Some(self.owner.as_str()) => {
                Ok(state.get_datetime("expiresAt").ok().copied())
            }
            Ok(_) => Ok(None),
            Err(e) if matches!(&*e.kind, ErrorKind::Command(c) if c.code == 11000) => Ok(None),
            Err(e) if matches!(&*e.kind, ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) if w.code == 11000) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The fenced write of a refresh, completion or failure.
    async fn fenced(&self, update: Document) -> mongodb::error::Result<bool> {
        let now = self.now();
        let filter = doc! { "_id": &self.job, "status": "running", "owner": &self.owner, "expiresAt": { "$gt": now } };
        Ok(self.jobs.update_one(filter, update).await?.matched_count == 1)
    }

    /// `runDistributedJob(jobs, job, handler)`: waits or claims, then runs
    /// `handler` under refreshes and records how it ended.
    pub async fn run<F, Fut>(&self, handler: F) -> mongodb::error::Result<Ended>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let expires_at = loop {
            if let Some(at) = self.try_acquire().await? {
                break at;
            }
            let state = self.jobs.find_one(doc! { "_id": &self.job }).await?;
            if let Some(state) = state {
                let done = state.get_str("status").ok() == Some("completed")
                    && state
                        .get_datetime("expiresAt")
                        .is_ok_and(|at| *at > self.now());
                if done {
                    return Ok(Ended::Done(state));
                }
            }
            tokio::time::sleep(self.timings.poll).await;
        };

        let lost = Arc::new(AtomicBool::new(false));
        let stop = tokio_util::sync::CancellationToken::new();
        let refresher = {
            let me = self.clone();
            let lost = lost.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut expires_at = expires_at;
                loop {
                    // The watchdog: lost `safety` before our own expiresAt.
                    let watchdog = (expires_at.timestamp_millis()
                        - me.now().timestamp_millis()
                        - me.timings.safety.as_millis() as i64)
                        .max(0) as u64;
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(watchdog)) => {
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        _ = tokio::time::sleep(me.timings.refresh) => {}
                    }
                    let now = me.now();
                    let next = me.later(now, me.timings.lease);
                    match me
                        .fenced(doc! { "$set": { "expiresAt": next, "updatedAt": now } })
                        .await
                    {
                        Ok(true) => expires_at = next,
                        Ok(false) => {
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        Err(_) => {} // LibreChat logs and tries again next time
                    }
                }
            })
        };

        let ok = handler().await;
        stop.cancel();
        let _ = refresher.await;
        let now = self.now();
        let (status, ttl) = if ok {
            ("completed", self.timings.completion_ttl)
        } else {
            ("failed", self.timings.failure_ttl)
        };
        let written = self
            .fenced(doc! {
                "$set": { "status": status, "expiresAt": self.later(now, ttl), "updatedAt": now },
                "$unset": { "owner": "" },
            })
            .await?;
        Ok(Ended::Ran {
            completed: ok && written,
            lost: lost.load(Ordering::SeqCst) || !written,
        })
    }
}
