//! Where follow mode's delay goes (docs/design.md §4.12, §7.5): for every
//! document a micro-batch writes to Meilisearch (an addition or a
//! deletion), the time from MongoDB applying its change to this replica
//! seeing the Meilisearch task that carries it end, cut into stages:
//!
//! | stage | from | to |
//! |---|---|---|
//! | `delivery` | MongoDB applied the change (`wallTime`, MongoDB's clock) | the stream's reader received it |
//! | `gathering` | received | its micro-batch was due (full, `max_wait` old, or the stream caught up), less `behindSettle` |
//! | `behindSettle` | (within the same span) | the owner was settling older micro-batches, which nothing is enqueued beside |
//! | `roomWait` | due | the pipeline had room for it (the micro-batches ahead of it were in flight) |
//! | `prepare` | taken for applying | its writes begin (MongoDB's clock, the decisions, the flag check) |
//! | `enqueue` | its writes begin | every task of it is enqueued |
//! | `meiliQueued` | Meilisearch enqueued its first task (`enqueuedAt`) | Meilisearch started its last (`startedAt`): tasks ahead of it |
//! | `meiliProcessing` | `startedAt` | `finishedAt` of its last task |
//! | `detection` | `finishedAt` | this replica saw the task ended (its polling) |
//! | `total` | MongoDB applied the change | seen ended |
//!
//! Meilisearch's stages are measured with Meilisearch's own timestamps
//! only, and `detection` is what the wait took beyond them, so no two
//! machines' clocks are compared; `delivery` converts the reader's clock to
//! MongoDB's with the offset measured at the micro-batch's clock read.
//! Each stage is a histogram of 10 ms buckets up to 10 s (and one beyond),
//! so a reader of `/status` can subtract two snapshots and take any
//! percentile of what happened in between. Per micro-batch (not per
//! document): what settling it took (poison isolation, acknowledgement,
//! removal markers) and saving its resume token, and how many micro-batches
//! were in flight when it was enqueued.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mongodb::bson::DateTime;
use serde::Serialize;
use serde_json::Value;

/// The per-document stages, in the order they happen.
pub(crate) const STAGES: [&str; 10] = [
    "delivery",
    "gathering",
    "behindSettle",
    "roomWait",
    "prepare",
    "enqueue",
    "meiliQueued",
    "meiliProcessing",
    "detection",
    "total",
];

/// The per-micro-batch stages.
pub(crate) const BATCH_STAGES: [&str; 2] = ["settle", "tokenSave"];

const BUCKET_MS: u64 = 10;
/// Settlings remembered for `behindSettle`: more than a micro-batch
/// gathers through.
const SETTLINGS_KEPT: usize = 256;
const BUCKETS: usize = 1_000;

/// Durations in 10 ms buckets (the last one holds everything from 10 s).
#[derive(Clone, Debug, Default)]
pub(crate) struct Histogram {
    counts: BTreeMap<usize, u64>,
    count: u64,
    sum: Duration,
    max: Duration,
}

impl Histogram {
    fn add(&mut self, d: Duration) {
        let bucket = ((d.as_millis() as u64) / BUCKET_MS).min(BUCKETS as u64) as usize;
        *self.counts.entry(bucket).or_default() += 1;
        self.count += 1;
        self.sum += d;
        self.max = self.max.max(d);
    }

    fn view(&self) -> HistogramView {
        HistogramView {
            count: self.count,
            sum_secs: self.sum.as_secs_f64(),
            max_secs: self.max.as_secs_f64(),
            bucket_ms: BUCKET_MS,
            buckets: self
                .counts
                .iter()
                .map(|(b, n)| ((b * BUCKET_MS as usize).to_string(), *n))
                .collect(),
        }
    }
}

/// A histogram as `/status` shows it: `buckets` maps each bucket's lower
/// bound in ms to its count (empty buckets left out).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HistogramView {
    count: u64,
    sum_secs: f64,
    max_secs: f64,
    bucket_ms: u64,
    buckets: BTreeMap<String, u64>,
}

/// Every stage's histogram since this replica started.
#[derive(Clone, Debug, Default)]
pub(crate) struct Latency {
    stages: BTreeMap<&'static str, Histogram>,
    micro_batches: u64,
    depth: BTreeMap<usize, u64>,
    /// The latest settlings (start, end), oldest first.
    settlings: std::collections::VecDeque<(Instant, Instant)>,
}

/// `follow.latency` in `/status`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LatencyView {
    /// Per document written to Meilisearch, by stage (see the module).
    stages: BTreeMap<&'static str, HistogramView>,
    /// Per micro-batch applied: `settle`, `tokenSave`.
    batch_stages: BTreeMap<&'static str, HistogramView>,
    /// Micro-batches applied.
    micro_batches: u64,
    /// How many micro-batches were in flight (this one included) when each
    /// was enqueued, and how often.
    depth: BTreeMap<String, u64>,
}

impl Latency {
    pub(crate) fn add(&mut self, stage: &'static str, d: Duration) {
        self.stages.entry(stage).or_default().add(d);
    }

    /// The owner settled micro-batches from `start` to `end`.
    pub(crate) fn settled(&mut self, start: Instant, end: Instant) {
        if self.settlings.len() == SETTLINGS_KEPT {
            self.settlings.pop_front();
        }
        self.settlings.push_back((start, end));
    }

