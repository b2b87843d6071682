//! `meili-bench`: the raw passes `scripts/bench-sync` measures the limit of
//! docs/benchmarks.md ("Method") with, on data `meili-seed` wrote, plus the helpers around them.
//!
//! - `ingest`: Meilisearch ingesting the documents `once` would send (the
//!   unindexed indexable ones, projected and cut into NDJSON batches exactly
//!   as `once` cuts them; prepared before the clock starts), EVERY batch of
//!   both indexes enqueued at once, timed until the last task ended. Reports
//!   how Meilisearch batched them (distinct `batchUid`s) and how long those
//!   indexing batches took together (`meili_busy_secs`).
//! - `scan`: a plain `_id`-ordered read of each collection with `once`'s
//!   projection and no filter, as a batched cursor and/or as `_id`-range pages;
//!   reports each and the cheaper. `--docs` limits it to the first documents.
//! - `once-read` (extra information): the read the way `once` makes it today
//!   (`_meiliIndex != true` and indexable, sorted by `_id`, in pages), without
//!   acknowledging — the query shape's cost next to the plain scan's.
//! - `flag-writes` and `ack-writes` (extra information): the flag of every
//!   document written by `_id` ranges (the raw write volume of acknowledging
//!   a full sync), and `once`'s own version-exact acknowledgement statements
//!   for every unindexed document — writes the limit does not count.
//! - `unindex`: clears the flag of every k-th flagged document (spread over the
//!   collection), for the incremental case.
//! - `check-seeded`: whether a database seeded ahead of a run (a long one:
//!   seeding 1M messages with LibreChat's indexes takes about an hour on
//!   DocumentDB) still holds what `meili-seed` wrote, unflagged.
//! - `cpu`: a snapshot of the busy-time counters, taken around `once`.
//! - `verify`: whether a run indexed everything, with the same batch figures
//!   for the tasks the run enqueued; `cleanup`: drops the
//!   benchmark's databases and indexes (servers given, not started).
//!
//! Every timed pass reports wall seconds and busy core-seconds (`bench_cpu`):
//! the machine's (`/proc/stat`) and the watched processes' (`--watch-pid`:
//! the servers, when local) plus this one's. None of these passes write
//! MongoDB but `scan --write-flags`, `unindex`, `flag-writes` and `ack-writes`. Prints one JSON object on stdout; progress goes to
//! stderr.

#[path = "bench_cpu.rs"]
mod bench_cpu;
#[path = "bench_servers.rs"]
mod bench_servers;

use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::{Args as ClapArgs, Parser, Subcommand, ValueEnum};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::Database;
use serde_json::{json, Value};

use meili_reconciler::lease::Guard;
use meili_reconciler::librechat::{searchable, Rules};
use meili_reconciler::meili::Meili;
use meili_reconciler::mongo::{self, Collection, FLAG};
use meili_reconciler::reconcile::settings;

use bench_cpu::Spent;

/// Raw passes and helpers for scripts/bench-sync.
#[derive(Parser, Debug)]
#[command(name = "meili-bench", version)]
struct Args {
    #[command(flatten)]
    servers: bench_servers::ServerArgs,
    #[command(subcommand)]
    command: Cmd,
}

/// How busy time is counted.
#[derive(ClapArgs, Debug, Clone)]
struct CpuArgs {
    /// Clock ticks per second of /proc (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clock_ticks: u64,
    /// A process whose CPU time counts as the benchmark's own (the local servers).
    #[arg(long = "watch-pid")]
    watch_pids: Vec<u32>,
}

/// How the plain scan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ScanMode {
    /// One `find` sorted by `_id`, read through a cursor in batches of `--page-docs`.
    Cursor,
    /// `find` pages of `--page-docs`, each starting after the last `_id` read.
    Pages,
}

