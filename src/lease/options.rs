//! The knobs of one single-flight lease ([`LeaseOptions`], the `[lease]`
//! settings as deserialized) and the rules their timings must keep.
//!
//! Their defaults are config/default.toml's, read through `crate::setting`;
//! [`LeaseOptions::check_timings`] is the one statement of the timing rules,
//! reported by `config` as bad configuration and refused by
//! [`LeaseOptions::assert_sane`].

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::setting;

/// How one replica takes part in one job's lease: the `[lease]` settings,
/// and what the command asks of this run (`#[serde(skip)]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseOptions {
    /// The collection holding one document per job (`distributedJobs`).
    #[serde(deserialize_with = "name")]
    pub collection: String,
    /// The job document's `_id` (`meili-index-sync`).
    #[serde(deserialize_with = "name")]
    pub job: String,
    /// This replica's id, written as `owner`: read from the operator's
    /// `lease.owner` label ([`owner_id`]), or [`default_owner_id`]
    /// without one.
    #[serde(deserialize_with = "owner_id")]
    pub owner: String,
    /// How long a claim or renewal holds the lease (server time).
    #[serde(deserialize_with = "setting::positive_duration")]
    pub ttl: Duration,
    /// Renewal period while the job runs (a timer, not per batch).
    #[serde(deserialize_with = "setting::positive_duration")]
    pub renew_every: Duration,
    /// A follower's poll period (each sleep is jittered within `[½, 1] ×`).
    #[serde(deserialize_with = "setting::positive_duration")]
    pub poll_every: Duration,
    /// The owner stops itself once its last good renewal is older than
    /// `ttl - safety_margin` by its local monotonic clock.
    #[serde(deserialize_with = "setting::duration")]
    pub safety_margin: Duration,
    /// A completion younger than this satisfies a replica that starts
    /// afterwards, unless `force`.
    #[serde(deserialize_with = "setting::duration")]
    pub reuse_completion_for: Duration,
    /// A follower gives up after waiting this long (`once --wait-timeout`);
    /// `None` waits for as long as it takes.
    #[serde(skip)]
    pub wait_timeout: Option<Duration>,
    /// Run even if a fresh completion exists or a failed run's `retryAt` has
    /// not come yet. Never steals a live lease.
    #[serde(skip)]
    pub force: bool,
    /// Only a run of our own satisfies us: another replica's completion, even
    /// of a run claimed after we started waiting, is waited out and then the
    /// lease claimed (`reindex`: an ordinary reconciliation is not a reindex).
    #[serde(skip)]
    pub own_run_only: bool,
    /// When an owner keeps the lease after completing its run (`following`),
    /// ask it to hand the lease over (`once`, `reindex`: they need it to run).
    #[serde(skip)]
    pub request_handover: bool,
    /// `retryAt` after the first failure; doubled per further consecutive
    /// failure.
    #[serde(deserialize_with = "setting::positive_duration")]
    pub failure_backoff: Duration,
    /// Cap on the failure backoff.
    #[serde(deserialize_with = "setting::positive_duration")]
    pub failure_backoff_max: Duration,
    /// How long MongoDB may stay unreachable while we are not the owner
    /// before giving up with [`LeaseError::MongoUnavailable`](super::LeaseError).
    #[serde(deserialize_with = "setting::positive_duration")]
    pub unreachable_timeout: Duration,
    /// How far a LibreChat app server's clock may be off MongoDB's. LibreChat
    /// claims the same document judging `expiresAt` by its own clock, so we
    /// write `expiresAt` this much later than our lease's end, and treat its
    /// lease as live until its `expiresAt` plus this.
    #[serde(deserialize_with = "setting::duration")]
    pub librechat_clock_skew: Duration,
    /// The write concern of every lease write (reads follow it: `majority`
    /// reads with `majority` writes, `local` with a node count).
    pub write_concern: LeaseWriteConcern,
    /// On shutdown, how long the owner waits for its job to stop (a write it
    /// already sent to land) before giving up on releasing the lease: a job
    /// still running may still have a write under way, so the lease is then
    /// left to expire instead of handed to a follower at once. Not a
    /// setting: a test may shorten it.
    #[serde(skip, default = "drain_patience")]
    pub drain_patience: Duration,
}

fn drain_patience() -> Duration {
    Duration::from_secs(10)
}

/// `lease.collection`, `lease.job`: names MongoDB takes as they are.
fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    setting::parse(d, setting::STRING, "a non-empty name without '$'", |t| {
        (!t.is_empty() && !t.contains(['$', '\0'])).then(|| t.to_string())
    })
}

/// `lease.owner`, the operator's label, read into this replica's id:
/// `label:random`, or [`default_owner_id`] without a label.
///
/// A label may be shared — every replica reads the same `.env` — but an id
/// must not be: a replica that finds the lease running under its own id
/// adopts it as a claim of its own whose reply was lost (§5.11), and would
/// work beside the twin that really holds it.
fn owner_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let label = setting::text(d)?;
    Ok(if label.is_empty() {
        default_owner_id()
    } else {
        format!("{label}:{}", random_suffix())
    })
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

