//! `meili-bench-follow`: the writer and the clock of `scripts/bench-follow`
//! (docs/design.md §7), run against a `meili-reconciler run` replica that
//! follows change streams on the same database and index prefix.
//!
//! A phase writes LibreChat-shaped messages at a steady rate (inserts,
//! edits of messages already seen in Meilisearch — every save with
//! `_meiliIndex: false` and a new `updatedAt` — and, with
//! `--delete-fraction`, deletes of such messages) and measures, per write,
//! the delay from MongoDB's acknowledgement of the write to the version
//! being returned by Meilisearch, or a deleted message no longer being
//! returned (a document fetch, polled); p50 / p99 overall and per kind. A fraction of the
//! writes can behave like LibreChat's save hook: after the save, the writer
//! adds the document to Meilisearch itself and sets `_meiliIndex: true`;
//! those are not timed, and the follower's `skipped` count (its `/status`)
//! says how many it did not send again.
//!
//! The main phase runs at `--rate` for `--secs`; then `--step-rates` are
//! tried for `--step-secs` each, in order, until one is not sustained: the
//! writer fell short of the rate, some write never showed up within
//! `--drain-secs`, or the delay grew over the phase (the last third's median
//! above twice the first third's plus 250 ms).
//!
//! `--docs-per-request K` writes K documents a request: K inserts as one
//! `insertMany`, K edits as one `updateMany` (one text for all K), a hook's
//! K documents as one Meilisearch task and one flag update — the same
//! documents a second, in K times fewer requests, for a MongoDB that
//! answers one request at a time (secantusdb) and cannot take the rate
//! one document a request. Each of the K is timed from the request's
//! acknowledgement.
//!
//! Per phase it also reports where the delay went, from the follower's
//! own account (`reconciler_follow_stage_seconds` in its `/metrics`: per
//! document written to Meilisearch, a histogram of each stage — delivery
//! by the change stream, gathering into a micro-batch, waiting behind the
//! settling of older micro-batches, waiting for room in the pipeline, its
//! preparation and enqueueing, waiting behind other tasks in Meilisearch,
//! Meilisearch's processing, the follower noticing the task's end —
//! scraped before and after the phase and subtracted; percentiles to the
//! upper bound of their bucket), and how many MongoDB requests were made
//! per write (`serverStatus` opcounters before and after, less the
//! writer's own writes: what the follower asked, on a server nothing else
//! uses).
//!
//! Prints one JSON object on stdout; progress goes to stderr.

#[path = "bench_servers.rs"]
mod bench_servers;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use mongodb::bson::{doc, oid::ObjectId, DateTime, Document};
use mongodb::Collection;
use rand::Rng;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser, Debug)]
#[command(name = "meili-bench-follow", version)]
struct Args {
    #[command(flatten)]
    servers: bench_servers::ServerArgs,
    /// The database the follower follows.
    #[arg(long)]
    database: String,
    /// The follower's index prefix (`<prefix>messages`).
    #[arg(long, default_value = "")]
    index_prefix: String,
    /// The follower's HTTP address (`http://host:port`), for its `/status`.
    #[arg(long)]
    status_url: String,
    /// Writes per second of the main phase.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Seconds of the main phase.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Fraction of the main phase's writes that behave like LibreChat's save hook.
    #[arg(long, default_value_t = 0.2)]
    hook_fraction: f64,
    /// Fraction of writes that edit a message instead of inserting one.
    #[arg(long, default_value_t = 0.3)]
    edit_fraction: f64,
    /// Fraction of writes that delete a message already seen in
    /// Meilisearch (timed until Meilisearch no longer returns it).
    #[arg(long, default_value_t = 0.0)]
    delete_fraction: f64,
    /// Documents written by one request (all inserts, all edits, or all
    /// like the save hook); the rate stays in documents a second.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    docs_per_request: u64,
    /// Rates tried after the main phase, until one is not sustained ("" for none).
    #[arg(long, default_value = "100,200,400,800,1600")]
    step_rates: String,
    /// Seconds of each step.
    #[arg(long, default_value_t = 15)]
    step_secs: u64,
    /// How long after a phase's last write its documents may take to show up.
    #[arg(long, default_value_t = 30)]
    drain_secs: u64,
    /// Only the writer: nothing follows, nothing is timed (edits pick the
    /// writer's own earlier inserts). What the MongoDB server sustains by
    /// itself (`--status-url` is not asked).
    #[arg(long)]
    writer_only: bool,
}

