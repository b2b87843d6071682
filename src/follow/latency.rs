//! Where follow mode's delay goes (docs/design.md §4.12, §7.5): for every
//! document a micro-batch writes to Meilisearch (an addition or a
//! deletion), the time from MongoDB applying its change to this replica
//! seeing the Meilisearch task that carries it end, cut into stages:
//!
//! | stage | from | to |
//! |---|---|---|
//! | `delivery` | MongoDB applied the change (`wallTime`, MongoDB's clock) | the stream's reader received it |
//! | `gathering` | received | its micro-batch was due (full, `max_wait` old, or the stream caught up), less `behind_settle` |
//! | `behind_settle` | (within the same span) | the owner was settling older micro-batches, which nothing is enqueued beside |
//! | `room_wait` | due | the pipeline had room for it (the micro-batches ahead of it were in flight) |
//! | `prepare` | taken for applying | its writes begin (MongoDB's clock, the decisions, the flag check) |
//! | `enqueue` | its writes begin | every task of it is enqueued |
//! | `meili_queued` | Meilisearch enqueued its first task (`enqueuedAt`) | Meilisearch started its last (`startedAt`): tasks ahead of it |
//! | `meili_processing` | `startedAt` | `finishedAt` of its last task |
//! | `detection` | `finishedAt` | this replica saw the task ended (its polling) |
//! | `total` | MongoDB applied the change | seen ended |
//!
//! Meilisearch's stages are measured with Meilisearch's own timestamps
//! only, and `detection` is what the wait took beyond them, so no two
//! machines' clocks are compared; `delivery` converts the reader's clock to
//! MongoDB's with the offset measured at the micro-batch's clock read.
//! Each stage goes to the Prometheus histogram `reconciler_follow_stage_seconds`
//! (label `stage`, `crate::metrics`), so a reader of `/metrics` can subtract
//! two scrapes and take percentiles of what happened in between. Per
//! micro-batch (not per document), in `reconciler_follow_batch_stage_seconds`:
//! what settling it took (poison isolation, acknowledgement, removal
//! markers) and saving its resume token; and in
//! `reconciler_follow_micro_batches_in_flight`, how many micro-batches were
//! in flight when it was enqueued.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mongodb::bson::DateTime;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::metrics;

/// Settlings remembered for `behind_settle`: more than a micro-batch
/// gathers through.
const SETTLINGS_KEPT: usize = 256;

/// The owner's latest settlings (start, end), oldest first: what a
/// document's gathering spent behind them is `behind_settle`.
#[derive(Debug, Default)]
pub(crate) struct Settlings(VecDeque<(Instant, Instant)>);

impl Settlings {
    /// The owner settled micro-batches from `start` until now (its
    /// `settle` stage).
    pub(crate) fn settled(&mut self, start: Instant) {
        let end = Instant::now();
        metrics::follow_batch_stage("settle", end - start);
        if self.0.len() == SETTLINGS_KEPT {
            self.0.pop_front();
        }
        self.0.push_back((start, end));
    }

    /// How much of `from`..`to` the owner spent settling.
    fn within(&self, from: Instant, to: Instant) -> Duration {
        self.0
            .iter()
            .map(|&(start, end)| end.min(to).saturating_duration_since(start.max(from)))
            .sum()
    }
}

/// One document's own times: when MongoDB applied its change (MongoDB's
/// clock) and when the reader received it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DocTimes {
    pub(crate) written: Option<DateTime>,
    pub(crate) received: Instant,
}

/// A micro-batch's times, as it goes through the pipeline.
#[derive(Clone, Debug)]
pub(crate) struct BatchTimes {
    pub(crate) held: Option<Instant>,
    pub(crate) drained: Instant,
    pub(crate) writing: Instant,
    pub(crate) enqueued: Instant,
    /// MongoDB's clock minus the local one (ms) at the micro-batch's clock read.
    pub(crate) server_offset_ms: i64,
    pub(crate) depth: usize,
}

/// Meilisearch's timestamps of a micro-batch's tasks: the first task's
/// `enqueuedAt`, the last one's `startedAt` and `finishedAt`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TaskTimes {
    queued: Duration,
    processing: Duration,
}

impl TaskTimes {
    /// From the task objects Meilisearch returned (in the order enqueued);
    /// `None` when a timestamp is missing or does not parse.
    pub(crate) fn of<'a>(tasks: impl IntoIterator<Item = &'a Value>) -> Option<TaskTimes> {
        let at =
            |task: &Value, field: &str| OffsetDateTime::parse(task[field].as_str()?, &Rfc3339).ok();
        let mut first_enqueued = None;
        let mut last = None;
        for task in tasks {
            first_enqueued = first_enqueued.or(at(task, "enqueuedAt"));
            last = Some((at(task, "startedAt")?, at(task, "finishedAt")?));
        }
        let (started, finished) = last?;
        let span = |from, to: OffsetDateTime| Duration::try_from(to - from).unwrap_or_default();
        Some(TaskTimes {
            queued: span(first_enqueued?, started),
            processing: span(started, finished),
        })
    }
}

/// Records one micro-batch's stages: `docs` written by it, its `times`,
/// its tasks' (`None` when it enqueued none), and when its end was seen.
pub(crate) fn record(
    settlings: &Settlings,
    docs: &[DocTimes],
    times: &BatchTimes,
    tasks: Option<TaskTimes>,
    seen: Instant,
) {
    metrics::follow_in_flight(times.depth);
    let now = (Instant::now(), DateTime::now().timestamp_millis());
    let mut out = metrics::follow_stage;
    stages(settlings, docs, times, tasks, seen, now, &mut out);
}

