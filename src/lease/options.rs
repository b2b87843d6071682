//! The knobs of one single-flight lease ([`LeaseOptions`]) and the failure
//! backoff they imply.
//!
//! Defaults are config/default.toml's. Configuration (`src/config.rs`)
//! validates user input with friendly errors; [`LeaseOptions::assert_sane`]
//! only guards the invariants the protocol's safety rests on.

use std::time::Duration;

/// How one replica takes part in one job's lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    /// The collection holding one document per job (`distributedJobs`).
    pub collection: String,
    /// The job document's `_id` (`meili-index-sync`).
    pub job: String,
    /// This replica's id, written as `owner` (see [`default_owner_id`]).
    pub owner: String,
    /// How long a claim or renewal holds the lease (server time).
    pub ttl: Duration,
    /// Renewal period while the job runs (a timer, not per batch).
    pub renew_every: Duration,
    /// A follower's poll period (each sleep is jittered within `[½, 1] ×`).
    pub poll_every: Duration,
    /// The owner stops itself once its last good renewal is older than
    /// `ttl - safety_margin` by its local monotonic clock.
    pub safety_margin: Duration,
    /// A completion younger than this satisfies a replica that starts
    /// afterwards, unless `force`.
    pub reuse_completion_for: Duration,
    /// A follower gives up after waiting this long (`once --wait-timeout`);
    /// `None` waits for as long as it takes.
    pub wait_timeout: Option<Duration>,
    /// Run even if a fresh completion exists or a failed run's `retryAt` has
    /// not come yet. Never steals a live lease.
    pub force: bool,
    /// Only a run of our own satisfies us: another replica's completion, even
    /// of a run claimed after we started waiting, is waited out and then the
    /// lease claimed (`reindex`: an ordinary reconciliation is not a reindex).
    pub own_run_only: bool,
    /// When an owner keeps the lease after completing its run (`following`),
    /// ask it to hand the lease over (`once`, `reindex`: they need it to run).
    pub request_handover: bool,
    /// `retryAt` after the first failure; doubled per further consecutive
    /// failure.
    pub failure_backoff: Duration,
    /// Cap on the failure backoff.
    pub failure_backoff_max: Duration,
    /// How long MongoDB may stay unreachable while we are not the owner
    /// before giving up with [`LeaseError::MongoUnavailable`](super::LeaseError).
    pub unreachable_timeout: Duration,
    /// How far a LibreChat app server's clock may be off MongoDB's. LibreChat
    /// claims the same document judging `expiresAt` by its own clock, so we
    /// write `expiresAt` this much later than our lease's end, and treat its
    /// lease as live until its `expiresAt` plus this.
    pub librechat_clock_skew: Duration,
    /// The write concern of every lease write (reads follow it: `majority`
    /// reads with `majority` writes, `local` with a node count).
    pub write_concern: LeaseWriteConcern,
    /// On shutdown, how long the owner waits for its job to stop (a write it
    /// already sent to land) before giving up on releasing the lease: a job
    /// still running may still have a write under way, so the lease is then
    /// left to expire instead of handed to a follower at once.
    pub drain_patience: Duration,
}

/// `lease.write_concern`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseWriteConcern {
    /// `w: "majority"`: a claim or renewal, once confirmed, survives a
    /// failover. The default.
    Majority,
    /// `w: n`, for sets where a majority cannot always acknowledge (two data
    /// nodes and an arbiter): a failover can then roll back a claim and let
    /// two replicas own the same epoch.
    Nodes(u32),
}

/// A lease timing that cannot keep an owner safe ([`check_timings`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimingError {
    /// `safety_margin ≥ ttl`: the owner would stop before it starts.
    MarginNotBelowTtl { ttl: Duration },
    /// `renew_every ≥ ttl - safety_margin`: the first renewal would come
    /// after the owner's own deadline.
    RenewalTooLate { holds_for: Duration },
}

impl TimingError {
    /// The setting to change.
    pub fn key(&self) -> &'static str {
        match self {
            TimingError::MarginNotBelowTtl { .. } => "lease.safety_margin",
            TimingError::RenewalTooLate { .. } => "lease.renew_every",
        }
    }

    /// What the setting may be.
    pub fn allowed(&self) -> String {
        match self {
            TimingError::MarginNotBelowTtl { ttl } => format!(
                "a duration shorter than lease.ttl ({})",
                humantime::format_duration(*ttl)
            ),
            TimingError::RenewalTooLate { holds_for } => format!(
                "a duration shorter than lease.ttl - lease.safety_margin ({}), so a renewal can fail and be retried before the owner must stop",
                humantime::format_duration(*holds_for)
            ),
        }
    }
}

