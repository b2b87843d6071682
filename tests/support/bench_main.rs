//! `meili-bench`: the raw passes `scripts/bench-sync` compares
//! `meili-reconciler once` against (docs/design.md §7), on data `meili-seed` wrote.
//!
//! - `raw` measures (a) Meilisearch ingesting the projected documents of both
//!   collections in large NDJSON batches, every batch enqueued at once and
//!   waited for, and (b) one MongoDB pass reading the unindexed documents in
//!   `_id` pages with the projection and acknowledging each page with
//!   `once`'s version-exact statements (one per document, in commands of
//!   1,000). Both reuse the library's own projection, reads and acknowledgement
//!   (`meili_reconciler::mongo`), so they do exactly what `once` does on each
//!   side, only not overlapped. (b) sets the real `_meiliIndex` flag (the very
//!   update `once` sends), so it runs on a scratch copy of the data (a
//!   database seeded identically to the one `once` gets); it refuses data
//!   with any flag already set, where it would not read every document.
//! - `cleanup` drops the benchmark's databases and indexes (used when the
//!   servers were given rather than started by the script).
//!
//! Prints one JSON object on stdout; progress goes to stderr.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use clap::{Parser, Subcommand};
use mongodb::bson::{doc, Bson, Document};
use mongodb::Database;
use serde_json::{json, Value};

use meili_reconciler::lease::Guard;
use meili_reconciler::meili::Meili;
use meili_reconciler::mongo::{self, Collection, FLAG};
use meili_reconciler::reconcile::settings;

