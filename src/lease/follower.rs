//! Waiting for our turn: the follower side of the lease (docs/design.md,
//! "The lease").
//!
//! Each poll costs one server-clock read and one read of the job document.
//! The first poll's server time is when we *started waiting*. Then, for a
//! document our protocol wrote last:
//!
//! | document | verdict |
//! |---|---|
//! | absent | claim |
//! | held (`running`, or following) under our own owner id, unexpired | adopt (a claim of ours whose reply was lost) |
//! | following, unexpired, its last run satisfies us (the `completed` rows) | done |
//! | following, unexpired, we need the lease (`request_handover`) | ask for a handover, wait |
//! | `running` or following, `leaseExpiresAt > now` | wait |
//! | `released` for another replica that asked for it, within the handover grace | wait |
//! | `running`, expired | claim (takeover) |
//! | `released` (or unknown status) | claim |
//! | `completed` at or after `wait start - reuse_completion_for` | done (not when forced) |
//! | `completed` from a run claimed after our wait start | done (also when forced; never with `own_run_only`) |
//! | `completed`, older | claim |
//! | `failed`, `retryAt > now` | wait (claim when forced) |
//! | `failed`, `retryAt <= now` | claim (retry) |
//!
//! and for one LibreChat's `runDistributedJob` wrote last (see
//! [`super::store::Holder`]):
//!
//! | document | verdict |
//! |---|---|
//! | `running`, `expiresAt + librechat_clock_skew > now` | wait (a LibreChat replica holds it) |
//! | anything else (`completed`, `failed`, expired) | claim: LibreChat's marks are never a reconciliation |
//!
//! A claim reuses the poll's server time (one round trip early: the safe
//! side) and is a compare-and-swap on the state just judged (`store.rs`), so
//! losing the race just means polling again. A claim whose answer is an
//! error, or a loss, is followed at once by another poll: a claim that was
//! applied although its reply was lost (or a driver retry then collided with
//! it) shows our owner id and is adopted — with a local deadline computed
//! from the document's `leaseExpiresAt`, not from when we sent the claim. A
//! follower that gives up (timeout, shutdown) after such a claim releases it
//! if it finds it, rather than leaving it to expire.
//!
//! Sleeps are jittered within `[½, 1] × poll_every`, so a released lease is
//! claimed within one period.

use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use mongodb::bson::DateTime;
use mongodb::error::Error as MongoError;
use rand::Rng;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::clock;
use super::options::LeaseOptions;
use super::outcome::{LeaseError, Outcome};
use super::store::{error_code, Fence, Holder, JobRecord, JobStatus, JobStore, RunEnd};

/// How often a waiting follower logs the owner's progress at info level.
const PROGRESS_LOG_EVERY: Duration = Duration::from_secs(30);

/// What the follower decided, given the document and the server time. `T`
/// is the job's output, which `Done` never carries (it is never `Ran`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict<T> {
    Done(Outcome<T>),
    Wait,
    Claim,
    /// The document shows our own running lease (a claim whose reply we lost).
    Adopt,
    /// An owner that keeps it after completing holds it: ask it to hand it over
    /// (`request_handover`), then wait.
    RequestHandover,
}

/// The lease rules for a waiting replica, as a pure function (tables above).
pub(crate) fn judge<T>(
    record: Option<&JobRecord>,
    now: DateTime,
    wait_started: DateTime,
    opts: &LeaseOptions,
) -> Verdict<T> {
    let Some(record) = record else {
        return Verdict::Claim;
    };
    let live = record.is_live(now, opts.librechat_clock_skew);
    if record.holder() == Holder::LibreChat {
        return if live { Verdict::Wait } else { Verdict::Claim };
    }
    if live && record.is_running_for(&opts.owner) {
        return Verdict::Adopt;
    }
    if live {
        // An owner that keeps the lease after completing has run, and its
        // job goes on: its recorded run counts like a completion.
        if record.following {
            if let Some(done) = completion_satisfies(record, now, wait_started, opts) {
                return done;
            }
            if opts.request_handover {
                return Verdict::RequestHandover;
            }
        }
        return Verdict::Wait;
    }
    match record.status {
        JobStatus::Released if released_for_another(record, now, opts) => Verdict::Wait,
        JobStatus::Running | JobStatus::Released | JobStatus::Other(_) => Verdict::Claim,
        JobStatus::Failed => match record.retry_at {
            Some(retry_at) if retry_at > now && !opts.force => Verdict::Wait,
            _ => Verdict::Claim,
        },
        JobStatus::Completed => {
            completion_satisfies(record, now, wait_started, opts).unwrap_or(Verdict::Claim)
        }
    }
}