/// The renewal rule the protocol's safety rests on (§5): the owner stops
/// itself once its last good renewal is `ttl - safety_margin` old, so
/// `safety_margin < ttl`, and a renewal is due before then,
/// `renew_every < ttl - safety_margin`, leaving room for a failed one to be
/// retried. Configuration reports a violation as bad configuration;
/// [`LeaseOptions::assert_sane`] refuses to run with one.
pub fn check_timings(
    ttl: Duration,
    renew_every: Duration,
    safety_margin: Duration,
) -> Result<(), TimingError> {
    if safety_margin >= ttl {
        return Err(TimingError::MarginNotBelowTtl { ttl });
    }
    let holds_for = ttl - safety_margin;
    if renew_every >= holds_for {
        return Err(TimingError::RenewalTooLate { holds_for });
    }
    Ok(())
}

impl LeaseOptions {
    /// The defaults (config/default.toml) for `owner`.
    pub fn new(owner: impl Into<String>) -> Self {
        LeaseOptions {
            collection: "distributedJobs".into(),
            job: "meili-index-sync".into(),
            owner: owner.into(),
            ttl: Duration::from_secs(180),
            renew_every: Duration::from_secs(60),
            poll_every: Duration::from_secs(2),
            safety_margin: Duration::from_secs(15),
            reuse_completion_for: Duration::from_secs(60),
            wait_timeout: None,
            force: false,
            own_run_only: false,
            request_handover: false,
            failure_backoff: Duration::from_secs(30),
            failure_backoff_max: Duration::from_secs(30 * 60),
            unreachable_timeout: Duration::from_secs(60),
            librechat_clock_skew: Duration::from_secs(5 * 60),
            write_concern: LeaseWriteConcern::Majority,
            drain_patience: Duration::from_secs(10),
        }
    }

    /// Panics unless a renewal can land before the owner's own safety
    /// deadline ([`check_timings`], and `renew_every > 0`), and
    /// `poll_every > 0`.
    pub fn assert_sane(&self) {
        assert!(!self.job.is_empty(), "lease job name is empty");
        assert!(!self.owner.is_empty(), "lease owner id is empty");
        if let Err(error) = check_timings(self.ttl, self.renew_every, self.safety_margin) {
            panic!("{} must be {}", error.key(), error.allowed());
        }
        assert!(
            !self.renew_every.is_zero(),
            "lease renew_every must be above zero"
        );
        assert!(
            !self.poll_every.is_zero(),
            "lease poll_every must be above zero"
        );
    }

    /// How long after its `attempt`-th consecutive failure (1-based) a job
    /// may be retried: `failure_backoff × 2^(attempt-1)`, capped.
    pub fn failure_backoff_for(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(32);
        self.failure_backoff
            .saturating_mul(1_u32 << doublings.min(31))
            .min(self.failure_backoff_max)
    }

    /// The local safety deadline's distance from a renewal's send time.
    pub(crate) fn holds_for(&self) -> Duration {
        self.ttl - self.safety_margin
    }
}

/// A replica id that is unique per process and readable in `status`:
/// `host:pid:random`.
pub fn default_owner_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "replica".into());
    format!("{host}:{}:{}", std::process::id(), random_suffix())
}

/// The replica id for an operator's `lease.owner` label: `label:random`.
///
/// A label may be shared — every replica reads the same `.env` — but an id
/// must not be: a replica that finds the lease running under its own id
/// adopts it as a claim of its own whose reply was lost (§5.11), and would
/// work beside the twin that really holds it.
pub fn labelled_owner_id(label: &str) -> String {
    format!("{label}:{}", random_suffix())
}

fn random_suffix() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    random[..8].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_backoff_doubles_and_caps() {
        let mut opts = LeaseOptions::new("me");
        opts.failure_backoff = Duration::from_secs(30);
        opts.failure_backoff_max = Duration::from_secs(100);
        assert_eq!(opts.failure_backoff_for(1), Duration::from_secs(30));
        assert_eq!(opts.failure_backoff_for(2), Duration::from_secs(60));
        assert_eq!(opts.failure_backoff_for(3), Duration::from_secs(100));
        assert_eq!(opts.failure_backoff_for(60), Duration::from_secs(100));
    }

    #[test]
    fn defaults_are_sane() {
        LeaseOptions::new("me").assert_sane();
    }

    #[test]
    #[should_panic(expected = "renew_every")]
    fn renewing_slower_than_the_deadline_is_refused() {
        let mut opts = LeaseOptions::new("me");
        opts.renew_every = Duration::from_secs(170);
        opts.assert_sane();
    }

    #[test]
    fn timings_name_the_setting_to_change() {
        let s = Duration::from_secs;
        assert_eq!(check_timings(s(180), s(60), s(15)), Ok(()));
        let margin = check_timings(s(180), s(60), s(180)).unwrap_err();
        assert_eq!(margin.key(), "lease.safety_margin");
        assert_eq!(margin.allowed(), "a duration shorter than lease.ttl (3m)");
        let renewal = check_timings(s(180), s(165), s(15)).unwrap_err();
        assert_eq!(renewal.key(), "lease.renew_every");
        assert!(
            renewal.allowed().contains("(2m 45s)"),
            "{}",
            renewal.allowed()
        );
    }
}