/// One write whose version is awaited in Meilisearch.
struct Pending {
    id: ObjectId,
    message_id: String,
    /// The text Meilisearch must return; `None`: the message was deleted
    /// and must be gone.
    text: Option<String>,
    kind: Kind,
    acked: Instant,
    /// Seconds since the phase began, when MongoDB acknowledged it.
    at: f64,
}

/// The kind of a timed write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Insert,
    Edit,
    Delete,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Insert, Kind::Edit, Kind::Delete];

    fn name(self) -> &'static str {
        match self {
            Kind::Insert => "insert",
            Kind::Edit => "edit",
            Kind::Delete => "delete",
        }
    }
}

/// What the checker found.
#[derive(Default)]
struct Seen {
    /// (seconds into the phase, delay in seconds, kind) per timed write.
    delays: Vec<(f64, f64, Kind)>,
    /// Messages whose last write was seen (editable without ambiguity).
    settled: Vec<(ObjectId, String)>,
}

struct Bench {
    client: mongodb::Client,
    messages: Collection<Document>,
    meili: meilisearch_sdk::indexes::Index,
    args: Args,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = mongodb::Client::with_uri_str(&args.servers.mongo_uri)
        .await
        .context("invalid MongoDB connection string")?;
    let messages = client
        .database(&args.database)
        .collection::<Document>("messages");
    let meili = meilisearch_sdk::client::Client::new(
        &args.servers.meili_host,
        Some(&args.servers.meili_key),
    )?
    .index(format!("{}messages", args.index_prefix));
    let bench = Arc::new(Bench {
        client: client.clone(),
        messages,
        meili,
        args,
    });
    let args = &bench.args;
    eprintln!(
        "meili-bench-follow: main phase: {} writes/s for {} s, {:.0}% edits, {:.0}% deletes, {:.0}% of inserts like LibreChat's save hook",
        args.rate,
        args.secs,
        args.edit_fraction * 100.0,
        args.delete_fraction * 100.0,
        args.hook_fraction * 100.0
    );
    anyhow::ensure!(
        (0.0..=1.0).contains(&(args.edit_fraction + args.delete_fraction))
            && args.edit_fraction >= 0.0
            && args.delete_fraction >= 0.0,
        "--edit-fraction and --delete-fraction must each be ≥ 0 and sum to at most 1"
    );
    let main = phase(&bench, "main", args.rate, args.secs, args.hook_fraction).await?;
    let mut steps = Vec::new();
    let mut max_sustained: Option<f64> = None;
    for rate in args
        .step_rates
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
    {
        let rate: f64 = rate.parse().context("--step-rates takes numbers")?;
        eprintln!(
            "meili-bench-follow: step: {rate} writes/s for {} s",
            args.step_secs
        );
        let report = phase(&bench, &format!("step{rate}"), rate, args.step_secs, 0.0).await?;
        let sustained = report["sustained"].as_bool().unwrap_or(false);
        steps.push(report);
        if !sustained {
            break;
        }
        max_sustained = Some(rate);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "main": main,
            "steps": steps,
            "maxSustainedRate": max_sustained,
        }))?
    );
    // End the driver's sessions while the runtime still runs: a client
    // dropped as `main` returns spawns that work onto a runtime shutting
    // down, where it can panic on the closed connection pool and print a
    // backtrace after the report.
    client.shutdown().immediate(true).await;
    Ok(())
}

/// The body of the follower's `path` (`/status`, `/metrics`).
async fn get(status_url: &str, path: &str) -> anyhow::Result<String> {
    let authority = status_url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await?;
    Ok(reply.split("\r\n\r\n").nth(1).unwrap_or("").to_string())
}