/// Released for another replica that asked for it, recently enough that it
/// is still coming to claim it.
fn released_for_another(record: &JobRecord, now: DateTime, opts: &LeaseOptions) -> bool {
    let to = record.released_for.as_deref();
    let for_another = to.is_some_and(|to| to != opts.owner);
    // How long a lease released for the replica that asked for it (a
    // handover) is left to that replica before anyone may claim it.
    let grace = (opts.poll_every * 5).max(Duration::from_secs(1));
    let since = clock::earlier(now, grace);
    let recent = record.released_at.is_some_and(|at| at > since);
    for_another && recent
}

/// `Done` when our last recorded run satisfies this follower (the
/// `completed` rows of the table above), else `None`.
fn completion_satisfies<T>(
    record: &JobRecord,
    now: DateTime,
    wait_started: DateTime,
    opts: &LeaseOptions,
) -> Option<Verdict<T>> {
    let completed_at = record.completed_at?;
    let done = |age: Option<Duration>| {
        let (owner, epoch, summary) = (record.owner.clone(), record.epoch, record.summary.clone());
        Verdict::Done(Outcome::CompletedByOther {
            owner,
            epoch,
            age,
            summary,
        })
    };
    if opts.own_run_only {
        None
    } else if opts.force {
        // Only a run that began after we were asked satisfies --force.
        let claimed_since = record.claimed_at.is_some_and(|at| at >= wait_started);
        (claimed_since && !record.following).then(|| done(None))
    } else if completed_at >= wait_started {
        Some(done(None))
    } else if completed_at > clock::earlier(wait_started, opts.reuse_completion_for) {
        Some(done(Some(now.saturating_duration_since(completed_at))))
    } else {
        None
    }
}

/// A lease we just claimed (or adopted).
#[derive(Clone, Debug)]
pub(crate) struct Claimed {
    pub(crate) fence: Fence,
    pub(crate) record: JobRecord,
    /// The owner's local safety deadline: `ttl - safety_margin` after the
    /// poll that preceded the claim, or the adopted lease's remaining time.
    pub(crate) deadline: Instant,
}

impl Claimed {
    /// Our turn: `record` shows the lease held under our owner id and
    /// `epoch`, safely ours until `deadline`.
    fn turn<T>(opts: &LeaseOptions, epoch: i64, record: JobRecord, deadline: Instant) -> Turn<T> {
        Turn::Claimed(Box::new(Claimed {
            fence: our_fence(opts, epoch),
            record,
            deadline,
        }))
    }
}

/// Where waiting ended.
pub(crate) enum Turn<T> {
    Finished(Outcome<T>),
    Claimed(Box<Claimed>),
}

fn our_fence(opts: &LeaseOptions, epoch: i64) -> Fence {
    Fence {
        owner: opts.owner.clone(),
        epoch,
    }
}

/// The local instant before which a lease ending at server time
/// `lease_expires_at` is safely ours, given a server time `now` read after
/// the local instant `before_now`: its remaining time counted from
/// `before_now` (so never later than the truth), less the safety margin.
fn local_deadline(
    before_now: Instant,
    now: DateTime,
    lease_expires_at: DateTime,
    safety_margin: Duration,
) -> Option<Instant> {
    let left = u64::try_from(clock::millis_between(now, lease_expires_at)).ok()?;
    let holds = Duration::from_millis(left).checked_sub(safety_margin)?;
    Some(before_now + holds)
}