impl ScanMode {
    fn name(self) -> &'static str {
        match self {
            ScanMode::Cursor => "cursor",
            ScanMode::Pages => "pages",
        }
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Time Meilisearch ingesting the unindexed documents, every batch enqueued at once.
    Ingest {
        /// Database `meili-seed` filled.
        #[arg(long)]
        database: String,
        /// Prefix of the indexes: `<prefix>messages`, `<prefix>convos`.
        #[arg(long)]
        index_prefix: String,
        /// Ingest into the indexes as they are (the incremental case) instead
        /// of fresh ones created before and deleted after.
        #[arg(long)]
        existing: bool,
        /// Documents per batch (`sync.batch_docs`).
        #[arg(long, default_value_t = 10_000)]
        batch_docs: usize,
        /// Bytes per batch (`sync.batch_bytes`).
        #[arg(long, default_value_t = 8 * 1024 * 1024)]
        batch_bytes: usize,
        #[command(flatten)]
        cpu: CpuArgs,
    },
    /// Time a plain `_id`-ordered scan of both collections with the projection.
    Scan {
        #[arg(long)]
        database: String,
        /// Ways to read, each timed separately (the cheaper is reported as `best`).
        #[arg(long, value_delimiter = ',', default_value = "cursor,pages")]
        modes: Vec<ScanMode>,
        /// Documents per cursor batch or page.
        #[arg(long, default_value_t = 10_000)]
        page_docs: usize,
        /// Read only the first N documents of a collection: `messages=N` (repeatable).
        #[arg(long = "docs", value_parser = parse_docs_limit)]
        limits: Vec<(String, u64)>,
        /// Set the flag as the scan goes: one `update_many` per page (or
        /// cursor batch) over its `_id` range, `_meiliIndex: true` — the raw
        /// write every sync must make, in the limit's MongoDB term. After
        /// each way (not timed) the flags it wrote are reset to `false`.
        #[arg(long)]
        write_flags: bool,
        /// The incremental case: before each way (not timed) the documents it
        /// will read — the first `--docs` of each collection — are unflagged,
        /// each one's flag kept aside, so that the way writes as many flags
        /// as it reads (a backlog of that many documents); after it (not
        /// timed) every one gets its own flag back.
        #[arg(long, requires_all = ["write_flags", "limits"])]
        as_backlog: bool,
        #[command(flatten)]
        cpu: CpuArgs,
    },
    /// Check that a database holds what `meili-seed` wrote for a benchmark and
    /// nothing has flagged it since: the counts, no `_meiliIndex: true`, and
    /// how many indexes each collection has (fails otherwise).
    CheckSeeded {
        #[arg(long)]
        database: String,
        #[arg(long)]
        messages: u64,
        #[arg(long)]
        conversations: u64,
        /// The least number of indexes (`_id` included) each collection must have.
        #[arg(long, default_value_t = 1)]
        min_indexes: usize,
    },
    /// Extra: time reading the unindexed documents the way `once` does today, without acknowledging.
    OnceRead {
        #[arg(long)]
        database: String,
        #[arg(long, default_value_t = 10_000)]
        page_docs: usize,
        #[command(flatten)]
        cpu: CpuArgs,
    },
    /// Extra: time writing the flag of every document, by `_id` ranges of
    /// `--page-docs` (the write volume of acknowledging a full sync).
    FlagWrites {
        #[arg(long)]
        database: String,
        /// The value written (`true` on unflagged data, `false` after a sync).
        #[arg(long, action = clap::ArgAction::Set)]
        value: bool,
        #[arg(long, default_value_t = 10_000)]
        page_docs: usize,
        #[command(flatten)]
        cpu: CpuArgs,
    },
    /// Extra: time `once`'s own acknowledgement statements for every unindexed
    /// indexable document (version-exact, one per document), on unflagged data.
    AckWrites {
        #[arg(long)]
        database: String,
        /// Stop after this many seconds and report the rate so far.
        #[arg(long, default_value_t = 300)]
        max_secs: u64,
        #[command(flatten)]
        cpu: CpuArgs,
    },
    /// Clear the flag of every `--every`-th flagged document of each collection.
    Unindex {
        #[arg(long)]
        database: String,
        #[arg(long, default_value_t = 100)]
        every: usize,
    },
    /// Delete every unflagged document from the indexes `--index-prefix` names.
    Forget {
        #[arg(long)]
        database: String,
        #[arg(long)]
        index_prefix: String,
    },
    /// Print the busy-time counters now (ticks), for timing another process.
    Cpu {
        #[arg(long = "watch-pid")]
        watch_pids: Vec<u32>,
    },
    /// Check that a run indexed everything: per collection, MongoDB's counts
    /// and the documents in `<prefix>messages` / `<prefix>convos`; and how
    /// Meilisearch batched the run's document additions.
    Verify {
        #[arg(long)]
        database: String,
        #[arg(long)]
        index_prefix: String,
        /// Count only the tasks from this uid on (see `next-task`).
        #[arg(long, default_value_t = 0)]
        since_task: u64,
    },
    /// Print the uid the next Meilisearch task will get.
    NextTask,
    /// Drop the given databases and delete the indexes `<prefix>messages`,
    /// `<prefix>convos` (and their `_reindex` builds) of each prefix.
    Cleanup {
        #[arg(long = "database")]
        databases: Vec<String>,
        #[arg(long = "index-prefix")]
        index_prefixes: Vec<String>,
    },
}