/// The follower's count of skipped documents (already indexed by the hook).
fn skipped(status: &Value) -> u64 {
    status["follow"]["applied"]["skipped"].as_u64().unwrap_or(0)
}

/// The follower's stage histograms (`/metrics`).
const STAGES: &str = "reconciler_follow_stage_seconds";
const BATCH_STAGES: &str = "reconciler_follow_batch_stage_seconds";
const IN_FLIGHT: &str = "reconciler_follow_micro_batches_in_flight";

/// One histogram of a Prometheus scrape: its cumulative buckets (upper
/// bound, count; `+Inf` last, as rendered) and its sum.
#[derive(Clone, Debug, Default)]
struct Histogram {
    buckets: Vec<(f64, f64)>,
    sum: f64,
}

/// The histograms of `family` in a scrape (Prometheus text), by their
/// `stage` label (`""` without one).
fn histograms(text: &str, family: &str) -> BTreeMap<String, Histogram> {
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = series
            .split_once('{')
            .map_or((series, ""), |(n, l)| (n, l.trim_end_matches('}')));
        let Some(part) = name.strip_prefix(family) else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
        };
        let histogram = out.entry(label("stage").unwrap_or("").into()).or_default();
        let value = value.parse().unwrap_or(0.0);
        match (part, label("le").and_then(|le| le.parse().ok())) {
            ("_bucket", Some(le)) => histogram.buckets.push((le, value)),
            ("_sum", _) => histogram.sum = value,
            _ => {}
        }
    }
    out
}

/// `after` less `before`: the cumulative buckets of what was recorded in
/// between, and its sum.
fn difference(before: Option<&Histogram>, after: &Histogram) -> Histogram {
    let earlier = |le: f64| {
        before
            .and_then(|b| b.buckets.iter().find(|(l, _)| *l == le))
            .map_or(0.0, |(_, n)| *n)
    };
    Histogram {
        buckets: after
            .buckets
            .iter()
            .map(|(le, n)| (*le, n - earlier(*le)))
            .collect(),
        sum: after.sum - before.map_or(0.0, |b| b.sum),
    }
}

/// Count, mean, p50 / p99 / max of a histogram's cumulative buckets (each
/// to its bucket's upper bound; `null` beyond the last finite one).
fn summary(h: &Histogram) -> Value {
    let count = h.buckets.last().map_or(0.0, |(_, n)| *n);
    let quantile = |q: f64| {
        let rank = (q * count).ceil().max(1.0);
        h.buckets
            .iter()
            .find(|(_, n)| *n >= rank && count > 0.0)
            .map(|(le, _)| *le)
            .filter(|le| le.is_finite())
    };
    json!({
        "count": count as u64,
        "meanSecs": (count > 0.0).then(|| h.sum / count),
        "p50Secs": quantile(0.5),
        "p99Secs": quantile(0.99),
        "maxSecs": quantile(1.0),
    })
}