/// Polls until the job is done for us or we hold the lease. No job of ours
/// runs here, so no job error (`E`) can be in what this fails with.
pub(crate) async fn wait_for_turn<T, E>(
    store: &JobStore,
    opts: &LeaseOptions,
    shutdown: &CancellationToken,
) -> Result<Turn<T>, LeaseError<E>> {
    let mut wait = Wait::new(store, opts, shutdown);
    let result = wait.until_turn().await;
    if result.is_err() && wait.claim_unsure {
        release_if_ours(store, opts).await;
    }
    result
}

/// A poll's answer: the local instant before the server's clock was read,
/// the server's time and the lease document.
type Polled = (Instant, DateTime, Option<JobRecord>);

/// One wait for our turn: what [`Wait::until_turn`] keeps between polls.
struct Wait<'w> {
    store: &'w JobStore,
    opts: &'w LeaseOptions,
    shutdown: &'w CancellationToken,
    began: Instant,
    give_up_at: Option<Instant>,
    /// The server's time at the first poll answered: when the wait began.
    wait_started: Option<DateTime>,
    /// Since when MongoDB has failed every request.
    unreachable_since: Option<Instant>,
    error_delays: backon::ExponentialBackoff,
    polled_once: bool,
    /// A claim was sent whose outcome was an error: it may have been
    /// applied, now or later.
    claim_unsure: bool,
    /// The holder last seen waited for (logged when it changes, named if the
    /// wait times out), and when its progress was last logged at info level.
    seen: Option<(Option<String>, Option<i64>, JobStatus)>,
    last_logged: Option<Instant>,
}

impl<'w> Wait<'w> {
    fn new(store: &'w JobStore, opts: &'w LeaseOptions, shutdown: &'w CancellationToken) -> Self {
        let began = Instant::now();
        Wait {
            store,
            opts,
            shutdown,
            began,
            give_up_at: opts.wait_timeout.map(|wait| began + wait),
            wait_started: None,
            unreachable_since: None,
            error_delays: crate::retry::lease_store(opts.poll_every).build(),
            polled_once: false,
            claim_unsure: false,
            seen: None,
            last_logged: None,
        }
    }

    /// Polls, judges (the module's tables) and acts on the verdict until the
    /// job is done for us or we hold the lease.
    async fn until_turn<T, E>(&mut self) -> Result<Turn<T>, LeaseError<E>> {
        let opts = self.opts;
        loop {
            if self.shutdown.is_cancelled() {
                return Err(LeaseError::ShutDown { released: false });
            }
            self.check_time_left()?;
            let Some((before_now, now, record)) = self.poll().await? else {
                continue;
            };
            let wait_started = *self.wait_started.get_or_insert(now);
            match judge(record.as_ref(), now, wait_started, opts) {
                Verdict::Done(outcome) => {
                    log_done(opts, &outcome);
                    return Ok(Turn::Finished(outcome));
                }
                Verdict::Adopt => {
                    let record = record.expect("only a document can be adopted");
                    if let Some(turn) = self.adopt(record, before_now, now) {
                        return Ok(turn);
                    }
                    // Too close to its end to work under: it expires within the
                    // safety margin, then it is claimed as usual.
                }
                verdict @ (Verdict::Wait | Verdict::RequestHandover) => {
                    self.observe(record.as_ref(), now);
                    if matches!(verdict, Verdict::RequestHandover) {
                        self.request_handover(now).await?;
                    }
                }
                Verdict::Claim => match self.claim(record.as_ref(), before_now, now).await? {
                    Some(turn) => return Ok(turn),
                    None => continue,
                },
            }
            // One poll period, jittered (ended early by shutdown or the timeout).
            self.pause(jittered(opts.poll_every)).await;
        }
    }

