//! Where a run's indexing time goes: the reader's time reading
//! MongoDB and building batches, the sender's time enqueueing tasks and
//! waiting for Meilisearch, the acknowledger's time, and the time each end
//! of the pipeline stood idle waiting for the other.
//!
//! Each stage adds the wall time of what it was doing; the stages run
//! concurrently (reader, sender, acknowledger, and both collections), so the
//! phases overlap and may add up to more than the run's duration. Within one
//! stage they do not overlap: the reader's time is `read + build +
//! readerWaited`, the sender's `send + meiliWait + ackWaited + pipelineWaited`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::metrics::SYNC_PHASES;

/// The phases, as counted while a run goes (nanoseconds, in [`Phase`]'s
/// order).
#[derive(Debug, Default)]
pub(crate) struct PhaseClock([AtomicU64; 8]);

/// One phase of [`PhaseClock`], in the order of the metric's labels
/// ([`SYNC_PHASES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Reading pages from MongoDB.
    Read,
    /// Shaping documents and serializing them to NDJSON batches.
    Build,
    /// Enqueueing batches in Meilisearch (the HTTP request).
    Send,
    /// The sender waiting for Meilisearch tasks to end: the in-flight budget
    /// is full, or the last tasks of a pass are running (includes isolating
    /// rejected documents).
    MeiliWait,
    /// Version-exact acknowledgement statements and their repairs.
    Ack,
    /// The sender with no room to enqueue while settled batches wait for
    /// the acknowledger's queue (acknowledging is behind: their bytes still
    /// count against the in-flight budget).
    AckWaited,
    /// The reader waiting on the sender: for its demand before reading the
    /// next page, or holding a second finished batch of one page.
    ReaderWaited,
    /// The sender with room for another batch, waiting for the reader.
    PipelineWaited,
}

impl PhaseClock {
    /// Adds `elapsed` to `phase`.
    pub(crate) fn add(&self, phase: Phase, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.0[phase as usize].fetch_add(nanos, Ordering::Relaxed);
    }

    /// The phases so far, in seconds.
    pub(crate) fn snapshot(&self) -> Phases {
        Phases(std::array::from_fn(|i| {
            self.0[i].load(Ordering::Relaxed) as f64 / 1e9
        }))
    }
}

/// Seconds a run spent in each phase (see the module documentation), in
/// [`Phase`]'s order, as the run summary carries them (`phases` in the log
/// line, `status --json` and `/status`): an object keyed by each phase's
/// metric label in camelCase with `Secs` after it (`meiliWaitSecs`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Phases([f64; 8]);

impl Serialize for Phases {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let key = |label: &&str| {
            let mut words = label.split('_');
            let first = words.next().unwrap_or_default().to_string();
            let rest: String = words.map(|w| w[..1].to_uppercase() + &w[1..]).collect();
            first + &rest + "Secs"
        };
        serializer.collect_map(SYNC_PHASES.iter().map(key).zip(self.0))
    }
}

/// Each phase's label (one of [`SYNC_PHASES`]) and seconds, in [`Phase`]'s
/// order (what `metrics::sync_phases` adds up).
impl IntoIterator for &Phases {
    type Item = (&'static str, f64);
    type IntoIter = std::array::IntoIter<(&'static str, f64), 8>;

    fn into_iter(self) -> Self::IntoIter {
        std::array::from_fn(|i| (SYNC_PHASES[i], self.0[i])).into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_has_its_own_metric_label_and_json_key() {
        use Phase::*;
        let labels = [
            (Read, "read", "readSecs"),
            (Build, "build", "buildSecs"),
            (Send, "send", "sendSecs"),
            (MeiliWait, "meili_wait", "meiliWaitSecs"),
            (Ack, "ack", "ackSecs"),
            (AckWaited, "ack_waited", "ackWaitedSecs"),
            (ReaderWaited, "reader_waited", "readerWaitedSecs"),
            (PipelineWaited, "pipeline_waited", "pipelineWaitedSecs"),
        ];
        assert_eq!(SYNC_PHASES.len(), labels.len());
        let clock = PhaseClock::default();
        for (i, (phase, _, _)) in labels.iter().enumerate() {
            clock.add(*phase, Duration::from_secs(i as u64 + 1));
        }
        let json = serde_json::to_value(clock.snapshot()).unwrap();
        for (i, (phase, label, key)) in labels.into_iter().enumerate() {
            assert_eq!(SYNC_PHASES[phase as usize], label);
            assert_eq!(json[key], (i + 1) as f64, "{key} in {json}");
        }
    }

    #[test]
    fn phases_add_up_per_phase_and_serialize_in_seconds() {
        let clock = PhaseClock::default();
        clock.add(Phase::Read, Duration::from_millis(1500));
        clock.add(Phase::Read, Duration::from_millis(500));
        clock.add(Phase::PipelineWaited, Duration::from_millis(250));
        let phases = clock.snapshot();
        assert_eq!(phases.0[Phase::Read as usize], 2.0);
        assert_eq!(phases.0[Phase::PipelineWaited as usize], 0.25);
        assert_eq!(phases.0[Phase::Ack as usize], 0.0);
        let json = serde_json::to_value(&phases).unwrap();
        assert_eq!(json["readSecs"], 2.0);
        assert_eq!(json["pipelineWaitedSecs"], 0.25);
        assert_eq!(json["meiliWaitSecs"], 0.0);
        let text = phases.to_string();
        assert!(text.contains("read 2.0 s"), "{text}");
        assert!(text.contains("pipeline waited 0.2 s"), "{text}");
    }
}
