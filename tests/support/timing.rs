//! The lease timings of every test, derived from one headroom.
//!
//! An owner stops itself (self-fences) once its last confirmed renewal was
//! sent more than `ttl - safety_margin` ago, and a renewal (a server-clock
//! read and an update) is sent `renew_every` after the last one. So a
//! renewal answered later than `ttl - safety_margin - renew_every` after it
//! is due ends the run — the product's right answer, and a failed test. On
//! a 2-core machine busy with other work, against a MongoDB stand-in that
//! answers one request at a time, a lease write can wait well over a second.
//! [`headroom`] is that allowance: how late one step of a test (a lease
//! write answered, a timer fired, a read observed) may come on a loaded
//! machine. Every lease timing a test gives a replica (in process or as a
//! `meili-reconciler` process) comes from here:
//!
//! | | |
//! |---|---|
//! | `renew_every` | 250 ms — many renewals in a short job |
//! | `safety_margin` | headroom — the owner stops this long before its lease ends by the server's clock, which a test observing it needs |
//! | `ttl` | `renew_every + 2 × headroom` — a renewal has a headroom to be answered |
//! | `poll_every` | 100 ms — a follower notices a free lease soon |
//!
//! The default headroom, 3 s, holds on a 2-core machine running two CPU
//! burners beside the suite. `TEST_LEASE_HEADROOM` (a duration: `5s`,
//! `1500ms`) changes it for a slower or busier machine, or a faster one.
//! Tests that race keep racing: the timings only decide how long a lease
//! holds without an answer, never whether two replicas meet.
#![allow(dead_code)]

use std::time::Duration;

use meili_reconciler::lease::LeaseOptions;

/// How long a test lets one run of its small data set (or a step of one:
/// up to a pause point, a process's exit) take before it calls the run hung.
/// Generous on purpose: on a 2-core machine running three suites at once a
/// run that takes seconds alone can take minutes, and a bound that is only
/// a hang detector costs nothing when the run is done sooner.
pub const RUN_BOUND: Duration = Duration::from_secs(600);

/// The default of [`headroom`].
pub const DEFAULT_HEADROOM: Duration = Duration::from_secs(3);

/// How late one step may come on a loaded machine (`TEST_LEASE_HEADROOM`,
/// else [`DEFAULT_HEADROOM`]); panics on a value that is not a duration.
pub fn headroom() -> Duration {
    static HEADROOM: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *HEADROOM.get_or_init(|| match std::env::var("TEST_LEASE_HEADROOM") {
        Ok(text) if !text.trim().is_empty() => humantime::parse_duration(text.trim())
            .unwrap_or_else(|e| panic!("TEST_LEASE_HEADROOM={text:?} is not a duration: {e}")),
        _ => DEFAULT_HEADROOM,
    })
}

/// One replica's lease timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTimings {
    pub ttl: Duration,
    pub renew_every: Duration,
    pub safety_margin: Duration,
    pub poll_every: Duration,
}

/// The timings every test replica gets (see the module's table).
pub fn lease() -> LeaseTimings {
    let headroom = headroom();
    let renew_every = Duration::from_millis(250);
    LeaseTimings {
        ttl: renew_every + headroom * 2,
        renew_every,
        safety_margin: headroom,
        poll_every: Duration::from_millis(100),
    }
}

impl LeaseTimings {
    /// Sets these timings on `opts`.
    pub fn apply(&self, opts: &mut LeaseOptions) {
        opts.ttl = self.ttl;
        opts.renew_every = self.renew_every;
        opts.safety_margin = self.safety_margin;
        opts.poll_every = self.poll_every;
    }

    /// The same timings as `RECONCILER__LEASE__*` settings of a process.
    pub fn env(&self) -> Vec<(String, String)> {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        vec![
            ("RECONCILER__LEASE__TTL".into(), ms(self.ttl)),
            (
                "RECONCILER__LEASE__RENEW_EVERY".into(),
                ms(self.renew_every),
            ),
            (
                "RECONCILER__LEASE__SAFETY_MARGIN".into(),
                ms(self.safety_margin),
            ),
            ("RECONCILER__LEASE__POLL_EVERY".into(), ms(self.poll_every)),
        ]
    }
}
