//! Waiting for our turn: the follower side of the lease (DESIGN.md §4).
//!
//! Each poll costs one server-clock read and one read of the job document.
//! The first poll's server time is when we *started waiting*. Then:
//!
//! | document | verdict |
//! |---|---|
//! | absent | claim |
//! | `running`, `expiresAt > now` | wait |
//! | `running`, expired | claim (takeover) |
//! | `released` (or unknown status) | claim |
//! | `completed` at or after `wait start - reuse_completion_for` | done (not when forced) |
//! | `completed` from a run claimed after our wait start | done (also when forced) |
//! | `completed`, older | claim |
//! | `failed`, `retryAt > now` | wait (claim when forced) |
//! | `failed`, `retryAt <= now` | claim (retry) |
//!
//! A claim reuses the poll's server time (one round trip early: the safe
//! side) and is a compare-and-swap on the epoch just read (`store.rs`), so
//! losing the race just means polling again. Sleeps are jittered within
//! `[½, 1] × poll_every`, so a released lease is claimed within one period.

use std::time::{Duration, Instant};

use mongodb::bson::DateTime;
use rand::Rng;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::clock;
use super::options::LeaseOptions;
use super::outcome::{LeaseError, Outcome};
use super::retry;
use super::store::{ClaimResult, Fence, JobRecord, JobStatus, JobStore};

/// How often a waiting follower logs the owner's progress at info level.
const PROGRESS_LOG_EVERY: Duration = Duration::from_secs(30);

/// What the follower decided, given the document and the server time.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict {
    Done(Outcome),
    Wait,
    Claim,
}

/// The lease rules for a waiting replica, as a pure function (table above).
pub(crate) fn judge(
    record: Option<&JobRecord>,
    now: DateTime,
    wait_started: DateTime,
    opts: &LeaseOptions,
) -> Verdict {
    let Some(record) = record else {
        return Verdict::Claim;
    };
    match record.status {
        JobStatus::Running if record.is_live(now) => Verdict::Wait,
        JobStatus::Running | JobStatus::Released | JobStatus::Other(_) => Verdict::Claim,
        JobStatus::Failed => match record.retry_at {
            Some(retry_at) if retry_at > now && !opts.force => Verdict::Wait,
            _ => Verdict::Claim,
        },
        JobStatus::Completed => {
            let Some(completed_at) = record.completed_at else {
                return Verdict::Claim;
            };
            let done = |age: Option<Duration>| {
                let (owner, epoch, summary) =
                    (record.owner.clone(), record.epoch, record.summary.clone());
                Verdict::Done(match age {
                    None => Outcome::CompletedByOther {
                        owner,
                        epoch,
                        summary,
                    },
                    Some(age) => Outcome::ReusedCompletion {
                        owner,
                        epoch,
                        age,
                        summary,
                    },
                })
            };
            if opts.force {
                // Only a run that began after we were asked satisfies --force.
                match record.claimed_at {
                    Some(claimed_at) if claimed_at >= wait_started => done(None),
                    _ => Verdict::Claim,
                }
            } else if completed_at >= wait_started {
                done(None)
            } else if completed_at > clock::earlier(wait_started, opts.reuse_completion_for) {
                done(Some(now.saturating_duration_since(completed_at)))
            } else {
                Verdict::Claim
            }
        }
    }
}

/// A lease we just claimed.
#[derive(Clone, Debug)]
pub(crate) struct Claimed {
    pub fence: Fence,
    pub record: JobRecord,
    /// Local time before the server-clock read the claim used: the owner's
    /// safety deadline counts from here.
    pub sent_at: Instant,
}

/// Where waiting ended.
pub(crate) enum Turn {
    Finished(Outcome),
    Claimed(Box<Claimed>),
}