/// Raw ingest and raw MongoDB pass, for comparing with `meili-reconciler once`.
#[derive(Parser, Debug)]
#[command(name = "meili-bench", version)]
struct Args {
    /// MongoDB connection string.
    #[arg(long, env = "MONGO_URI", hide_env_values = true)]
    mongo_uri: String,
    /// Meilisearch URL.
    #[arg(long, env = "MEILI_HOST")]
    meili_host: String,
    /// Meilisearch master key.
    #[arg(
        long,
        env = "MEILI_MASTER_KEY",
        hide_env_values = true,
        default_value = ""
    )]
    meili_key: String,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Measure (a) raw Meilisearch ingest and (b) a raw MongoDB read + acknowledge pass.
    Raw {
        /// Database `meili-seed` filled.
        #[arg(long)]
        database: String,
        /// Prefix of the scratch indexes (a): `<prefix>messages`, `<prefix>convos`.
        #[arg(long)]
        index_prefix: String,
        /// Documents per batch and per page (`sync.batch_docs`).
        #[arg(long, default_value_t = 10_000)]
        batch_docs: usize,
        /// Bytes per batch (`sync.batch_bytes`), so (a) cuts batches as `once` does.
        #[arg(long, default_value_t = 8 * 1024 * 1024)]
        batch_bytes: usize,
    },
    /// Check that a run indexed everything: per collection, MongoDB's counts
    /// and the documents in `<prefix>messages` / `<prefix>convos`.
    Verify {
        #[arg(long)]
        database: String,
        #[arg(long)]
        index_prefix: String,
    },
    /// Drop the given databases and delete the indexes `<prefix>messages`,
    /// `<prefix>convos` (and their `_reindex` builds) of each prefix.
    Cleanup {
        #[arg(long = "database")]
        databases: Vec<String>,
        #[arg(long = "index-prefix")]
        index_prefixes: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Errors below never include the URI or the key: they may be secrets.
    let client = mongodb::Client::with_uri_str(&args.mongo_uri)
        .await
        .context("invalid MongoDB connection string")?;
    let meili = Meili::new(&args.meili_host, Some(&args.meili_key))?;
    match args.command {
        Cmd::Raw {
            database,
            index_prefix,
            batch_docs,
            batch_bytes,
        } => {
            let db = client.database(&database);
            let report = raw(&db, &meili, &index_prefix, batch_docs, batch_bytes).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Cmd::Verify {
            database,
            index_prefix,
        } => {
            let report = verify(&client.database(&database), &meili, &index_prefix).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
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
        }
    }
    Ok(())
}

async fn raw(
    db: &Database,
    meili: &Meili,
    prefix: &str,
    batch_docs: usize,
    batch_bytes: usize,
) -> anyhow::Result<Value> {
    let guard = Guard::unfenced();
    for collection in Collection::ALL {
        ensure!(
            flagged(db, collection).await? == 0,
            "{} has documents flagged {FLAG}: true; the raw passes need freshly seeded data",
            collection.name()
        );
    }

    // Untimed: the NDJSON batches `once` would send, built from the same reads.
    let mut prepared = Vec::new();
    for collection in Collection::ALL {
        let t = Instant::now();
        let batches = ndjson_batches(db, collection, batch_docs, batch_bytes).await?;
        eprintln!(
            "meili-bench: prepared {} batches of {} in {:.1}s",
            batches.len(),
            collection.name(),
            t.elapsed().as_secs_f64()
        );
        prepared.push((collection, batches));
    }

    // (a) Meilisearch ingest.
    let mut ingest = Vec::new();
    for (collection, batches) in &prepared {
        let uid = format!("{prefix}{}", collection.index_name());
        let docs: u64 = batches.iter().map(|(n, _)| *n as u64).sum();
        let bytes: usize = batches.iter().map(|(_, b)| b.len()).sum();
        let secs = raw_ingest(meili, &uid, *collection, batches, &guard).await?;
        eprintln!(
            "meili-bench: (a) ingested {docs} {} in {secs:.2}s",
            collection.name()
        );
        ingest.push(json!({ "collection": collection.name(), "docs": docs,
            "batches": batches.len(), "bytes": bytes, "secs": secs }));
        // Free the stand-in's memory before `once` runs on the same server.
        let task = meili.delete_index(&uid, &guard).await?;
        meili.wait_ok(task, "delete index", &guard).await?;
    }
    drop(prepared);

    // (b) MongoDB read + version-exact acknowledgement (flags stay set: scratch data).
    let mut pass = Vec::new();
    for collection in Collection::ALL {
        let (docs, pages, secs) = raw_mongo_pass(db, collection, batch_docs, &guard).await?;
        eprintln!(
            "meili-bench: (b) read and acknowledged {docs} {} in {secs:.2}s",
            collection.name()
        );
        pass.push(
            json!({ "collection": collection.name(), "docs": docs, "pages": pages, "secs": secs }),
        );
    }
    Ok(json!({ "ingest": ingest, "mongo_pass": pass }))
}

async fn flagged(db: &Database, collection: Collection) -> anyhow::Result<u64> {
    Ok(db
        .collection::<Document>(collection.name())
        .count_documents(doc! { FLAG: true })
        .await?)
}

/// Every unindexed document as `once` shapes it, cut into NDJSON batches by
/// count and bytes: `(documents, payload)` per batch.
async fn ndjson_batches(
    db: &Database,
    collection: Collection,
    batch_docs: usize,
    batch_bytes: usize,
) -> anyhow::Result<Vec<(usize, Vec<u8>)>> {
    let mut batches = Vec::new();
    let (mut count, mut payload) = (0usize, Vec::new());
    let mut after: Option<Bson> = None;
    loop {
        let now = mongo::server_time(db).await?;
        let page =
            mongo::read_unindexed_page(db, collection, now, after.as_ref(), batch_docs).await?;
        after = page.last().and_then(|d| d.get("_id").cloned());
        for doc in &page {
            let mut line = serde_json::to_vec(&mongo::to_meili(collection, doc))?;
            line.push(b'\n');
            if count > 0 && (count >= batch_docs || payload.len() + line.len() > batch_bytes) {
                batches.push((count, std::mem::take(&mut payload)));
                count = 0;
            }
            payload.extend_from_slice(&line);
            count += 1;
        }
        if page.len() < batch_docs {
            break;
        }
    }
    if count > 0 {
        batches.push((count, payload));
    }
    Ok(batches)
}

/// (a): a fresh index with the desired settings (not timed), then every
/// batch enqueued at once and the time until the last task ended.
async fn raw_ingest(
    meili: &Meili,
    uid: &str,
    collection: Collection,
    batches: &[(usize, Vec<u8>)],
    guard: &Guard,
) -> anyhow::Result<f64> {
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

    let payloads: Vec<Arc<[u8]>> = batches.iter().map(|(_, b)| Arc::from(&b[..])).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for payload in payloads {
        tasks.push(meili.add_documents_ndjson(uid, payload, guard).await?);
    }
    let Some(&last) = tasks.last() else {
        return Ok(0.0);
    };
    // Tasks of one index run in order: the last one ending ends the ingest.
    // Polled every 5 ms so the measurement does not overshoot.
    loop {
        let answer = meili.tasks(&format!("uids={last}")).await?;
        match answer["results"][0]["status"].as_str() {
            Some("succeeded") => break,
            Some("failed") | Some("canceled") => bail!("task {last} failed: {answer}"),
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let uids: Vec<String> = tasks.iter().map(u64::to_string).collect();
    let answer = meili
        .tasks(&format!("uids={}&limit={}", uids.join(","), tasks.len()))
        .await?;
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    ensure!(
        results.len() == tasks.len() && results.iter().all(|t| t["status"] == "succeeded"),
        "not every ingest task succeeded"
    );
    Ok(secs)
}

/// (b): pages of unindexed documents by `_id` (the clock read, the read and
/// the projection `once` uses), each acknowledged with `once`'s own
/// version-exact statements. Returns (documents, pages, seconds).
async fn raw_mongo_pass(
    db: &Database,
    collection: Collection,
    page_size: usize,
    guard: &Guard,
) -> anyhow::Result<(u64, u64, f64)> {
    let started = Instant::now();
    let (mut docs, mut pages) = (0u64, 0u64);
    let mut after: Option<Bson> = None;
    loop {
        let read_time = mongo::server_time(db).await?;
        let page = mongo::read_unindexed_page(db, collection, read_time, after.as_ref(), page_size)
            .await?;
        let Some(last) = page.last() else {
            break;
        };
        let last = last.get("_id").unwrap();
        let versions: Vec<mongo::DocVersion> = page.iter().map(mongo::DocVersion::of).collect();
        let mut acked = 0;
        for chunk in versions.chunks(mongo::STATEMENTS_PER_COMMAND) {
            let now = mongo::server_time(db).await?;
            acked += mongo::set_flags_if_unchanged(db, collection, chunk, now, guard)
                .await?
                .matched;
        }
        ensure!(
            acked == page.len() as u64,
            "acknowledged {acked} of a page of {}",
            page.len()
        );
        docs += acked;
        pages += 1;
        after = Some(last.clone());
        if page.len() < page_size {
            break;
        }
    }
    Ok((docs, pages, started.elapsed().as_secs_f64()))
}

/// Per collection: indexable / unindexed in MongoDB and documents in the
/// index; `complete` when nothing is left unindexed and the index holds
/// every indexable document.
async fn verify(db: &Database, meili: &Meili, prefix: &str) -> anyhow::Result<Value> {
    let now = mongo::server_time(db).await?;
    let mut complete = true;
    let mut per_collection = Vec::new();
    for collection in Collection::ALL {
        let counts = mongo::counts(db, collection, now).await?;
        let uid = format!("{prefix}{}", collection.index_name());
        let in_meili = match meili.index(&uid).await? {
            Some(_) => meili.document_count(&uid).await?,
            None => 0,
        };
        complete &= counts.unindexed == 0 && in_meili == counts.indexable;
        per_collection.push(json!({ "collection": collection.name(),
            "indexable": counts.indexable, "unindexed": counts.unindexed, "in_meili": in_meili }));
    }
    Ok(json!({ "complete": complete, "collections": per_collection }))
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