fn parse_docs_limit(raw: &str) -> Result<(String, u64), String> {
    let (name, count) = raw
        .split_once('=')
        .ok_or_else(|| format!("expected COLLECTION=N (e.g. messages=500), got `{raw}`"))?;
    if Collection::named(name).is_none() {
        let known: Vec<_> = Collection::ALL.iter().map(|c| c.name()).collect();
        return Err(format!(
            "unknown collection `{name}`: expected one of {}",
            known.join(", ")
        ));
    }
    let count = count
        .parse()
        .map_err(|_| format!("`{count}` is not a whole number of documents"))?;
    Ok((name.to_string(), count))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Cmd::Cpu { watch_pids } = &args.command {
        println!("{}", bench_cpu::snapshot_json(watch_pids)?);
        return Ok(());
    }
    // Errors below never include the URI or the key: they may be secrets.
    let client = mongodb::Client::with_uri_str(&args.servers.mongo_uri)
        .await
        .context("invalid MongoDB connection string")?;
    let meili = Meili::new(&args.servers.meili_host, Some(&args.servers.meili_key))?;
    let report = match args.command {
        Cmd::Ingest {
            database,
            index_prefix,
            existing,
            batch_docs,
            batch_bytes,
            cpu,
        } => {
            let db = client.database(&database);
            let batches = Batches {
                docs: batch_docs,
                bytes: batch_bytes,
            };
            ingest(&db, &meili, &index_prefix, existing, batches, &cpu).await?
        }
        Cmd::Scan {
            database,
            modes,
            page_docs,
            limits,
            write_flags,
            as_backlog,
            cpu,
        } => {
            let flags = match (write_flags, as_backlog) {
                (false, _) => FlagWrites::None,
                (true, true) => FlagWrites::Backlog,
                (true, false) => FlagWrites::Write,
            };
            scan(
                &client.database(&database),
                &modes,
                page_docs,
                &limits,
                flags,
                &cpu,
            )
            .await?
        }
        Cmd::CheckSeeded {
            database,
            messages,
            conversations,
            min_indexes,
        } => {
            check_seeded(
                &client.database(&database),
                messages,
                conversations,
                min_indexes,
            )
            .await?
        }
        Cmd::OnceRead {
            database,
            page_docs,
            cpu,
        } => once_read(&client.database(&database), page_docs, &cpu).await?,
        Cmd::FlagWrites {
            database,
            value,
            page_docs,
            cpu,
        } => flag_writes(&client.database(&database), value, page_docs, &cpu).await?,
        Cmd::AckWrites {
            database,
            max_secs,
            cpu,
        } => {
            let budget = Duration::from_secs(max_secs);
            ack_writes(&client.database(&database), budget, &cpu).await?
        }
        Cmd::Unindex { database, every } => unindex(&client.database(&database), every).await?,
        Cmd::Forget {
            database,
            index_prefix,
        } => forget(&client.database(&database), &meili, &index_prefix).await?,
        Cmd::Verify {
            database,
            index_prefix,
            since_task,
        } => {
            verify(
                &client.database(&database),
                &meili,
                &index_prefix,
                since_task,
            )
            .await?
        }
        Cmd::NextTask => {
            let newest = meili.tasks("limit=1").await?;
            let next = newest["results"][0]["uid"]
                .as_u64()
                .map_or(0, |uid| uid + 1);
            json!({ "next_task": next })
        }
        Cmd::Cleanup {
            databases,
            index_prefixes,
        } => {
            for name in databases {
                client
                    .database(&name)
                    .drop()
                    .await
                    .context("drop database")?;
            }
            cleanup_indexes(&meili, &index_prefixes).await?;
            json!({ "cleaned": true })
        }
        Cmd::Cpu { .. } => unreachable!("answered above"),
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    // End the driver's sessions while the runtime still runs: a client
    // dropped as `main` returns spawns that work onto a runtime shutting
    // down, where it can panic on the closed connection pool and print a
    // backtrace after the report.
    client.shutdown().immediate(true).await;
    Ok(())
}

/// Times `pass`, counting busy time as `cpu` says.
async fn timed<T>(
    cpu: &CpuArgs,
    pass: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, Spent)> {
    let start = bench_cpu::snapshot(&cpu.watch_pids)?;
    let value = pass.await?;
    let end = bench_cpu::snapshot(&cpu.watch_pids)?;
    Ok((value, Spent::between(&start, &end, cpu.clock_ticks)))
}

// --- ingest ---------------------------------------------------------------------

/// How `once` cuts batches (`sync.batch_docs`, `sync.batch_bytes`).
#[derive(Clone, Copy)]
struct Batches {
    docs: usize,
    bytes: usize,
}

/// One collection's prepared batches: `(documents, NDJSON payload)` each.
struct Prepared {
    collection: Collection,
    uid: String,
    batches: Vec<(usize, Bytes)>,
}

async fn ingest(
    db: &Database,
    meili: &Meili,
    prefix: &str,
    existing: bool,
    cut: Batches,
    cpu: &CpuArgs,
) -> anyhow::Result<Value> {
    let guard = Guard::unfenced();
    // Untimed: the NDJSON batches `once` would send, built from the same reads.
    let mut prepared = Vec::new();
    for collection in Collection::ALL {
        let t = Instant::now();
        let batches = ndjson_batches(db, collection, cut).await?;
        let docs: usize = batches.iter().map(|(n, _)| n).sum();
        eprintln!(
            "meili-bench: prepared {docs} {} in {} batches in {:.1}s",
            collection.name(),
            batches.len(),
            t.elapsed().as_secs_f64()
        );
        let uid = format!("{prefix}{}", collection.index_name());
        if existing {
            ensure!(
                meili.index(&uid).await?.is_some(),
                "index {uid} does not exist: ingest --existing goes into the indexes `once` built"
            );
        } else {
            fresh_index(meili, &uid, collection, &guard).await?;
        }
        prepared.push(Prepared {
            collection,
            uid,
            batches,
        });
    }

    let (tasks, spent) = timed(cpu, enqueue_all_and_wait(meili, &prepared, &guard)).await?;
    eprintln!(
        "meili-bench: ingest took {:.2}s ({:.1} busy core-s)",
        spent.secs, spent.busy_cpu_s
    );

    let mut per_collection = Vec::new();
    for (prepared, uids) in prepared.iter().zip(&tasks) {
        let batches = ingest_batches(meili, uids).await?;
        per_collection.push(json!({
            "collection": prepared.collection.name(),
            "docs": prepared.batches.iter().map(|(n, _)| n).sum::<usize>(),
            "tasks": uids.len(),
            "bytes": prepared.batches.iter().map(|(_, b)| b.len()).sum::<usize>(),
            "meili_batches": batches.count(),
            "meili_busy_secs": batches.busy_secs(),
        }));
        if !existing {
            // Free the stand-in's memory before `once` runs on the same server.
            let task = meili.delete_index(&prepared.uid, &guard).await?;
            meili.wait_ok(task, "delete index", &guard).await?;
        }
    }
    let mut report = spent.to_json();
    report["collections"] = Value::Array(per_collection);
    Ok(report)
}

/// A fresh index with the settings `once` gives it (not timed).
async fn fresh_index(
    meili: &Meili,
    uid: &str,
    collection: Collection,
    guard: &Guard,
) -> anyhow::Result<()> {
    if meili.index(uid).await?.is_some() {
        let task = meili.delete_index(uid, guard).await?;
        meili.wait_ok(task, "delete index", guard).await?;
    }
    let task = meili
        .create_index(uid, collection.primary_key(), guard)
        .await?;
    meili.wait_ok(task, "create index", guard).await?;
    let desired = Value::Object(settings::desired(&["user".to_string()]));
    let task = meili.patch_settings(uid, &desired, guard).await?;
    meili.wait_ok(task, "update settings", guard).await?;
    Ok(())
}

/// Every unindexed document as `once` shapes it, cut into NDJSON batches by
/// count and bytes. Read through one cursor (the filter and order of `once`'s
/// pages), which on some servers is far cheaper than pages.
async fn ndjson_batches(
    db: &Database,
    collection: Collection,
    cut: Batches,
) -> anyhow::Result<Vec<(usize, Bytes)>> {
    let now = mongo::server_time(db).await?;
    let mut cursor = db
        .collection::<Document>(collection.name())
        .find(mongo::unindexed_filter(&Rules::default(), collection, now))
        .max_time(mongo::READ_TIME_LIMIT)
        .sort(doc! { "_id": 1 })
        .projection(projection(collection))
        .batch_size(cut.docs as u32)
        .await
        .context("reading the unindexed documents")?;
    let mut batches = Vec::new();
    let (mut count, mut payload) = (0usize, Vec::new());
    while let Some(doc) = cursor
        .try_next()
        .await
        .context("reading the unindexed documents")?
    {
        let mut line = serde_json::to_vec(&mongo::to_meili(collection, &doc))?;
        line.push(b'\n');
        if count > 0 && (count >= cut.docs || payload.len() + line.len() > cut.bytes) {
            batches.push((count, Bytes::from(std::mem::take(&mut payload))));
            count = 0;
        }
        payload.extend_from_slice(&line);
        count += 1;
    }
    if count > 0 {
        batches.push((count, Bytes::from(payload)));
    }
    Ok(batches)
}

/// Enqueues every batch of every collection, then waits until all tasks
/// ended; the task uids per collection.
async fn enqueue_all_and_wait(
    meili: &Meili,
    prepared: &[Prepared],
    guard: &Guard,
) -> anyhow::Result<Vec<Vec<u64>>> {
    let mut tasks = Vec::new();
    for p in prepared {
        let mut uids = Vec::new();
        for (_, payload) in &p.batches {
            uids.push(
                meili
                    .add_documents_ndjson(&p.uid, payload.clone(), guard)
                    .await?,
            );
        }
        tasks.push(uids);
    }
    // Tasks of one index end in order: the last of each ending ends the ingest.
    // Polled every 5 ms so the measurement does not overshoot.
    let lasts: Vec<String> = tasks
        .iter()
        .filter_map(|uids| uids.last())
        .map(u64::to_string)
        .collect();
    if lasts.is_empty() {
        return Ok(tasks);
    }
    let query = format!("uids={}&limit={}", lasts.join(","), lasts.len());
    loop {
        let answer = meili.tasks(&query).await?;
        let results = answer["results"].as_array().cloned().unwrap_or_default();
        if let Some(failed) = results
            .iter()
            .find(|t| t["status"] == "failed" || t["status"] == "canceled")
        {
            bail!("ingest task failed: {failed}");
        }
        if results.len() == lasts.len() && results.iter().all(|t| t["status"] == "succeeded") {
            return Ok(tasks);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The Meilisearch indexing batches that processed some tasks: each batch's
/// duration by its uid (the tasks of a batch share its `startedAt` and
/// `finishedAt`).
#[derive(Default)]
struct IndexingBatches(BTreeMap<u64, f64>);

impl IndexingBatches {
    /// Notes the batch of a finished task.
    fn note(&mut self, task: &Value) {
        let at = |field: &str| {
            let text = task[field].as_str()?;
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
        };
        if let (Some(uid), Some(started), Some(finished)) =
            (task["batchUid"].as_u64(), at("startedAt"), at("finishedAt"))
        {
            self.0.insert(uid, (finished - started).as_seconds_f64());
        }
    }

    fn count(&self) -> usize {
        self.0.len()
    }

    /// Meilisearch's time indexing these batches (it runs one at a time).
    fn busy_secs(&self) -> f64 {
        self.0.values().sum()
    }
}

/// The batches that processed `uids`, checking every task succeeded.
async fn ingest_batches(meili: &Meili, uids: &[u64]) -> anyhow::Result<IndexingBatches> {
    let mut batches = IndexingBatches::default();
    for chunk in uids.chunks(100) {
        let list: Vec<String> = chunk.iter().map(u64::to_string).collect();
        let answer = meili
            .tasks(&format!("uids={}&limit={}", list.join(","), chunk.len()))
            .await?;
        let results = answer["results"].as_array().cloned().unwrap_or_default();
        ensure!(
            results.len() == chunk.len() && results.iter().all(|t| t["status"] == "succeeded"),
            "not every ingest task succeeded"
        );
        results.iter().for_each(|task| batches.note(task));
    }
    Ok(batches)
}

// --- scans ----------------------------------------------------------------------

/// What `once` reads of a document (`mongo::sync_projection`: the sources
/// of its Meilisearch form, its version, the markers and the fields its
/// searchability depends on), so a plain scan reads what a reader filtering
/// as it goes would.
fn projection(collection: Collection) -> Document {
    mongo::sync_projection(&Rules::default(), collection)
}

/// The flag writes of a scan. Either way the data is left as it was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlagWrites {
    /// A read only.
    None,
    /// The raw write on unflagged data; what it flagged is unflagged again
    /// after each way (not timed).
    Write,
    /// The documents each way will read are unflagged first, each one's flag
    /// kept aside, and get it back after the way (neither timed), so that it
    /// writes as many flags as it reads: the incremental case.
    Backlog,
}

impl FlagWrites {
    fn writes(self) -> bool {
        self != FlagWrites::None
    }
}

async fn scan(
    db: &Database,
    modes: &[ScanMode],
    page_docs: usize,
    limits: &[(String, u64)],
    flags: FlagWrites,
    cpu: &CpuArgs,
) -> anyhow::Result<Value> {
    ensure!(!modes.is_empty(), "--modes names no way to scan");
    let write_flags = flags.writes();
    let limit_of = |collection: Collection| {
        limits
            .iter()
            .rev()
            .find(|(name, _)| name == collection.name())
            .map(|(_, n)| *n)
    };
    let mut passes: Vec<Value> = Vec::new();
    let mut best: Option<Value> = None;
    for &mode in modes {
        if flags == FlagWrites::Backlog {
            for collection in Collection::ALL {
                make_backlog(db, collection, limit_of(collection).unwrap_or(0)).await?;
            }
        }
        // A way to read that is already twice as slow as the best one is not
        // the cheaper one: stop it there (pages can be quadratic on some servers).
        let give_up = best
            .as_ref()
            .and_then(|best| best["secs"].as_f64())
            .map(|secs| Instant::now() + Duration::from_secs_f64(ABANDON_FACTOR * secs));
        let measured = timed(cpu, async {
            let mut docs = Vec::new();
            for collection in Collection::ALL {
                let limit = limit_of(collection);
                let read = match mode {
                    ScanMode::Cursor => {
                        scan_cursor(db, collection, page_docs, limit, give_up, write_flags).await?
                    }
                    ScanMode::Pages => {
                        scan_pages(db, collection, page_docs, limit, give_up, write_flags).await?
                    }
                };
                let Some(read) = read else {
                    return Ok(None);
                };
                docs.push(json!({ "collection": collection.name(), "docs": read }));
            }
            Ok(Some(docs))
        })
        .await;
        match flags {
            FlagWrites::None => {}
            FlagWrites::Write => reset_flags(db).await?,
            FlagWrites::Backlog => restore_backlog(db).await?,
        }
        // A way that fails once another succeeded is reported, not fatal.
        let (docs, spent) = match measured {
            Ok(measured) => measured,
            Err(error) if best.is_some() => {
                eprintln!("meili-bench: scan ({}) failed: {error:#}", mode.name());
                passes.push(json!({ "mode": mode.name(), "error": format!("{error:#}") }));
                continue;
            }
            Err(error) => return Err(error),
        };
        let mut pass = spent.to_json();
        pass["mode"] = json!(mode.name());
        let Some(docs) = docs else {
            eprintln!(
                "meili-bench: scan ({}) abandoned after {:.2}s, over {ABANDON_FACTOR} × the cheaper way",
                mode.name(),
                spent.secs
            );
            pass["abandoned"] = json!(true);
            passes.push(pass);
            continue;
        };
        eprintln!(
            "meili-bench: scan ({}) took {:.2}s ({:.1} busy core-s)",
            mode.name(),
            spent.secs,
            spent.busy_cpu_s
        );
        pass["collections"] = Value::Array(docs);
        let cheaper = best
            .as_ref()
            .is_none_or(|best| spent.secs < best["secs"].as_f64().unwrap_or(f64::MAX));
        if cheaper {
            best = Some(pass.clone());
        }
        passes.push(pass);
    }
    let as_backlog = flags == FlagWrites::Backlog;
    Ok(
        json!({ "passes": passes, "best": best, "write_flags": write_flags,
        "as_backlog": as_backlog }),
    )
}

/// What a scan's flag write leaves on the documents it flagged, so that
/// [`reset_flags`] can undo exactly those.
const WRITTEN_BY_SCAN: &str = "_benchScanFlagged";

/// `_id`s per range of the raw flag write: DocumentDB-based servers stop a
/// statement after 10 s, and with LibreChat's indexes on the collection an
/// `update_many` of 10,000 documents took longer than that on the 2-core
/// test machine (one of 1,000 about 1–2 s).
const FLAG_RANGE_DOCS: usize = 1_000;

/// The raw flag write of a page's `_id`s (ascending): `_meiliIndex: true` on
/// the unflagged documents (a flagged one needs no write), one `update_many`
/// per `_id` range of [`FLAG_RANGE_DOCS`] — halved while the server stops it
/// for taking too long.
async fn flag_range(db: &Database, collection: Collection, ids: &[Bson]) -> anyhow::Result<()> {
    update_ranges(
        db,
        collection,
        ids,
        doc! { FLAG: { "$ne": true } },
        doc! { "$set": { FLAG: true, WRITTEN_BY_SCAN: true } },
    )
    .await
    .context("writing flags")
}

/// `update` with `filter` on each `_id` range of [`FLAG_RANGE_DOCS`] of
/// `ids` (ascending), a range halved while the server stops its update for
/// taking too long (code 50).
async fn update_ranges(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    filter: Document,
    update: Document,
) -> anyhow::Result<()> {
    let handle = db.collection::<Document>(collection.name());
    let mut pending: std::collections::VecDeque<&[Bson]> = ids.chunks(FLAG_RANGE_DOCS).collect();
    while let Some(range) = pending.pop_front() {
        let (Some(first), Some(last)) = (range.first(), range.last()) else {
            continue;
        };
        let mut in_range = doc! { "_id": { "$gte": first.clone(), "$lte": last.clone() } };
        in_range.extend(filter.clone());
        match handle.update_many(in_range, update.clone()).await {
            Ok(_) => {}
            Err(error) if range.len() > 1 && format!("{error:?}").contains("code: 50") => {
                let (first_half, second_half) = range.split_at(range.len() / 2);
                pending.push_front(second_half);
                pending.push_front(first_half);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// After a way that wrote flags (not timed): the documents it flagged get
/// `_meiliIndex: false` again, so the next step finds them as they were:
/// unindexed.
async fn reset_flags(db: &Database) -> anyhow::Result<()> {
    for collection in Collection::ALL {
        let statements = each_marked(db, collection, WRITTEN_BY_SCAN, |_| {
            doc! { "$set": { FLAG: false }, "$unset": { WRITTEN_BY_SCAN: "" } }
        })
        .await?;
        update_each(db, collection, statements)
            .await
            .context("resetting flags")?;
    }
    Ok(())
}

/// Where [`make_backlog`] keeps each document's own flag: `true`, `false`,
/// or null for none.
const FLAG_WAS: &str = "_benchFlagWas";

/// Before a way of `--as-backlog` (not timed): the first `docs` documents of
/// the collection in `_id` order unflagged, each one's flag kept in
/// [`FLAG_WAS`].
async fn make_backlog(db: &Database, collection: Collection, docs: u64) -> anyhow::Result<()> {
    if docs == 0 {
        return Ok(());
    }
    let statements: Vec<(Document, Document)> = db
        .collection::<Document>(collection.name())
        .find(doc! {})
        .max_time(mongo::READ_TIME_LIMIT)
        .sort(doc! { "_id": 1 })
        .limit(docs as i64)
        .projection(doc! { "_id": 1, FLAG: 1 })
        .await
        .context("reading the backlog's ids")?
        .try_collect::<Vec<Document>>()
        .await
        .context("reading the backlog's ids")?
        .into_iter()
        .filter_map(|d| {
            let was = d.get(FLAG).cloned().unwrap_or(Bson::Null);
            let id = d.get("_id").cloned()?;
            Some((
                doc! { "_id": id },
                doc! { "$set": { FLAG: false, FLAG_WAS: was } },
            ))
        })
        .collect();
    update_each(db, collection, statements)
        .await
        .context("unflagging the backlog")
}

/// After a way of `--as-backlog` (not timed): every document [`make_backlog`]
/// unflagged gets its own flag back (none, where it had none).
async fn restore_backlog(db: &Database) -> anyhow::Result<()> {
    for collection in Collection::ALL {
        let statements = each_marked(db, collection, FLAG_WAS, |doc| {
            let markers = doc! { FLAG_WAS: "", WRITTEN_BY_SCAN: "" };
            match doc.get(FLAG_WAS) {
                Some(Bson::Boolean(was)) => doc! { "$set": { FLAG: *was }, "$unset": markers },
                _ => {
                    let mut unset = markers;
                    unset.insert(FLAG, "");
                    doc! { "$unset": unset }
                }
            }
        })
        .await?;
        update_each(db, collection, statements)
            .await
            .context("restoring the backlog's flags")?;
    }
    Ok(())
}

/// One `(filter, update)` statement per document that has field `marker`:
/// `{_id}` and `update(document)` (the document carries `_id` and `marker`).
async fn each_marked(
    db: &Database,
    collection: Collection,
    marker: &str,
    update: impl Fn(&Document) -> Document,
) -> anyhow::Result<Vec<(Document, Document)>> {
    let mut cursor = db
        .collection::<Document>(collection.name())
        .find(doc! { marker: { "$exists": true } })
        .max_time(mongo::READ_TIME_LIMIT)
        .projection(doc! { "_id": 1, marker: 1 })
        .batch_size(10_000)
        .await
        .context("reading marked documents")?;
    let mut statements = Vec::new();
    while let Some(doc) = cursor
        .try_next()
        .await
        .context("reading marked documents")?
    {
        if let Some(id) = doc.get("_id") {
            statements.push((doc! { "_id": id.clone() }, update(&doc)));
        }
    }
    Ok(statements)
}

/// Statements per `update` command of [`update_each`] (halved while the
/// server stops one for taking too long: DocumentDB after 10 s, code 50).
const STATEMENTS_PER_UPDATE: usize = 500;

/// The statements in `update` commands, two side by side (on DocumentDB, with
/// LibreChat's indexes, one statement a document is cheaper than a range
/// `update_many`, and two connections use two cores): the benchmark's own
/// set-up writes, never timed.
async fn update_each(
    db: &Database,
    collection: Collection,
    statements: Vec<(Document, Document)>,
) -> anyhow::Result<()> {
    let half = statements.len().div_ceil(2);
    let (first, second) = statements.split_at(half);
    futures::future::try_join(
        update_serially(db, collection, first),
        update_serially(db, collection, second),
    )
    .await?;
    Ok(())
}

async fn update_serially(
    db: &Database,
    collection: Collection,
    statements: &[(Document, Document)],
) -> anyhow::Result<()> {
    let mut pending: std::collections::VecDeque<&[(Document, Document)]> =
        statements.chunks(STATEMENTS_PER_UPDATE).collect();
    while let Some(chunk) = pending.pop_front() {
        let updates: Vec<Document> = chunk
            .iter()
            .map(|(q, u)| doc! { "q": q.clone(), "u": u.clone() })
            .collect();
        let command = doc! { "update": collection.name(), "updates": updates, "ordered": false };
        match db.run_command(command).await {
            Ok(reply) => {
                if let Ok(errors) = reply.get_array("writeErrors") {
                    bail!(
                        "update of {}: {} write errors: {errors:?}",
                        collection.name(),
                        errors.len()
                    );
                }
            }
            Err(error) if chunk.len() > 1 && format!("{error:?}").contains("code: 50") => {
                let (first_half, second_half) = chunk.split_at(chunk.len() / 2);
                pending.push_front(second_half);
                pending.push_front(first_half);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// How much slower than the cheapest way so far a scan may get before it is stopped.
const ABANDON_FACTOR: f64 = 2.0;

/// The least time a page is given before the give-up time stops it.
const MIN_PAGE_TIME: Duration = Duration::from_millis(100);

fn past(give_up: Option<Instant>) -> bool {
    give_up.is_some_and(|at| Instant::now() > at)
}

/// Documents read, or `None` if stopped at `give_up`.
async fn scan_cursor(
    db: &Database,
    collection: Collection,
    batch: usize,
    limit: Option<u64>,
    give_up: Option<Instant>,
    write_flags: bool,
) -> anyhow::Result<Option<u64>> {
    if limit == Some(0) {
        return Ok(Some(0));
    }
    let handle = db.collection::<Document>(collection.name());
    // No limit: 0, as the server reads it.
    let mut cursor = handle
        .find(doc! {})
        .max_time(mongo::READ_TIME_LIMIT)
        .sort(doc! { "_id": 1 })
        .projection(projection(collection))
        .batch_size(batch as u32)
        .limit(limit.map_or(0, |limit| limit as i64))
        .await
        .context("scan")?;
    let mut read = 0u64;
    let mut ids: Vec<Bson> = Vec::new();
    while let Some(doc) = cursor.try_next().await.context("scan")? {
        read += 1;
        if write_flags {
            ids.extend(doc.get("_id").cloned());
        }
        if read.is_multiple_of(batch as u64) {
            flag_range(db, collection, &ids).await?;
            ids.clear();
            if past(give_up) {
                return Ok(None);
            }
        }
    }
    flag_range(db, collection, &ids).await?;
    Ok(Some(read))
}

/// Documents read, or `None` if stopped at `give_up`.
async fn scan_pages(
    db: &Database,
    collection: Collection,
    page: usize,
    limit: Option<u64>,
    give_up: Option<Instant>,
    write_flags: bool,
) -> anyhow::Result<Option<u64>> {
    let handle = db.collection::<Document>(collection.name());
    let mut read = 0u64;
    let mut after: Option<Bson> = None;
    loop {
        let wanted = limit.map_or(page as u64, |limit| (limit - read).min(page as u64));
        if wanted == 0 {
            break;
        }
        if past(give_up) {
            return Ok(None);
        }
        let filter = match &after {
            Some(after) => doc! { "_id": { "$gt": after.clone() } },
            None => doc! {},
        };
        let mut find = handle
            .find(filter)
            .sort(doc! { "_id": 1 })
            .limit(wanted as i64)
            .projection(projection(collection));
        if let Some(at) = give_up {
            // The server stops a page that would run past the give-up time.
            let left = at.saturating_duration_since(Instant::now());
            find = find.max_time(left.max(MIN_PAGE_TIME));
        }
        let page: Result<Vec<Document>, _> = match find.await {
            Ok(cursor) => cursor.try_collect().await,
            Err(error) => Err(error),
        };
        let docs = match page {
            Ok(docs) => docs,
            Err(_) if past(give_up) => return Ok(None),
            Err(error) => return Err(error).context("scan page"),
        };
        read += docs.len() as u64;
        after = docs.last().and_then(|d| d.get("_id").cloned());
        if write_flags {
            let ids: Vec<Bson> = docs.iter().filter_map(|d| d.get("_id").cloned()).collect();
            flag_range(db, collection, &ids).await?;
        }
        if (docs.len() as u64) < wanted {
            break;
        }
    }
    Ok(Some(read))
}

/// Extra: the unindexed documents read the way `once` reads them, no acknowledgement.
async fn once_read(db: &Database, page_docs: usize, cpu: &CpuArgs) -> anyhow::Result<Value> {
    let (docs, spent) = timed(cpu, async {
        let mut docs = Vec::new();
        for collection in Collection::ALL {
            let (mut read, mut pages) = (0u64, 0u64);
            let mut after: Option<Bson> = None;
            loop {
                let now = mongo::server_time(db).await?;
                let page = mongo::read_unindexed_page(
                    db,
                    &Rules::default(),
                    collection,
                    now,
                    mongo::Backlog::Any,
                    after.as_ref(),
                    page_docs,
                )
                .await?;
                read += page.len() as u64;
                pages += 1;
                after = page.last().and_then(mongo::raw_id);
                if page.len() < page_docs {
                    break;
                }
            }
            docs.push(json!({ "collection": collection.name(), "docs": read, "pages": pages }));
        }
        Ok(docs)
    })
    .await?;
    eprintln!(
        "meili-bench: once-style read took {:.2}s ({:.1} busy core-s)",
        spent.secs, spent.busy_cpu_s
    );
    let mut report = spent.to_json();
    report["collections"] = Value::Array(docs);
    Ok(report)
}

/// Extra: `value` written into every document's flag, one `update_many` per
/// `_id` range of `page_docs` (ranges found before the clock starts).
async fn flag_writes(
    db: &Database,
    value: bool,
    page_docs: usize,
    cpu: &CpuArgs,
) -> anyhow::Result<Value> {
    ensure!(page_docs >= 1, "--page-docs must be at least 1");
    let mut ranges = Vec::new();
    for collection in Collection::ALL {
        let mut cursor = db
            .collection::<Document>(collection.name())
            .find(doc! {})
            .max_time(mongo::READ_TIME_LIMIT)
            .sort(doc! { "_id": 1 })
            .projection(doc! { "_id": 1 })
            .batch_size(page_docs as u32)
            .await
            .context("reading ids")?;
        let (mut first, mut last, mut count) = (None, None, 0usize);
        while let Some(doc) = cursor.try_next().await.context("reading ids")? {
            let id = doc.get("_id").cloned().context("a document without _id")?;
            first.get_or_insert_with(|| id.clone());
            last = Some(id);
            count += 1;
            if count == page_docs {
                ranges.push((collection, first.take().unwrap(), last.take().unwrap()));
                count = 0;
            }
        }
        if let (Some(first), Some(last)) = (first, last) {
            ranges.push((collection, first, last));
        }
    }
    let (written, spent) = timed(cpu, async {
        let mut written = 0u64;
        for (collection, first, last) in &ranges {
            let result = db
                .collection::<Document>(collection.name())
                .update_many(
                    doc! { "_id": { "$gte": first.clone(), "$lte": last.clone() } },
                    doc! { "$set": { FLAG: value } },
                )
                .await
                .context("writing flags")?;
            written += result.matched_count;
        }
        Ok(written)
    })
    .await?;
    eprintln!(
        "meili-bench: wrote the flag of {written} documents in {} ranges in {:.2}s",
        ranges.len(),
        spent.secs
    );
    let mut report = spent.to_json();
    report["docs"] = json!(written);
    report["ranges"] = json!(ranges.len());
    Ok(report)
}

/// Extra: the versions of every unindexed indexable document (read before
/// the clock starts), then `mongo::set_flags_if_unchanged` over them in
/// commands of `mongo::STATEMENTS_PER_COMMAND`, with a server-time read per
/// command as `once` makes it; stops after `budget`.
async fn ack_writes(db: &Database, budget: Duration, cpu: &CpuArgs) -> anyhow::Result<Value> {
    let guard = Guard::unfenced();
    let mut versions = Vec::new();
    for collection in Collection::ALL {
        let now = mongo::server_time(db).await?;
        let docs: Vec<Document> = db
            .collection::<Document>(collection.name())
            .find(mongo::unindexed_filter(&Rules::default(), collection, now))
            .max_time(mongo::READ_TIME_LIMIT)
            .sort(doc! { "_id": 1 })
            .projection(mongo::sync_projection(&Rules::default(), collection))
            .await
            .context("reading versions")?
            .try_collect()
            .await
            .context("reading versions")?;
        versions.push((
            collection,
            docs.iter()
                .filter_map(|doc| {
                    let branch =
                        searchable::searchable_branch(&Rules::default(), collection, doc, now)?;
                    Some((mongo::DocVersion::of(doc), branch))
                })
                .collect::<Vec<_>>(),
        ));
    }
    let total: usize = versions.iter().map(|(_, v)| v.len()).sum();
    let (matched, spent) = timed(cpu, async {
        let stop_at = Instant::now() + budget;
        let mut matched = 0u64;
        for (collection, versions) in &versions {
            for chunk in versions.chunks(mongo::STATEMENTS_PER_COMMAND) {
                if Instant::now() > stop_at {
                    return Ok(matched);
                }
                let now = mongo::server_time(db).await?;
                matched += mongo::set_flags_if_unchanged(
                    db,
                    &Rules::default(),
                    *collection,
                    chunk,
                    now,
                    &guard,
                )
                .await?
                .matched;
            }
        }
        Ok(matched)
    })
    .await?;
    eprintln!(
        "meili-bench: once's acknowledgement statements: {matched} of {total} documents in {:.2}s",
        spent.secs
    );
    let mut report = spent.to_json();
    report["docs"] = json!(matched);
    report["of"] = json!(total);
    Ok(report)
}

// --- incremental case -------------------------------------------------------------

/// Clears the flag of every `every`-th flagged document (by `_id`, starting
/// half-way into the first stride), one `_id` update each: the incremental
/// case's unindexed documents, spread over the collection.
async fn unindex(db: &Database, every: usize) -> anyhow::Result<Value> {
    ensure!(every >= 1, "--every must be at least 1");
    let started = Instant::now();
    let mut per_collection = Vec::new();
    for collection in Collection::ALL {
        let handle = db.collection::<Document>(collection.name());
        let mut cursor = handle
            .find(doc! { FLAG: true })
            .max_time(mongo::READ_TIME_LIMIT)
            .sort(doc! { "_id": 1 })
            .projection(doc! { "_id": 1 })
            .batch_size(10_000)
            .await
            .context("reading flagged ids")?;
        let mut chosen = Vec::new();
        let mut position = 0usize;
        while let Some(doc) = cursor.try_next().await.context("reading flagged ids")? {
            if position % every == every / 2 {
                chosen.push(doc.get("_id").cloned().context("a document without _id")?);
            }
            position += 1;
        }
        for id in &chosen {
            handle
                .update_one(doc! { "_id": id.clone() }, doc! { "$set": { FLAG: false } })
                .await
                .context("clearing a flag")?;
        }
        eprintln!(
            "meili-bench: cleared the flag of {} of {position} flagged {}",
            chosen.len(),
            collection.name()
        );
        per_collection.push(json!({ "collection": collection.name(),
            "flagged": position, "unindexed": chosen.len() }));
    }
    Ok(json!({ "secs": started.elapsed().as_secs_f64(), "collections": per_collection }))
}

/// Deletes every unflagged document of each collection from the index
/// `prefix` names: after `unindex` (and the limit terms, whose ingest puts
/// them back), the incremental case's documents are then what LibreChat's
/// save hook never indexed (a fleet with `MEILI_NO_SYNC`, a hook that
/// failed) — absent from Meilisearch and unflagged, so the index's count
/// equals the flagged count and `once` has no drift to compare ids for.
async fn forget(db: &Database, meili: &Meili, prefix: &str) -> anyhow::Result<Value> {
    let guard = Guard::unfenced();
    let mut per_collection = Vec::new();
    for collection in Collection::ALL {
        let mut cursor = db
            .collection::<Document>(collection.name())
            .find(doc! { FLAG: { "$ne": true } })
            .max_time(mongo::READ_TIME_LIMIT)
            .projection(doc! { "_id": 1, collection.primary_key(): 1 })
            .batch_size(10_000)
            .await
            .context("reading unflagged ids")?;
        let mut ids = Vec::new();
        while let Some(doc) = cursor.try_next().await.context("reading unflagged ids")? {
            ids.extend(mongo::meili_id(collection, &doc));
        }
        let uid = format!("{prefix}{}", collection.index_name());
        for chunk in ids.chunks(10_000) {
            let task = meili.delete_documents(&uid, chunk, &guard).await?;
            meili.wait_ok(task, "delete documents", &guard).await?;
        }
        eprintln!(
            "meili-bench: deleted the {} unflagged {} from {uid}",
            ids.len(),
            collection.name()
        );
        per_collection.push(json!({ "collection": collection.name(), "deleted": ids.len() }));
    }
    Ok(json!({ "collections": per_collection }))
}

// --- checks ---------------------------------------------------------------------

/// `check-seeded`: the counts `meili-seed` wrote, nothing flagged, and at
/// least `min_indexes` indexes on each collection; an error names what differs.
async fn check_seeded(
    db: &Database,
    messages: u64,
    conversations: u64,
    min_indexes: usize,
) -> anyhow::Result<Value> {
    let mut per_collection = Vec::new();
    for (collection, expected) in [
        (Collection::Messages, messages),
        (Collection::Conversations, conversations),
    ] {
        let handle = db.collection::<Document>(collection.name());
        let count = handle
            .count_documents(doc! {})
            .max_time(mongo::READ_TIME_LIMIT)
            .await
            .context("counting")?;
        let flagged = handle
            .count_documents(doc! { FLAG: true })
            .max_time(mongo::READ_TIME_LIMIT)
            .await
            .context("counting flagged documents")?;
        let indexes = handle
            .list_index_names()
            .await
            .context("listing indexes")?
            .len();
        ensure!(
            count == expected,
            "{}: {count} documents, expected {expected} (seed it again)",
            collection.name()
        );
        ensure!(
            flagged == 0,
            "{}: {flagged} documents flagged since the seeding (seed it again)",
            collection.name()
        );
        ensure!(
            indexes >= min_indexes,
            "{}: {indexes} indexes, expected at least {min_indexes}",
            collection.name()
        );
        per_collection
            .push(json!({ "collection": collection.name(), "docs": count, "indexes": indexes }));
    }
    Ok(json!({ "collections": per_collection }))
}

/// Per collection: indexable / unindexed in MongoDB and documents in the
/// index; `complete` when nothing is left unindexed and the index holds
/// every indexable document.
async fn verify(
    db: &Database,
    meili: &Meili,
    prefix: &str,
    since_task: u64,
) -> anyhow::Result<Value> {
    let now = mongo::server_time(db).await?;
    let mut complete = true;
    let mut per_collection = Vec::new();
    for collection in Collection::ALL {
        let counts = mongo::counts(db, &Rules::default(), collection, now).await?;
        let uid = format!("{prefix}{}", collection.index_name());
        let in_meili = match meili.index(&uid).await? {
            Some(_) => meili.document_count(&uid).await?,
            None => 0,
        };
        complete &= counts.unindexed == 0 && in_meili == counts.indexable;
        let (tasks, batches) = addition_batches(meili, &uid, since_task).await?;
        per_collection.push(json!({ "collection": collection.name(),
            "indexable": counts.indexable, "unindexed": counts.unindexed, "in_meili": in_meili,
            "addition_tasks": tasks, "meili_batches": batches.count(),
            "meili_busy_secs": batches.busy_secs() }));
    }
    Ok(json!({ "complete": complete, "collections": per_collection }))
}

/// Document-addition tasks of index `uid` from task `since` on, and the
/// batches that processed them.
async fn addition_batches(
    meili: &Meili,
    uid: &str,
    since: u64,
) -> anyhow::Result<(u64, IndexingBatches)> {
    let mut batches = IndexingBatches::default();
    let mut tasks = 0;
    let mut from: Option<u64> = None;
    loop {
        let mut query = format!("indexUids={uid}&types=documentAdditionOrUpdate&limit=1000");
        if let Some(from) = from {
            query.push_str(&format!("&from={from}"));
        }
        let answer = meili.tasks(&query).await?;
        // Newest first: stop at the first task older than `since`.
        for task in answer["results"].as_array().into_iter().flatten() {
            if task["uid"].as_u64().unwrap_or(0) < since {
                return Ok((tasks, batches));
            }
            tasks += 1;
            batches.note(task);
        }
        match answer["next"].as_u64() {
            Some(next) => from = Some(next),
            None => return Ok((tasks, batches)),
        }
    }
}

async fn cleanup_indexes(meili: &Meili, prefixes: &[String]) -> anyhow::Result<()> {
    if prefixes.is_empty() {
        return Ok(());
    }
    let guard = Guard::unfenced();
    for collection in Collection::ALL {
        for prefix in prefixes {
            for suffix in ["", "_reindex"] {
                let uid = format!("{prefix}{}{suffix}", collection.index_name());
                if meili.index(&uid).await?.is_some() {
                    let task = meili.delete_index(&uid, &guard).await?;
                    meili.wait_ok(task, "delete index", &guard).await?;
                }
            }
        }
    }
    Ok(())
}