/// Polls until the job is done for us or we hold the lease.
pub(crate) async fn wait_for_turn(
    store: &JobStore,
    opts: &LeaseOptions,
    shutdown: &CancellationToken,
) -> Result<Turn, LeaseError> {
    let began = Instant::now();
    let give_up_at = opts.wait_timeout.map(|wait| began + wait);
    let mut wait_started = None;
    let mut unreachable_since: Option<Instant> = None;
    let mut error_delays = retry::delays(opts.poll_every);
    let mut watch = OwnerWatch::default();

    loop {
        if shutdown.is_cancelled() {
            return Err(LeaseError::ShutDown { released: false });
        }
        if give_up_at.is_some_and(|at| Instant::now() >= at) {
            return Err(LeaseError::WaitTimedOut {
                waited: began.elapsed(),
                owner: watch.owner(),
            });
        }

        let sent_at = Instant::now();
        let poll = async {
            let now = store.server_now().await?;
            let record = store.read().await?;
            Ok::<_, mongodb::error::Error>((now, record))
        };
        // Reads are safe to abandon on shutdown or timeout.
        let polled = tokio::select! {
            polled = poll => polled,
            _ = shutdown.cancelled() => continue,
            _ = sleep_until_opt(give_up_at) => continue,
        };
        let (now, record) = match polled {
            Ok(polled) => polled,
            Err(error) => {
                unreachable(opts, &mut unreachable_since, &error)?;
                pause(next_delay(&mut error_delays), shutdown, give_up_at).await;
                continue;
            }
        };
        unreachable_since = None;
        let wait_started = *wait_started.get_or_insert(now);

        match judge(record.as_ref(), now, wait_started, opts) {
            Verdict::Done(outcome) => {
                log_done(opts, &outcome);
                return Ok(Turn::Finished(outcome));
            }
            Verdict::Wait => {
                if let Some(record) = &record {
                    watch.observe(opts, record, now);
                }
                pause(jittered(opts.poll_every), shutdown, give_up_at).await;
            }
            Verdict::Claim => {
                // Not raced against shutdown: a claim we sent must be
                // answered, or we could walk away from a lease we hold.
                let seen_epoch = record.as_ref().and_then(|r| r.epoch);
                match store.claim(&opts.owner, now, seen_epoch).await {
                    Ok(ClaimResult::Won(claimed)) => {
                        let claimed = *claimed;
                        log_claim(opts, record.as_ref(), &claimed, now);
                        let epoch = claimed.epoch.unwrap_or_default();
                        return Ok(Turn::Claimed(Box::new(Claimed {
                            fence: Fence {
                                owner: opts.owner.clone(),
                                epoch,
                            },
                            record: claimed,
                            sent_at,
                        })));
                    }
                    Ok(ClaimResult::Lost) => {
                        debug!(job = %opts.job, owner = %opts.owner, "another replica claimed first; following");
                    }
                    Err(error) => {
                        unreachable(opts, &mut unreachable_since, &error)?;
                        pause(next_delay(&mut error_delays), shutdown, give_up_at).await;
                    }
                }
            }
        }
    }
}

/// Tracks consecutive MongoDB errors; gives up past `unreachable_timeout`.
fn unreachable(
    opts: &LeaseOptions,
    since: &mut Option<Instant>,
    error: &mongodb::error::Error,
) -> Result<(), LeaseError> {
    let since = *since.get_or_insert_with(Instant::now);
    if since.elapsed() >= opts.unreachable_timeout {
        return Err(LeaseError::MongoUnavailable(error.to_string()));
    }
    warn!(job = %opts.job, owner = %opts.owner, %error, "cannot read the lease; retrying");
    Ok(())
}

fn next_delay(delays: &mut impl Iterator<Item = Duration>) -> Duration {
    delays.next().unwrap_or(Duration::from_secs(1))
}

/// A sleep within `[½, 1] × period`, so replicas do not poll in lockstep.
fn jittered(period: Duration) -> Duration {
    period.mul_f64(rand::rng().random_range(0.5..=1.0))
}