    /// The wait timed out. The lease is looked at once at least, however
    /// short the wait: a free lease is claimed even with `--wait-timeout 0s`.
    fn check_time_left<E>(&self) -> Result<(), LeaseError<E>> {
        if self.polled_once && self.give_up_at.is_some_and(|at| Instant::now() >= at) {
            return Err(LeaseError::WaitTimedOut {
                waited: self.began.elapsed(),
                owner: self.seen.as_ref().and_then(|(owner, _, _)| owner.clone()),
            });
        }
        Ok(())
    }

    /// Reads the server's clock and the lease: the local instant before the
    /// clock read, the server's time and the lease document. `None`: nothing
    /// read (a shutdown or the timeout came first, or the read failed and
    /// the retry delay has passed).
    async fn poll<E>(&mut self) -> Result<Option<Polled>, LeaseError<E>> {
        let before_now = Instant::now();
        let store = self.store;
        let poll = async {
            let now = store.server_now().await?;
            Ok::<_, MongoError>((before_now, now, store.read().await?))
        };
        // Reads are safe to abandon on shutdown or timeout.
        let polled = tokio::select! {
            polled = poll => polled,
            _ = self.shutdown.cancelled() => return Ok(None),
            _ = sleep_until_opt(self.give_up_at.filter(|_| self.polled_once)) => return Ok(None),
        };
        self.polled_once = true;
        match polled {
            Ok(polled) => {
                self.unreachable_since = None;
                Ok(Some(polled))
            }
            Err(error) => {
                self.unreachable("read", &error)?;
                self.pause_after_error().await;
                Ok(None)
            }
        }
    }

    /// Adopts a claim of ours whose answer was lost, unless it ends within the
    /// safety margin (`None`).
    fn adopt<T>(&self, record: JobRecord, before_now: Instant, now: DateTime) -> Option<Turn<T>> {
        let opts = self.opts;
        let ends = record.lease_expires_at?;
        let deadline = local_deadline(before_now, now, ends, opts.safety_margin)?;
        let deadline = Some(deadline).filter(|deadline| *deadline > Instant::now())?;
        let epoch = record.epoch?;
        warn!(job = %opts.job, owner = %opts.owner, epoch,
            "adopting a claim of ours whose answer was lost");
        crate::metrics::lease_claimed(false);
        Some(Claimed::turn(opts, epoch, record, deadline))
    }

    /// Asks the owner following change streams to hand the lease over:
    /// again on every poll until it is honoured (cheap, and a later asker's
    /// name simply replaces ours: it then waits, and so do we, for the one
    /// the lease is handed to).
    async fn request_handover<E>(&mut self, now: DateTime) -> Result<(), LeaseError<E>> {
        let opts = self.opts;
        match self.store.request_handover(&opts.owner, now).await {
            Ok(true) => debug!(job = %opts.job, owner = %opts.owner,
                "asked the owner following change streams to hand the lease over"),
            Ok(false) => {}
            Err(error) => self.unreachable("ask for", &error)?,
        }
        Ok(())
    }

    /// Claims the lease. `None`: not ours (another replica claimed first,
    /// polled again at once; or the outcome is unknown, polled again after
    /// a pause, so a server failing every claim is not hammered). Not raced
    /// against shutdown: a claim we sent must be answered, or we could walk
    /// away from a lease we hold.
    async fn claim<T, E>(
        &mut self,
        record: Option<&JobRecord>,
        before_now: Instant,
        now: DateTime,
    ) -> Result<Option<Turn<T>>, LeaseError<E>> {
        let opts = self.opts;
        match self.store.claim(&opts.owner, now, record).await {
            Ok(Some(claimed)) => {
                log_claim(opts, record, &claimed, now);
                let epoch = claimed.epoch.unwrap_or_default();
                let deadline = before_now + opts.holds_for();
                Ok(Some(Claimed::turn(opts, epoch, claimed, deadline)))
            }
            Ok(None) => {
                // A driver retry of a claim that was applied also ends here.
                debug!(job = %opts.job, owner = %opts.owner, "another replica claimed first; following");
                Ok(None)
            }
            Err(error) => {
                refused(opts, "claim", &error)?;
                // Maybe applied: the next poll tells.
                self.claim_unsure = true;
                warn!(job = %opts.job, owner = %opts.owner, %error,
                    "the claim's outcome is unknown; reading the lease again");
                self.unreachable("claim", &error)?;
                self.pause_after_error().await;
                Ok(None)
            }
        }
    }