/// What happened to each stage between two scrapes of the follower's
/// `/metrics`: per stage [`summary`], the micro-batches applied and how
/// many were in flight when each was enqueued (per bucket), and the stage
/// whose mean is the largest of those `total` is made of.
fn latency_between(before: &str, after: &str) -> Value {
    let mut out = serde_json::Map::new();
    for (group, family) in [("stages", STAGES), ("batchStages", BATCH_STAGES)] {
        let earlier = histograms(before, family);
        let stages: serde_json::Map<String, Value> = histograms(after, family)
            .iter()
            .map(|(name, h)| (name.clone(), summary(&difference(earlier.get(name), h))))
            .collect();
        out.insert(group.into(), Value::Object(stages));
    }
    let in_flight = histograms(after, IN_FLIGHT).remove("").unwrap_or_default();
    let in_flight = difference(histograms(before, IN_FLIGHT).get(""), &in_flight);
    let mut depth = serde_json::Map::new();
    let mut below = 0.0;
    for (le, n) in &in_flight.buckets {
        if n > &below {
            depth.insert(format!("≤{le}"), json!((n - below) as u64));
        }
        below = *n;
    }
    out.insert("microBatches".into(), json!(below as u64));
    out.insert("depth".into(), Value::Object(depth));
    let dominant = out["stages"].as_object().and_then(|stages| {
        stages
            .iter()
            .filter(|(name, _)| name.as_str() != "total")
            .filter_map(|(name, v)| Some((name.clone(), v["meanSecs"].as_f64()?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    });
    out.insert(
        "dominantStage".into(),
        json!(dominant.map(|(name, mean)| json!({ "stage": name, "meanSecs": mean }))),
    );
    Value::Object(out)
}

/// `serverStatus().opcounters` of the MongoDB server.
async fn opcounters(client: &mongodb::Client) -> anyhow::Result<Document> {
    let status = client
        .database("admin")
        .run_command(doc! { "serverStatus": 1 })
        .await?;
    Ok(status
        .get_document("opcounters")
        .cloned()
        .unwrap_or_default())
}

/// The follower's MongoDB requests between two opcounter snapshots, per
/// write: the writer's own insert and update requests (`writer_inserts`,
/// `writer_updates`) and the two `serverStatus` commands are taken out.
fn requests_per_write(
    before: &Document,
    after: &Document,
    writer_inserts: u64,
    writer_updates: u64,
    writer_deletes: u64,
    writes: u64,
) -> Value {
    let delta = |k: &str| {
        let n = |d: &Document| {
            d.get(k)
                .and_then(|v| match v {
                    mongodb::bson::Bson::Int32(n) => Some(*n as i64),
                    mongodb::bson::Bson::Int64(n) => Some(*n),
                    mongodb::bson::Bson::Double(n) => Some(*n as i64),
                    _ => None,
                })
                .unwrap_or(0)
        };
        (n(after) - n(before)).max(0) as u64
    };
    let mut out = serde_json::Map::new();
    let mut total = 0;
    for k in ["insert", "query", "update", "delete", "getmore", "command"] {
        let mut n = delta(k);
        match k {
            "insert" => n = n.saturating_sub(writer_inserts),
            "update" => n = n.saturating_sub(writer_updates),
            "delete" => n = n.saturating_sub(writer_deletes),
            "command" => n = n.saturating_sub(2),
            _ => {}
        }
        total += n;
        out.insert(
            k.to_string(),
            json!((writes > 0).then(|| n as f64 / writes as f64)),
        );
    }
    out.insert(
        "total".into(),
        json!((writes > 0).then(|| total as f64 / writes as f64)),
    );
    Value::Object(out)
}

fn message(phase: &str, n: usize) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "messageId": format!("bench-{phase}-{n}"),
        "conversationId": format!("bench-{phase}-conv-{}", n / 20),
        "user": format!("bench-user-{}", n % 50),
        "sender": if n.is_multiple_of(2) { "User" } else { "GPT-4o" },
        "text": format!("benchmark message {n} of {phase}, about topic {}", n % 97),
        "isCreatedByUser": n.is_multiple_of(2),
        "model": "gpt-4o",
        "createdAt": DateTime::now(),
        "updatedAt": DateTime::now(),
        "_meiliIndex": false,
    }
}

async fn phase(
    bench: &Arc<Bench>,
    name: &str,
    rate: f64,
    secs: u64,
    hook_fraction: f64,
) -> anyhow::Result<Value> {
    let args = &bench.args;
    // The follower's `/status` and `/metrics` (empty without a follower).
    let follower = |path: &'static str| async move {
        if args.writer_only {
            Ok(String::new())
        } else {
            get(&args.status_url, path).await
        }
    };
    let status_before = follower("/status").await?;
    let metrics_before = follower("/metrics").await?;
    let ops_before = opcounters(&bench.client).await.ok();
    let pending: Arc<Mutex<VecDeque<Pending>>> = Arc::default();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let writing_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = (!args.writer_only).then(|| {
        tokio::spawn(check(
            bench.clone(),
            pending.clone(),
            seen.clone(),
            writing_done.clone(),
        ))
    });

    let began = Instant::now();
    let per_request = args.docs_per_request as usize;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(per_request as f64 / rate));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(64));
    let mut writes = FuturesUnordered::new();
    let (mut written, mut hooked, mut edits, mut deletes) = (0usize, 0usize, 0usize, 0usize);
    let (mut insert_requests, mut update_requests, mut delete_requests) = (0u64, 0u64, 0u64);
    while began.elapsed() < Duration::from_secs(secs) {
        ticks.tick().await;
        let permit = in_flight.clone().acquire_owned().await?;
        let n = written;
        written += per_request;
        // Edits and deletes pick messages whose last write was seen (an
        // insert when too few are).
        let draw: f64 = rand::rng().random();
        let kind = if draw < args.edit_fraction {
            Kind::Edit
        } else if draw < args.edit_fraction + args.delete_fraction {
            Kind::Delete
        } else {
            Kind::Insert
        };
        let edit_targets = if kind != Kind::Insert {
            let mut seen = seen.lock().unwrap();
            let settled = seen.settled.len();
            (settled >= per_request).then(|| {
                (0..per_request)
                    .map(|_| {
                        let at = rand::rng().random_range(0..seen.settled.len());
                        seen.settled.swap_remove(at)
                    })
                    .collect::<Vec<_>>()
            })
        } else {
            None
        };
        // Only inserts play the hook (it indexes what was saved, as saved).
        let hook = edit_targets.is_none() && rand::rng().random_bool(hook_fraction.clamp(0.0, 1.0));
        let kind = if edit_targets.is_some() {
            kind
        } else {
            Kind::Insert
        };
        hooked += if hook { per_request } else { 0 };
        let targets = edit_targets.as_ref().map_or(0, Vec::len);
        match kind {
            Kind::Edit => edits += targets,
            Kind::Delete => deletes += targets,
            Kind::Insert => {}
        }
        insert_requests += u64::from(kind == Kind::Insert);
        update_requests += u64::from(kind == Kind::Edit || hook);
        delete_requests += u64::from(kind == Kind::Delete);
        let (bench, pending, name) = (bench.clone(), pending.clone(), name.to_string());
        let seen = seen.clone();
        writes.push(tokio::spawn(async move {
            let _permit = permit;
            let group = Group {
                phase: &name,
                first: n,
                docs: per_request,
                hook,
                edits: edit_targets,
                delete: kind == Kind::Delete,
            };
            let timed = write(&bench, &pending, group, began).await?;
            if bench.args.writer_only {
                // Nothing checks them: editable at once.
                let mut queue = pending.lock().unwrap();
                for id in timed {
                    if let Some(p) = queue
                        .iter()
                        .position(|p| p.id == id)
                        .and_then(|at| queue.remove(at))
                    {
                        if p.text.is_some() {
                            seen.lock().unwrap().settled.push((p.id, p.message_id));
                        }
                    }
                }
            }
            anyhow::Ok(())
        }));
        while let Some(done) = futures::FutureExt::now_or_never(writes.next()).flatten() {
            done??;
        }
    }
    while let Some(done) = writes.next().await {
        done??;
    }
    let wrote_for = began.elapsed().as_secs_f64();
    writing_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let unresolved = match checker {
        Some(checker) => checker.await??,
        None => 0,
    };
    // Let the follower count what it skipped.
    if !args.writer_only {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let status_after = follower("/status").await?;
    let metrics_after = follower("/metrics").await?;
    let ops_after = opcounters(&bench.client).await.ok();
    let status = |text: &str| serde_json::from_str(text).unwrap_or(Value::Null);
    let skipped = skipped(&status(&status_after)).saturating_sub(skipped(&status(&status_before)));
    let latency = latency_between(&metrics_before, &metrics_after);
    let requests = match (&ops_before, &ops_after) {
        (Some(before), Some(after)) => requests_per_write(
            before,
            after,
            insert_requests,
            update_requests,
            delete_requests,
            written as u64,
        ),
        _ => Value::Null,
    };

    let delays = std::mem::take(&mut seen.lock().unwrap().delays);
    let mut all: Vec<f64> = delays.iter().map(|(_, d, _)| *d).collect();
    all.sort_by(|a, b| a.total_cmp(b));
    let mut by_kind = serde_json::Map::new();
    for kind in Kind::ALL {
        let mut part: Vec<f64> = delays
            .iter()
            .filter(|(_, _, k)| *k == kind)
            .map(|(_, d, _)| *d)
            .collect();
        part.sort_by(|a, b| a.total_cmp(b));
        by_kind.insert(
            kind.name().into(),
            json!({
                "timed": part.len(),
                "p50Secs": percentile(&part, 0.5),
                "p99Secs": percentile(&part, 0.99),
                "maxSecs": part.last(),
            }),
        );
    }
    let third = |from: f64, to: f64| {
        let mut part: Vec<f64> = delays
            .iter()
            .filter(|(at, _, _)| *at >= from * wrote_for && *at < to * wrote_for)
            .map(|(_, d, _)| *d)
            .collect();
        part.sort_by(|a, b| a.total_cmp(b));
        percentile(&part, 0.5)
    };
    let (first, last) = (third(0.0, 1.0 / 3.0), third(2.0 / 3.0, 1.01));
    let growing = matches!((first, last), (Some(f), Some(l)) if l > 2.0 * f + 0.25);
    let achieved = written as f64 / wrote_for;
    let sustained = achieved >= 0.95 * rate && unresolved == 0 && !growing;
    let report = json!({
        "phase": name,
        "targetRate": rate,
        "achievedRate": achieved,
        "writes": written,
        "docsPerRequest": per_request,
        "edits": edits,
        "deletes": deletes,
        "hookWrites": hooked,
        "timed": all.len(),
        "p50Secs": percentile(&all, 0.5),
        "p99Secs": percentile(&all, 0.99),
        "maxSecs": all.last(),
        "byKind": by_kind,
        "firstThirdP50Secs": first,
        "lastThirdP50Secs": last,
        "growing": growing,
        "unresolved": unresolved,
        "skippedByFollower": skipped,
        "sustained": sustained,
        "followerLatency": latency,
        "followerMongoRequestsPerWrite": requests,
    });
    eprintln!("meili-bench-follow: {report}");
    Ok(report)
}

fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// The documents one request writes.
struct Group<'a> {
    phase: &'a str,
    /// The phase's number of the first document (names new messages).
    first: usize,
    docs: usize,
    /// Inserts that then do what LibreChat's save hook does.
    hook: bool,
    /// Messages edited (`None`: `docs` new messages inserted).
    edits: Option<Vec<(ObjectId, String)>>,
    /// `edits` are deleted instead (one `deleteMany`).
    delete: bool,
}

/// One save of `group.docs` documents, as LibreChat makes each (and, for a
/// hook group, what its save hook does next); timed writes are queued for
/// the checker. Returns the `_id`s written.
async fn write(
    bench: &Bench,
    pending: &Mutex<VecDeque<Pending>>,
    group: Group<'_>,
    began: Instant,
) -> anyhow::Result<Vec<ObjectId>> {
    let (written, inserted, kind) = match group.edits {
        Some(targets) if group.delete => {
            let ids: Vec<ObjectId> = targets.iter().map(|(id, _)| *id).collect();
            bench
                .messages
                .delete_many(doc! { "_id": { "$in": ids } })
                .await?;
            let written: Vec<_> = targets
                .into_iter()
                .map(|(id, message_id)| (id, message_id, None))
                .collect();
            (written, Vec::new(), Kind::Delete)
        }
        Some(targets) => {
            let text = format!("benchmark message edit {} of {}", group.first, group.phase);
            let ids: Vec<ObjectId> = targets.iter().map(|(id, _)| *id).collect();
            bench
                .messages
                .update_many(
                    doc! { "_id": { "$in": ids.clone() } },
                    doc! { "$set": { "text": &text, "updatedAt": DateTime::now(), "_meiliIndex": false } },
                )
                .await?;
            let written: Vec<_> = targets
                .into_iter()
                .map(|(id, message_id)| (id, message_id, Some(text.clone())))
                .collect();
            (written, Vec::new(), Kind::Edit)
        }
        None => {
            let docs: Vec<Document> = (group.first..group.first + group.docs)
                .map(|n| message(group.phase, n))
                .collect();
            bench.messages.insert_many(&docs).await?;
            let mut written = Vec::with_capacity(docs.len());
            for doc in &docs {
                written.push((
                    doc.get_object_id("_id")?,
                    doc.get_str("messageId")?.to_string(),
                    Some(doc.get_str("text")?.to_string()),
                ));
            }
            (written, docs, Kind::Insert)
        }
    };
    let acked = Instant::now();
    let ids: Vec<ObjectId> = written.iter().map(|(id, _, _)| *id).collect();
    if group.hook && !inserted.is_empty() {
        // LibreChat's post-save hook: index this version, then flag it.
        let shaped: Vec<Value> = inserted
            .iter()
            .map(|doc| {
                Value::Object(meili_reconciler::mongo::to_meili(
                    meili_reconciler::mongo::Collection::Messages,
                    doc,
                ))
            })
            .collect();
        bench
            .meili
            .add_documents(&shaped, Some("messageId"))
            .await?;
        bench
            .messages
            .update_many(doc! { "_id": { "$in": ids.clone() } }, doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } })
            .await?;
        return Ok(ids);
    }
    let at = acked.duration_since(began).as_secs_f64();
    let mut queue = pending.lock().unwrap();
    for (id, message_id, text) in written {
        queue.push_back(Pending {
            id,
            message_id,
            text,
            kind,
            acked,
            at,
        });
    }
    Ok(ids)
}