/// Sleeps for `delay`, waking early on shutdown or when the wait times out.
async fn pause(delay: Duration, shutdown: &CancellationToken, give_up_at: Option<Instant>) {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = shutdown.cancelled() => {}
        _ = sleep_until_opt(give_up_at) => {}
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Logs the owner we wait for when it changes, and its progress now and then.
#[derive(Default)]
struct OwnerWatch {
    seen: Option<(Option<String>, Option<i64>, JobStatus)>,
    last_logged: Option<Instant>,
}

impl OwnerWatch {
    fn observe(&mut self, opts: &LeaseOptions, record: &JobRecord, now: DateTime) {
        let key = (record.owner.clone(), record.epoch, record.status.clone());
        let changed = self.seen.as_ref() != Some(&key);
        let due = self
            .last_logged
            .is_none_or(|at| at.elapsed() >= PROGRESS_LOG_EVERY);
        let expires_in_ms = record.expires_at.map(|at| clock::millis_between(now, at));
        let phase = record.progress.as_ref().map(|p| p.phase.as_str());
        let done = record.progress.as_ref().map(|p| p.done);
        let total = record.progress.as_ref().map(|p| p.total);
        if changed || due {
            info!(job = %opts.job, me = %opts.owner, owner = ?record.owner, epoch = ?record.epoch,
                status = ?record.status, ?expires_in_ms, ?phase, ?done, ?total, retry_at = ?record.retry_at,
                "waiting: another replica holds the job");
            self.last_logged = Some(Instant::now());
        } else {
            debug!(job = %opts.job, owner = ?record.owner, epoch = ?record.epoch, ?expires_in_ms, "still waiting");
        }
        self.seen = Some(key);
    }

    fn owner(&self) -> Option<String> {
        self.seen.as_ref().and_then(|(owner, _, _)| owner.clone())
    }
}

fn log_done(opts: &LeaseOptions, outcome: &Outcome) {
    match outcome {
        Outcome::CompletedByOther { owner, epoch, .. } => {
            info!(job = %opts.job, me = %opts.owner, owner = owner.as_deref().unwrap_or("-"),
                epoch = epoch.unwrap_or(0), "another replica completed the job");
        }
        Outcome::ReusedCompletion {
            owner, epoch, age, ..
        } => {
            info!(job = %opts.job, me = %opts.owner, owner = owner.as_deref().unwrap_or("-"),
                epoch = epoch.unwrap_or(0), age_ms = age.as_millis() as u64,
                "a fresh completion exists; not running again");
        }
        Outcome::Ran { .. } => {}
    }
}

fn log_claim(opts: &LeaseOptions, before: Option<&JobRecord>, claimed: &JobRecord, now: DateTime) {
    // A claimed record always has an epoch; 0 would only show a corrupt one.
    let epoch = claimed.epoch.unwrap_or(0);
    let takeover = before.is_some_and(|previous| previous.status == JobStatus::Running);
    crate::metrics::lease_claimed(takeover);
    match before {
        Some(previous) if previous.status == JobStatus::Running => {
            let expired_for_ms = previous.expires_at.map(|at| clock::millis_between(at, now));
            warn!(job = %opts.job, owner = %opts.owner, epoch, previous_owner = ?previous.owner,
                previous_epoch = ?previous.epoch, ?expired_for_ms, "took over an expired lease");
        }
        Some(previous) => {
            info!(job = %opts.job, owner = %opts.owner, epoch, previous_owner = ?previous.owner,
                previous_status = ?previous.status, attempt = previous.attempt, "claimed the lease");
        }
        None => {
            info!(job = %opts.job, owner = %opts.owner, epoch, "claimed the lease (first run)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::store::JobRecord;

    fn at(secs: i64) -> DateTime {
        DateTime::from_millis(secs * 1000)
    }

    fn record(status: JobStatus) -> JobRecord {
        JobRecord {
            owner: Some("other".into()),
            epoch: Some(4),
            status,
            claimed_at: Some(at(100)),
            renewed_at: None,
            expires_at: Some(at(200)),
            completed_at: None,
            failed_at: None,
            released_at: None,
            error: None,
            attempt: 0,
            retry_at: None,
            progress: None,
            summary: None,
        }
    }

    #[test]
    fn running_waits_until_expiry_then_claims() {
        let opts = LeaseOptions::new("me");
        let running = record(JobStatus::Running);
        assert_eq!(
            judge(Some(&running), at(199), at(150), &opts),
            Verdict::Wait
        );
        assert_eq!(
            judge(Some(&running), at(200), at(150), &opts),
            Verdict::Claim
        );
        assert_eq!(judge(None, at(1), at(1), &opts), Verdict::Claim);
        let mut forced = opts.clone();
        forced.force = true;
        assert_eq!(
            judge(Some(&running), at(199), at(150), &forced),
            Verdict::Wait
        );
    }

    #[test]
    fn failed_waits_for_retry_at_unless_forced() {
        let mut opts = LeaseOptions::new("me");
        let mut failed = record(JobStatus::Failed);
        failed.retry_at = Some(at(300));
        assert_eq!(judge(Some(&failed), at(299), at(250), &opts), Verdict::Wait);
        assert_eq!(
            judge(Some(&failed), at(300), at(250), &opts),
            Verdict::Claim
        );
        opts.force = true;
        assert_eq!(
            judge(Some(&failed), at(299), at(250), &opts),
            Verdict::Claim
        );
    }

    #[test]
    fn completions_satisfy_by_age_and_force() {
        let opts = LeaseOptions::new("me"); // reuse 60 s
        let mut completed = record(JobStatus::Completed);
        completed.completed_at = Some(at(1000));
        // Completed while we waited.
        assert!(matches!(
            judge(Some(&completed), at(1001), at(900), &opts),
            Verdict::Done(Outcome::CompletedByOther { .. })
        ));
        // Fresh when we started.
        assert!(matches!(
            judge(Some(&completed), at(1030), at(1030), &opts),
            Verdict::Done(Outcome::ReusedCompletion { .. })
        ));
        // Stale when we started.
        assert_eq!(
            judge(Some(&completed), at(1061), at(1061), &opts),
            Verdict::Claim
        );
        // Forced: only a run claimed after we started waiting counts.
        let mut forced = opts.clone();
        forced.force = true;
        assert_eq!(
            judge(Some(&completed), at(1001), at(900), &forced),
            Verdict::Claim
        );
        assert!(matches!(
            judge(Some(&completed), at(1001), at(99), &forced),
            Verdict::Done(Outcome::CompletedByOther { .. })
        ));
    }
}