impl<'de> Deserialize<'de> for LeaseWriteConcern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let allowed = "\"majority\" (the default) or a number of nodes ≥ 1";
        setting::parse(d, setting::STRING, allowed, |t| {
            if t.eq_ignore_ascii_case("majority") {
                return Some(LeaseWriteConcern::Majority);
            }
            let nodes: Option<u32> = t.parse().ok().filter(|n| *n >= 1);
            nodes.map(LeaseWriteConcern::Nodes)
        })
    }
}

/// A lease timing that cannot keep an owner safe, or a backoff that cannot
/// be kept ([`LeaseOptions::check_timings`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TimingError {
    /// The setting to change.
    pub(crate) key: &'static str,
    /// What the setting may be.
    pub(crate) allowed: String,
}

impl LeaseOptions {
    /// For tests: the compiled-in defaults (config/default.toml) for `owner`
    /// (the service takes its options from the configuration).
    pub fn new(owner: impl Into<String>) -> Self {
        let defaults = setting::defaults().get::<LeaseOptions>("lease");
        let mut opts = defaults.expect("the compiled-in [lease] defaults deserialize");
        opts.owner = owner.into();
        opts
    }

    /// The renewal rule the protocol's safety rests on (§5): the owner stops
    /// itself once its last good renewal is `ttl - safety_margin` old, so
    /// `safety_margin < ttl`, and a renewal is due before then,
    /// `renew_every < ttl - safety_margin`, leaving room for a failed one to
    /// be retried. And the failure backoff's cap is not below its first step.
    /// Configuration reports a violation as bad configuration;
    /// [`LeaseOptions::assert_sane`] refuses to run with one.
    pub(crate) fn check_timings(&self) -> Result<(), TimingError> {
        let broken = |key, allowed| Err(TimingError { key, allowed });
        let shown = humantime::format_duration;
        if self.safety_margin >= self.ttl {
            // The owner would stop before it starts.
            let allowed = format!("a duration shorter than lease.ttl ({})", shown(self.ttl));
            return broken("lease.safety_margin", allowed);
        }
        if self.renew_every >= self.holds_for() {
            // The first renewal would come after the owner's own deadline.
            let holds_for = shown(self.holds_for());
            let allowed = format!("a duration shorter than lease.ttl - lease.safety_margin ({holds_for}), so a renewal can fail and be retried before the owner must stop");
            return broken("lease.renew_every", allowed);
        }
        if self.failure_backoff_max < self.failure_backoff {
            // The cap below the first step.
            let bound = shown(self.failure_backoff);
            let allowed = format!("a duration at least lease.failure_backoff ({bound})");
            return broken("lease.failure_backoff_max", allowed);
        }
        Ok(())
    }

    /// Panics unless the timings keep their rules ([`Self::check_timings`]),
    /// and `renew_every > 0`, `poll_every > 0`.
    pub(crate) fn assert_sane(&self) {
        assert!(!self.job.is_empty(), "lease job name is empty");
        assert!(!self.owner.is_empty(), "lease owner id is empty");
        if let Err(error) = self.check_timings() {
            panic!("{} must be {}", error.key, error.allowed);
        }
        for (name, period) in [
            ("renew_every", self.renew_every),
            ("poll_every", self.poll_every),
        ] {
            assert!(!period.is_zero(), "lease {name} must be above zero");
        }
    }

    /// How long after its `attempt`-th consecutive failure (1-based) a job
    /// may be retried: `failure_backoff × 2^(attempt-1)`, capped.
    pub(crate) fn failure_backoff_for(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let backoff = self.failure_backoff.saturating_mul(1_u32 << doublings);
        backoff.min(self.failure_backoff_max)
    }

    /// The local safety deadline's distance from a renewal's send time.
    pub(crate) fn holds_for(&self) -> Duration {
        self.ttl - self.safety_margin
    }
}

/// A replica id that is unique per process and readable in `status`:
/// `host:pid:random`.
fn default_owner_id() -> String {
    let named = |h: &String| !h.is_empty();
    let etc = || std::fs::read_to_string("/etc/hostname").ok();
    let host = std::env::var("HOSTNAME").ok().filter(named);
    let host = host.or_else(|| etc().map(|h| h.trim().to_string()));
    let host = host.filter(named).unwrap_or_else(|| "replica".into());
    format!("{host}:{}:{}", std::process::id(), random_suffix())
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
        let timings = |ttl, renew_every, safety_margin| LeaseOptions {
            ttl: s(ttl),
            renew_every: s(renew_every),
            safety_margin: s(safety_margin),
            ..LeaseOptions::new("me")
        };
        assert_eq!(timings(180, 60, 15).check_timings(), Ok(()));
        let margin = timings(180, 60, 180).check_timings().unwrap_err();
        assert_eq!(margin.key, "lease.safety_margin");
        assert_eq!(margin.allowed, "a duration shorter than lease.ttl (3m)");
        let renewal = timings(180, 165, 15).check_timings().unwrap_err();
        assert_eq!(renewal.key, "lease.renew_every");
        assert!(renewal.allowed.contains("(2m 45s)"), "{}", renewal.allowed);
        let backoff = LeaseOptions {
            failure_backoff_max: s(10),
            ..timings(180, 60, 15)
        };
        let capped = backoff.check_timings().unwrap_err();
        assert_eq!(capped.key, "lease.failure_backoff_max");
        assert!(capped.allowed.contains("(30s)"), "{}", capped.allowed);
    }
}