    /// Tracks consecutive MongoDB errors; gives up on a refusal ([`refused`])
    /// or past `unreachable_timeout`.
    fn unreachable<E>(&mut self, verb: &str, error: &MongoError) -> Result<(), LeaseError<E>> {
        refused(self.opts, verb, error)?;
        let since = *self.unreachable_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.opts.unreachable_timeout {
            return Err(LeaseError::MongoUnavailable(error.to_string()));
        }
        let opts = self.opts;
        warn!(job = %opts.job, owner = %opts.owner, %error, "could not {verb} the lease; retrying");
        Ok(())
    }

    /// The next retry delay after a failed request.
    async fn pause_after_error(&mut self) {
        let delay = self.error_delays.next().unwrap_or(Duration::from_secs(1));
        self.pause(delay).await;
    }

    /// Sleeps for `delay`, waking early on shutdown or when the wait times out.
    async fn pause(&self, delay: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.shutdown.cancelled() => {}
            _ = sleep_until_opt(self.give_up_at) => {}
        }
    }

    /// Logs the holder we wait for when it changes, and its progress now and
    /// then.
    fn observe(&mut self, record: Option<&JobRecord>, now: DateTime) {
        let Some(record) = record else {
            return;
        };
        let opts = self.opts;
        let key = (record.owner.clone(), record.epoch, record.status.clone());
        let changed = self.seen.as_ref() != Some(&key);
        let last = self.last_logged;
        let due = last.is_none_or(|at| at.elapsed() >= PROGRESS_LOG_EVERY);
        let ends = record.holds_until(opts.librechat_clock_skew);
        let expires_in_ms = ends.map(|at| clock::millis_between(now, at));
        let progress = record.progress.as_ref();
        if changed && record.holder() == Holder::LibreChat {
            info!(job = %opts.job, me = %opts.owner, librechat_owner = record.owner.as_deref().unwrap_or("-"),
                expires_in_ms, "waiting: a LibreChat replica holds the job (its own start-up sync)");
            self.last_logged = Some(Instant::now());
        } else if changed || due {
            info!(job = %opts.job, me = %opts.owner, owner = record.owner.as_deref().unwrap_or("-"),
                epoch = record.epoch.unwrap_or(0),
                status = ?record.status, expires_in_ms, phase = progress.map(|p| p.phase.as_str()),
                done = progress.map(|p| p.done), total = progress.map(|p| p.total),
                retry_at = record.retry_at.and_then(|at| at.try_to_rfc3339_string().ok()),
                "waiting: another replica holds the job");
            self.last_logged = Some(Instant::now());
        } else {
            debug!(job = %opts.job, owner = record.owner.as_deref(), epoch = record.epoch, expires_in_ms, "still waiting");
        }
        self.seen = Some(key);
    }
}