/// Polls Meilisearch for every pending write until its version shows up;
/// returns how many never did within the drain time.
async fn check(
    bench: Arc<Bench>,
    pending: Arc<Mutex<VecDeque<Pending>>>,
    seen: Arc<Mutex<Seen>>,
    writing_done: Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<usize> {
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let batch: Vec<Pending> = pending.lock().unwrap().drain(..).collect();
        let done = writing_done.load(std::sync::atomic::Ordering::SeqCst);
        if done && batch.is_empty() {
            return Ok(0);
        }
        if done {
            let deadline = *drain_deadline
                .get_or_insert_with(|| Instant::now() + Duration::from_secs(bench.args.drain_secs));
            if Instant::now() > deadline {
                return Ok(batch.len());
            }
        }
        // One fetch by ids per 1,000 pending writes and round.
        let mut shown: std::collections::HashMap<String, String> = Default::default();
        for chunk in batch.chunks(1_000) {
            let ids: Vec<&str> = chunk.iter().map(|p| p.message_id.as_str()).collect();
            let mut query = meilisearch_sdk::documents::DocumentsQuery::new(&bench.meili);
            query
                .with_ids(ids)
                .with_fields(["messageId", "text"])
                .with_limit(chunk.len());
            let found = bench.meili.get_documents_with::<Value>(&query).await?;
            for doc in found.results {
                if let (Some(id), Some(text)) = (doc["messageId"].as_str(), doc["text"].as_str()) {
                    shown.insert(id.to_string(), text.to_string());
                }
            }
        }
        let mut still = Vec::new();
        for p in batch {
            if shown.get(&p.message_id) == p.text.as_ref() {
                let delay = p.acked.elapsed().as_secs_f64();
                let mut seen = seen.lock().unwrap();
                seen.delays.push((p.at, delay, p.kind));
                if p.kind != Kind::Delete {
                    seen.settled.push((p.id, p.message_id));
                }
            } else {
                still.push(p);
            }
        }
        {
            let mut queue = pending.lock().unwrap();
            for p in still.into_iter().rev() {
                queue.push_front(p);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