/// Gives `out` each stage's time, with how many of `docs` took it: the
/// micro-batch's own stages once for all of them, the others per document.
/// `now`: the local clock as an `Instant` and in ms.
fn stages(
    settlings: &Settlings,
    docs: &[DocTimes],
    times: &BatchTimes,
    tasks: Option<TaskTimes>,
    seen: Instant,
    (now_instant, now_ms): (Instant, i64),
    out: &mut impl FnMut(&'static str, Duration, usize),
) {
    let since = |later: Instant, earlier: Instant| later.saturating_duration_since(earlier);
    let due = times.held.unwrap_or(times.drained);
    let n = docs.len();
    out("room_wait", since(times.drained, due), n);
    out("prepare", since(times.writing, times.drained), n);
    out("enqueue", since(times.enqueued, times.writing), n);
    if let Some(TaskTimes { queued, processing }) = tasks {
        out("meili_queued", queued, n);
        out("meili_processing", processing, n);
        let waited = since(seen, times.enqueued);
        out("detection", waited.saturating_sub(queued + processing), n);
    }
    for doc in docs {
        // The reader's clock at reception, as MongoDB's time.
        let received = now_ms - since(now_instant, doc.received).as_millis() as i64;
        let received_ms = received + times.server_offset_ms;
        let delivery = doc
            .written
            .map(|at| Duration::from_millis((received_ms - at.timestamp_millis()).max(0) as u64));
        if let Some(delivery) = delivery {
            out("delivery", delivery, 1);
        }
        let behind = settlings.within(doc.received, due);
        let gathering = since(due, doc.received).saturating_sub(behind);
        out("gathering", gathering, 1);
        out("behind_settle", behind, 1);
        let total = delivery.unwrap_or_default() + since(seen, doc.received);
        out("total", total, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Stages = Vec<(&'static str, Duration, usize)>;

    /// Each stage's time, with how many documents took it.
    fn collect(
        settlings: &Settlings,
        docs: &[DocTimes],
        times: &BatchTimes,
        tasks: Option<TaskTimes>,
        seen: Instant,
        now: (Instant, i64),
    ) -> Stages {
        let mut out = Vec::new();
        stages(
            settlings,
            docs,
            times,
            tasks,
            seen,
            now,
            &mut |stage, took, n| out.push((stage, took, n)),
        );
        out
    }

    /// Each stage's summed time and count.
    fn totals(stages: &Stages, stage: &str) -> (Duration, usize) {
        stages
            .iter()
            .filter(|(s, _, _)| *s == stage)
            .fold((Duration::ZERO, 0), |(sum, count), (_, took, n)| {
                (sum + *took * *n as u32, count + n)
            })
    }

    #[test]
    fn meilisearch_s_own_timestamps_give_its_stages() {
        let tasks = [
            json!({ "enqueuedAt": "2025-01-01T00:00:00.100Z", "startedAt": "2025-01-01T00:00:00.500Z", "finishedAt": "2025-01-01T00:00:01.000Z" }),
            json!({ "enqueuedAt": "2025-01-01T00:00:00.200Z", "startedAt": "2025-01-01T00:00:01.000Z", "finishedAt": "2025-01-01T00:00:01.700Z" }),
        ];
        let t = TaskTimes::of(&tasks).unwrap();
        assert_eq!(
            t.queued,
            Duration::from_millis(900),
            "first enqueued → last started"
        );
        assert_eq!(t.processing, Duration::from_millis(700));
        assert!(TaskTimes::of(&[json!({ "enqueuedAt": "x" })]).is_none());
    }

    #[test]
    fn gathering_behind_a_settling_is_told_apart() {
        let mut settlings = Settlings::default();
        let received = Instant::now();
        let ms = Duration::from_millis;
        // Settlings before, across and after its gathering (0–500 ms).
        settlings.0.extend([
            (received - ms(300), received + ms(100)),
            (received + ms(200), received + ms(250)),
            (received + ms(600), received + ms(900)),
        ]);
        let due = received + ms(500);
        let times = BatchTimes {
            held: None,
            drained: due,
            writing: due,
            enqueued: due,
            server_offset_ms: 0,
            depth: 1,
        };
        let docs = [DocTimes {
            written: None,
            received,
        }];
        let stages = collect(&settlings, &docs, &times, None, due, (due, 0));
        assert_eq!(totals(&stages, "behind_settle"), (ms(150), 1));
        assert_eq!(totals(&stages, "gathering"), (ms(350), 1));
    }

    #[test]
    fn a_micro_batch_s_documents_fill_every_stage() {
        let start = Instant::now();
        let times = BatchTimes {
            held: None,
            drained: start,
            writing: start + Duration::from_millis(20),
            enqueued: start + Duration::from_millis(50),
            server_offset_ms: 0,
            depth: 2,
        };
        let doc = DocTimes {
            written: Some(DateTime::now()),
            received: start,
        };
        let tasks = TaskTimes {
            queued: Duration::ZERO,
            processing: Duration::ZERO,
        };
        let now = (start, DateTime::now().timestamp_millis());
        let stages = collect(
            &Settlings::default(),
            &[doc, doc],
            &times,
            Some(tasks),
            start,
            now,
        );
        for stage in metrics::FOLLOW_STAGES {
            assert_eq!(totals(&stages, stage).1, 2, "{stage}");
        }
        assert_eq!(totals(&stages, "enqueue").0, Duration::from_millis(60));
    }
}