/// On the way out (timeout, shutdown, unreachable) after a claim whose
/// outcome was an error: a claim of ours found running is released so
/// another replica claims at once, rather than left to expire. Best effort:
/// if MongoDB does not answer, the lease expires by itself.
async fn release_if_ours(store: &JobStore, opts: &LeaseOptions) {
    let attempt = async {
        let now = store.server_now().await?;
        let Some(record) = store.read().await? else {
            return Ok(false);
        };
        if !(record.is_running_for(&opts.owner) && record.is_live(now, opts.librechat_clock_skew)) {
            return Ok(false);
        }
        let fence = our_fence(opts, record.epoch.unwrap_or_default());
        let progress = crate::progress::Progress::new().snapshot();
        store
            .end(&fence, now, RunEnd::Released(&progress, None))
            .await
    };
    let (job, owner) = (&opts.job, &opts.owner);
    match tokio::time::timeout(opts.poll_every.max(Duration::from_secs(2)), attempt).await {
        Ok(Ok(true)) => warn!(%job, %owner, "released a claim of ours whose answer was lost"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => {
            debug!(%job, error = %e, "could not check for a claim of ours; it expires by itself")
        }
        Err(_) => debug!(%job, "could not check for a claim of ours in time; it expires by itself"),
    }
}

/// Server error codes that refuse an operation for good: no retry changes a
/// validator on the collection, a missing privilege or a bad value.
const REFUSALS: &[i32] = &[
    2,    // BadValue
    9,    // FailedToParse
    13,   // Unauthorized
    14,   // TypeMismatch
    18,   // AuthenticationFailed
    121,  // DocumentValidationFailure
    8000, // AtlasError (Atlas's "user is not allowed to do action")
];

/// An error MongoDB answered with that no retry changes (see [`REFUSALS`]):
/// the operation was not applied, and asking again at a poll's rate would
/// only get the same answer, so waiting ends with it.
fn refused<E>(opts: &LeaseOptions, what: &str, error: &MongoError) -> Result<(), LeaseError<E>> {
    if error_code(error).is_some_and(|code| REFUSALS.contains(&code)) {
        return Err(LeaseError::Refused {
            what: format!("{what} the lease document {}.{}", opts.collection, opts.job),
            detail: error.to_string(),
        });
    }
    Ok(())
}

/// A sleep within `[½, 1] × period`, so replicas do not poll in lockstep.
fn jittered(period: Duration) -> Duration {
    period.mul_f64(rand::rng().random_range(0.5..=1.0))
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn log_done<T>(opts: &LeaseOptions, outcome: &Outcome<T>) {
    let Outcome::CompletedByOther {
        owner, epoch, age, ..
    } = outcome
    else {
        return;
    };
    let (owner, epoch) = (owner.as_deref().unwrap_or("-"), epoch.unwrap_or(0));
    match age {
        None => {
            info!(job = %opts.job, me = %opts.owner, owner, epoch, "another replica completed the job")
        }
        Some(age) => {
            info!(job = %opts.job, me = %opts.owner, owner, epoch, age_ms = age.as_millis() as u64,
            "a fresh completion exists; not running again")
        }
    }
}

fn log_claim(opts: &LeaseOptions, before: Option<&JobRecord>, claimed: &JobRecord, now: DateTime) {
    // A claimed record always has an epoch; 0 would only show a corrupt one.
    let epoch = claimed.epoch.unwrap_or(0);
    let takeover = before.is_some_and(|previous| previous.status == JobStatus::Running);
    crate::metrics::lease_claimed(takeover);
    match before {
        Some(previous) if previous.status == JobStatus::Running => {
            let ended = previous.holds_until(opts.librechat_clock_skew);
            let expired_for_ms = ended.map(|at| clock::millis_between(at, now));
            warn!(job = %opts.job, owner = %opts.owner, epoch,
                previous_owner = previous.owner.as_deref().unwrap_or("-"),
                previous_holder = ?previous.holder(), ?expired_for_ms, "took over an expired lease");
        }
        Some(previous) => {
            info!(job = %opts.job, owner = %opts.owner, epoch,
                previous_owner = previous.owner.as_deref().unwrap_or("-"),
                previous_holder = ?previous.holder(), previous_status = ?previous.status,
                attempt = previous.attempt, "claimed the lease");
        }
        None => {
            info!(job = %opts.job, owner = %opts.owner, epoch, "claimed the lease (first run)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, Bson, Document};
    use std::convert::Infallible;

    fn at(secs: i64) -> DateTime {
        DateTime::from_millis(secs * 1000)
    }

    /// A document our protocol wrote: lease until 200 s, claimed at 100 s.
    fn ours(status: &str) -> Document {
        doc! {
            "owner": "other", "epoch": 4_i64, "status": status, "claimedAt": at(100),
            "leaseExpiresAt": at(200), "expiresAt": at(500), "writtenExpiresAt": at(500),
        }
    }

    fn record(doc: Document) -> JobRecord {
        JobRecord::from_document(&doc)
    }

    /// The verdict, for a job without output (a follower's is never `Ran`).
    fn judge(
        record: Option<&JobRecord>,
        now: DateTime,
        wait_started: DateTime,
        opts: &LeaseOptions,
    ) -> Verdict<Infallible> {
        super::judge(record, now, wait_started, opts)
    }

    #[test]
    fn running_waits_until_expiry_then_claims() {
        let opts = LeaseOptions::new("me");
        let running = record(ours("running"));
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
    fn our_own_running_lease_is_adopted_until_it_expires() {
        let opts = LeaseOptions::new("other");
        let running = record(ours("running"));
        assert_eq!(
            judge(Some(&running), at(199), at(150), &opts),
            Verdict::Adopt
        );
        assert_eq!(
            judge(Some(&running), at(200), at(150), &opts),
            Verdict::Claim
        );
        let before = Instant::now();
        let deadline = local_deadline(before, at(190), at(200), Duration::from_secs(3));
        assert_eq!(deadline, Some(before + Duration::from_secs(7)));
        assert_eq!(
            local_deadline(before, at(199), at(200), Duration::from_secs(3)),
            None
        );
    }

    #[test]
    fn failed_waits_for_retry_at_unless_forced() {
        let mut opts = LeaseOptions::new("me");
        let mut failed = ours("failed");
        failed.insert("retryAt", at(300));
        let failed = record(failed);
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
        let mut completed = ours("completed");
        completed.insert("completedAt", at(1000));
        let completed = record(completed);
        // Completed while we waited.
        assert!(matches!(
            judge(Some(&completed), at(1001), at(900), &opts),
            Verdict::Done(Outcome::CompletedByOther { age: None, .. })
        ));
        // Fresh when we started.
        assert!(matches!(
            judge(Some(&completed), at(1030), at(1030), &opts),
            Verdict::Done(Outcome::CompletedByOther { age: Some(_), .. })
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
            Verdict::Done(Outcome::CompletedByOther { age: None, .. })
        ));
        // A reindex: no other run satisfies it.
        forced.own_run_only = true;
        assert_eq!(
            judge(Some(&completed), at(1001), at(99), &forced),
            Verdict::Claim
        );
    }

    #[test]
    fn librechat_leases_are_waited_for_and_its_completions_never_count() {
        let mut opts = LeaseOptions::new("me");
        opts.librechat_clock_skew = Duration::from_secs(10);
        // LibreChat claimed over our completed document: it rewrote status,
        // owner and expiresAt, and left our other fields alone.
        let mut theirs = ours("running");
        theirs.insert("owner", "5f0c…-uuid");
        theirs.insert("expiresAt", at(1000));
        theirs.insert("completedAt", at(900));
        let running = record(theirs.clone());
        assert_eq!(running.holder(), Holder::LibreChat);
        assert_eq!(
            judge(Some(&running), at(1009), at(950), &opts),
            Verdict::Wait
        );
        assert_eq!(
            judge(Some(&running), at(1010), at(950), &opts),
            Verdict::Claim
        );

        // Its completion: owner unset, expiresAt in the future. Not done for
        // a waiting follower, nor fresh for one that starts, nor when forced.
        theirs.insert("status", "completed");
        theirs.remove("owner");
        theirs.insert("expiresAt", at(1600));
        let completed = record(theirs);
        for (now, started) in [(at(1001), at(950)), (at(905), at(905))] {
            assert_eq!(judge(Some(&completed), now, started, &opts), Verdict::Claim);
        }
        // Its very first claim, on no document of ours.
        let first = record(
            doc! { "status": "running", "owner": "u", "expiresAt": at(50), "updatedAt": Bson::Null },
        );
        assert_eq!(judge(Some(&first), at(55), at(55), &opts), Verdict::Wait);
        assert_eq!(judge(Some(&first), at(60), at(55), &opts), Verdict::Claim);
    }
}