    /// How much of `from`..`to` the owner spent settling.
    fn settling_within(&self, from: Instant, to: Instant) -> Duration {
        self.settlings
            .iter()
            .map(|&(start, end)| end.min(to).saturating_duration_since(start.max(from)))
            .sum()
    }

    fn micro_batch(&mut self, depth: usize) {
        self.micro_batches += 1;
        *self.depth.entry(depth).or_default() += 1;
    }

    pub(crate) fn view(&self) -> LatencyView {
        let views = |names: &[&'static str]| {
            names
                .iter()
                .map(|name| {
                    let h = self.stages.get(name).cloned().unwrap_or_default();
                    (*name, h.view())
                })
                .collect()
        };
        LatencyView {
            stages: views(&STAGES),
            batch_stages: views(&BATCH_STAGES),
            micro_batches: self.micro_batches,
            depth: self
                .depth
                .iter()
                .map(|(d, n)| (d.to_string(), *n))
                .collect(),
        }
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
        let mut first_enqueued = None;
        let mut last = None;
        for task in tasks {
            let at = |field: &str| {
                let text = task[field].as_str()?;
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .ok()
            };
            first_enqueued = first_enqueued.or(at("enqueuedAt"));
            last = Some((at("startedAt")?, at("finishedAt")?));
        }
        let (started, finished) = last?;
        let span = |from: time::OffsetDateTime, to: time::OffsetDateTime| {
            Duration::try_from(to - from).unwrap_or_default()
        };
        Some(TaskTimes {
            queued: span(first_enqueued?, started),
            processing: span(started, finished),
        })
    }
}

/// Adds one micro-batch's documents to `latency`: `docs` written by it,
/// its `times`, its tasks' (`None` when it enqueued none), and when its
/// end was seen.
pub(crate) fn record(
    latency: &mut Latency,
    docs: &[DocTimes],
    times: &BatchTimes,
    tasks: Option<TaskTimes>,
    seen: Instant,
) {
    latency.micro_batch(times.depth);
    let since = |later: Instant, earlier: Instant| later.saturating_duration_since(earlier);
    let due = times.held.unwrap_or(times.drained);
    let (now_instant, now_ms) = (Instant::now(), DateTime::now().timestamp_millis());
    for doc in docs {
        // The reader's clock at reception, as MongoDB's time.
        let received_ms =
            now_ms - since(now_instant, doc.received).as_millis() as i64 + times.server_offset_ms;
        let delivery = doc
            .written
            .map(|at| Duration::from_millis((received_ms - at.timestamp_millis()).max(0) as u64));
        if let Some(delivery) = delivery {
            latency.add("delivery", delivery);
        }
        let behind = latency.settling_within(doc.received, due);
        latency.add("gathering", since(due, doc.received).saturating_sub(behind));
        latency.add("behindSettle", behind);
        latency.add("roomWait", since(times.drained, due));
        latency.add("prepare", since(times.writing, times.drained));
        latency.add("enqueue", since(times.enqueued, times.writing));
        if let Some(tasks) = tasks {
            latency.add("meiliQueued", tasks.queued);
            latency.add("meiliProcessing", tasks.processing);
            let waited = since(seen, times.enqueued);
            latency.add(
                "detection",
                waited.saturating_sub(tasks.queued + tasks.processing),
            );
        }
        latency.add(
            "total",
            delivery.unwrap_or_default() + since(seen, doc.received),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let mut latency = Latency::default();
        let received = Instant::now();
        let ms = Duration::from_millis;
        // Settlings before, across and after its gathering (0–500 ms).
        latency.settled(received - ms(300), received + ms(100));
        latency.settled(received + ms(200), received + ms(250));
        latency.settled(received + ms(600), received + ms(900));
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
        record(&mut latency, &docs, &times, None, due);
        let view = latency.view();
        assert_eq!(view.stages["behindSettle"].sum_secs, 0.15);
        assert_eq!(view.stages["gathering"].sum_secs, 0.35);
    }

    #[test]
    fn a_micro_batch_s_documents_fill_every_stage() {
        let mut latency = Latency::default();
        let start = Instant::now();
        let times = BatchTimes {
            held: None,
            drained: start,
            writing: start,
            enqueued: start,
            server_offset_ms: 0,
            depth: 2,
        };
        let docs = [DocTimes {
            written: Some(DateTime::now()),
            received: start,
        }];
        let tasks = TaskTimes {
            queued: Duration::ZERO,
            processing: Duration::ZERO,
        };
        record(&mut latency, &docs, &times, Some(tasks), start);
        let view = latency.view();
        for stage in STAGES {
            assert_eq!(view.stages[stage].count, 1, "{stage}");
        }
        assert_eq!(view.micro_batches, 1);
        assert_eq!(view.depth["2"], 1);
        let mut h = Histogram::default();
        h.add(Duration::from_millis(15));
        h.add(Duration::from_secs(60));
        let v = h.view();
        assert_eq!(v.buckets["10"], 1);
        assert_eq!(v.buckets["10000"], 1, "beyond 10 s: the last bucket");
    }
}
