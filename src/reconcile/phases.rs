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

use serde::{Deserialize, Serialize};

/// The phases, as counted while a run goes (nanoseconds, in [`Phase`]'s
/// order).
#[derive(Debug, Default)]
pub(crate) struct PhaseClock([AtomicU64; 8]);

/// One phase of [`PhaseClock`].
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

impl Phase {
    /// Every phase, in the order they are shown.
    const ALL: [Phase; 8] = [
        Phase::Read,
        Phase::Build,
        Phase::Send,
        Phase::MeiliWait,
        Phase::Ack,
        Phase::AckWaited,
        Phase::ReaderWaited,
        Phase::PipelineWaited,
    ];

    /// The `phase` label of the metric (one of `metrics::SYNC_PHASES`).
    fn label(self) -> &'static str {
        match self {
            Phase::Read => "read",
            Phase::Build => "build",
            Phase::Send => "send",
            Phase::MeiliWait => "meili_wait",
            Phase::Ack => "ack",
            Phase::AckWaited => "ack_waited",
            Phase::ReaderWaited => "reader_waited",
            Phase::PipelineWaited => "pipeline_waited",
        }
    }
}

impl PhaseClock {
    /// Adds `elapsed` to `phase`.
    pub(crate) fn add(&self, phase: Phase, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.0[phase as usize].fetch_add(nanos, Ordering::Relaxed);
    }

    fn secs(&self, phase: Phase) -> f64 {
        self.0[phase as usize].load(Ordering::Relaxed) as f64 / 1e9
    }

    /// The phases so far, in seconds.
    pub(crate) fn snapshot(&self) -> Phases {
        Phases {
            read_secs: self.secs(Phase::Read),
            build_secs: self.secs(Phase::Build),
            send_secs: self.secs(Phase::Send),
            meili_wait_secs: self.secs(Phase::MeiliWait),
            ack_secs: self.secs(Phase::Ack),
            ack_waited_secs: self.secs(Phase::AckWaited),
            reader_waited_secs: self.secs(Phase::ReaderWaited),
            pipeline_waited_secs: self.secs(Phase::PipelineWaited),
        }
    }
}

/// Seconds a run spent in each phase (see the module documentation), as
/// the run summary carries them (`phases` in the log line, `status --json`
/// and `/status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Phases {
    read_secs: f64,
    build_secs: f64,
    send_secs: f64,
    meili_wait_secs: f64,
    ack_secs: f64,
    ack_waited_secs: f64,
    reader_waited_secs: f64,
    pipeline_waited_secs: f64,
}

impl Phases {
    /// Seconds of `phase`.
    fn get(&self, phase: Phase) -> f64 {
        match phase {
            Phase::Read => self.read_secs,
            Phase::Build => self.build_secs,
            Phase::Send => self.send_secs,
            Phase::MeiliWait => self.meili_wait_secs,
            Phase::Ack => self.ack_secs,
            Phase::AckWaited => self.ack_waited_secs,
            Phase::ReaderWaited => self.reader_waited_secs,
            Phase::PipelineWaited => self.pipeline_waited_secs,
        }
    }
}

/// Each phase's label and seconds, in [`Phase::ALL`]'s order (what
/// `metrics::sync_phases` adds up).
impl IntoIterator for &Phases {
    type Item = (&'static str, f64);
    type IntoIter = std::array::IntoIter<(&'static str, f64), 8>;

    fn into_iter(self) -> Self::IntoIter {
        Phase::ALL.map(|p| (p.label(), self.get(p))).into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metric_lists_every_phase_label() {
        assert_eq!(
            Phase::ALL.map(Phase::label).as_slice(),
            crate::metrics::SYNC_PHASES
        );
    }

    #[test]
    fn phases_add_up_per_phase_and_serialize_in_seconds() {
        let clock = PhaseClock::default();
        clock.add(Phase::Read, Duration::from_millis(1500));
        clock.add(Phase::Read, Duration::from_millis(500));
        clock.add(Phase::PipelineWaited, Duration::from_millis(250));
        let phases = clock.snapshot();
        assert_eq!(phases.read_secs, 2.0);
        assert_eq!(phases.pipeline_waited_secs, 0.25);
        assert_eq!(phases.ack_secs, 0.0);
        let json = serde_json::to_value(&phases).unwrap();
        assert_eq!(json["readSecs"], 2.0);
        assert_eq!(json["pipelineWaitedSecs"], 0.25);
        let text = phases.to_string();
        assert!(text.contains("read 2.0 s"), "{text}");
        assert!(text.contains("pipeline waited 0.2 s"), "{text}");
    }
}
