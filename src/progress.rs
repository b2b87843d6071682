//! Progress of a reconciliation, shared between the job that advances it and
//! everyone who reports it: the log, the lease document (written with each
//! renewal), `/status` and the terminal progress bar.
//!
//! Work that runs concurrently (both collections of a reconciliation) reports
//! through its own [`Lane`]; while lanes are open a snapshot sums them
//! (phases joined by ` · `), so one reader sees the whole run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One snapshot, as stored in the lease document's `progress` field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressSnapshot {
    /// What the job is doing: `plan`, `settings`, `rebuild`, `index`, `orphans`, `swap`…
    pub phase: String,
    /// Documents done in this phase.
    pub done: u64,
    /// Documents this phase expects to handle (0 when unknown).
    pub(crate) total: u64,
    /// Throughput since the phase began.
    pub(crate) docs_per_sec: f64,
    /// Estimated seconds left in this phase, when it can be estimated.
    pub(crate) eta_secs: Option<u64>,
}

/// One line of work's current phase.
#[derive(Debug)]
struct Track {
    phase: String,
    done: u64,
    total: u64,
    phase_started: Instant,
}

impl Track {
    fn new(phase: &str, total: u64) -> Track {
        Track {
            phase: phase.to_string(),
            done: 0,
            total,
            phase_started: Instant::now(),
        }
    }
}

#[derive(Debug)]
struct Inner {
    /// Track 0 is the job's own; the others belong to open lanes (`None`
    /// once closed).
    tracks: Vec<Option<Track>>,
    last_logged: Instant,
}

/// Cheap to clone; all clones share one state.
#[derive(Clone, Debug)]
pub struct Progress {
    inner: Arc<Mutex<Inner>>,
    track: usize,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            inner: Arc::new(Mutex::new(Inner {
                tracks: vec![Some(Track::new("starting", 0))],
                last_logged: Instant::now(),
            })),
            track: 0,
        }
    }
}

/// The progress of one concurrent line of work; closed when dropped.
#[derive(Debug)]
pub(crate) struct Lane(Progress);

impl std::ops::Deref for Lane {
    type Target = Progress;
    fn deref(&self) -> &Progress {
        &self.0
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.0.inner.lock() {
            inner.tracks[self.0.track] = None;
        }
    }
}

impl Progress {
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens a lane for work running beside others.
    pub(crate) fn lane(&self) -> Lane {
        let mut inner = self.inner.lock().expect("progress poisoned");
        inner.tracks.push(Some(Track::new("starting", 0)));
        Lane(Progress {
            inner: Arc::clone(&self.inner),
            track: inner.tracks.len() - 1,
        })
    }

    fn with_track(&self, f: impl FnOnce(&mut Track)) {
        let mut inner = self.inner.lock().expect("progress poisoned");
        if let Some(track) = inner.tracks[self.track].as_mut() {
            f(track);
        }
    }

    /// Starts a new phase with an expected total (0 if unknown).
    pub fn phase(&self, phase: &str, total: u64) {
        self.with_track(|t| *t = Track::new(phase, total));
    }

    /// Adds `n` to the documents done in the current phase.
    pub fn advance(&self, n: u64) {
        self.with_track(|t| t.done += n);
    }

    /// Whether `every` has passed since the last time this returned true
    /// (for any clone or lane): one progress log line per period for the
    /// whole job.
    pub(crate) fn due_for_log(&self, every: Duration) -> bool {
        let mut inner = self.inner.lock().expect("progress poisoned");
        let due = inner.last_logged.elapsed() >= every;
        if due {
            inner.last_logged = Instant::now();
        }
        due
    }

    /// The job's progress: its own track, or the sum of its open lanes.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let inner = self.inner.lock().expect("progress poisoned");
        let lanes: Vec<&Track> = inner.tracks[1..].iter().flatten().collect();
        let own = inner.tracks[0].as_ref().expect("the job's track");
        let tracks = if lanes.is_empty() { vec![own] } else { lanes };
        let phases: Vec<&str> = tracks.iter().map(|t| t.phase.as_str()).collect();
        let phase = phases.join(" · ");
        let done = tracks.iter().map(|t| t.done).sum();
        let total = tracks.iter().map(|t| t.total).sum();
        let started = tracks.iter().map(|t| t.phase_started).min();
        let secs = started.expect("a track").elapsed().as_secs_f64();
        let docs_per_sec = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        let eta_secs = (docs_per_sec > 0.0 && total >= done)
            .then(|| ((total - done) as f64 / docs_per_sec).ceil() as u64);
        ProgressSnapshot {
            phase,
            done,
            total,
            docs_per_sec,
            eta_secs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_lanes_are_summed_and_closed_lanes_leave_the_job_track() {
        let progress = Progress::new();
        progress.phase("plan", 0);
        {
            let a = progress.lane();
            let b = progress.lane();
            a.phase("index messages", 100);
            b.phase("index conversations", 10);
            a.advance(40);
            b.advance(10);
            let s = progress.snapshot();
            assert_eq!(s.phase, "index messages · index conversations");
            assert_eq!((s.done, s.total), (50, 110));
            drop(b);
            let s = progress.snapshot();
            assert_eq!(
                (s.phase.as_str(), s.done, s.total),
                ("index messages", 40, 100)
            );
        }
        assert_eq!(progress.snapshot().phase, "plan");
        progress.phase("done", 0);
        assert_eq!(progress.snapshot().phase, "done");
    }

    #[test]
    fn one_log_line_per_period_for_every_lane() {
        let progress = Progress::new();
        let lane = progress.lane();
        assert!(lane.due_for_log(Duration::ZERO));
        assert!(!progress.due_for_log(Duration::from_secs(60)));
        assert!(!lane.due_for_log(Duration::from_secs(60)));
    }
}
