//! `meili-bench-expiry`: the clock of `scripts/bench-expiry` (docs/design.md
//! §7.4), run against a `meili-reconciler run` replica (following, or on its
//! interval) on the same database and index prefix.
//!
//! Gives `--docs` indexed messages an `expiredAt` (with `isTemporary:
//! false`, as LibreChat's retention does, no new version) spread evenly
//! from `--lead-secs` to `--lead-secs + --spread-secs` ahead of MongoDB's
//! clock (over `--moments` distinct moments, one update each: a burst of
//! thousands in one second is written in time), then lists the messages
//! index every 100 ms and times, per message, the delay from its
//! `expiredAt` (MongoDB's clock) to the first listing without it. Prints one JSON object on stdout: `docs`, `gone`,
//! `p50Secs`, `p99Secs`, `maxSecs`, `earlySecs` (the most negative delay:
//! a document gone before its expiry; 0 when none).

#[path = "bench_servers.rs"]
mod bench_servers;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use mongodb::bson::{doc, DateTime, Document};
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(name = "meili-bench-expiry", version)]
struct Args {
    #[command(flatten)]
    servers: bench_servers::ServerArgs,
    #[arg(long)]
    database: String,
    #[arg(long, default_value = "")]
    index_prefix: String,
    /// Messages given an expiry.
    #[arg(long, default_value_t = 50)]
    docs: usize,
    /// Seconds from now to the first expiry.
    #[arg(long, default_value_t = 3)]
    lead_secs: u64,
    /// Seconds over which the expiries are spread.
    #[arg(long, default_value_t = 10)]
    spread_secs: u64,
    /// Distinct expiry moments, spread evenly, the messages divided among
    /// them (one update each); default: one per message.
    #[arg(long)]
    moments: Option<usize>,
    /// Give up this long after the last expiry.
    #[arg(long, default_value_t = 120)]
    drain_secs: u64,
}

async fn server_now(db: &mongodb::Database) -> anyhow::Result<DateTime> {
    let hello = db.run_command(doc! { "hello": 1 }).await?;
    Ok(match hello.get("localTime") {
        Some(mongodb::bson::Bson::DateTime(t)) => *t,
        Some(mongodb::bson::Bson::Int64(ms)) => DateTime::from_millis(*ms),
        _ => bail!("hello has no localTime"),
    })
}

/// The message ids the index lists now.
async fn listed(http: &reqwest::Client, args: &Args) -> anyhow::Result<HashSet<String>> {
    let url = format!(
        "{}/indexes/{}messages/documents?fields=messageId&limit=1000000",
        args.servers.meili_host.trim_end_matches('/'),
        args.index_prefix
    );
    let body = http
        .get(url)
        .bearer_auth(&args.servers.meili_key)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let v: Value = serde_json::from_slice(&body)?;
    Ok(v["results"]
        .as_array()
        .context("a document listing")?
        .iter()
        .filter_map(|d| d["messageId"].as_str().map(str::to_string))
        .collect())
}

fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * q).round() as usize])
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = mongodb::Client::with_uri_str(&args.servers.mongo_uri).await?;
    let db = client.database(&args.database);
    let messages = db.collection::<Document>("messages");
    let http = reqwest::Client::new();

    let mut ids: Vec<String> = listed(&http, &args).await?.into_iter().collect();
    ids.sort();
    if ids.len() < args.docs {
        bail!(
            "the index lists {} messages, fewer than --docs {}",
            ids.len(),
            args.docs
        );
    }
    ids.truncate(args.docs);
    // Local = MongoDB's clock - offset.
    let now = server_now(&db).await?;
    let (local0, offset_ms) = (Instant::now(), now.timestamp_millis());
    // The messages in `moments` groups (consecutive, as even as they
    // divide), each group one moment and one update.
    let moments = args.moments.unwrap_or(args.docs).clamp(1, args.docs.max(1));
    let step_ms = (args.spread_secs * 1000) as f64 / moments as f64;
    let mut expiries = Vec::new();
    for g in 0..moments {
        let group = &ids[g * ids.len() / moments..(g + 1) * ids.len() / moments];
        if group.is_empty() {
            continue;
        }
        let at_ms =
            now.timestamp_millis() + (args.lead_secs * 1000) as i64 + (g as f64 * step_ms) as i64;
        messages
            .update_many(
                doc! { "messageId": { "$in": group } },
                doc! { "$set": { "isTemporary": false, "expiredAt": DateTime::from_millis(at_ms) } },
            )
            .await?;
        // The local moment MongoDB's clock reads `at_ms`.
        let moment = local0 + Duration::from_millis((at_ms - offset_ms).max(0) as u64);
        expiries.extend(group.iter().map(|_| moment));
    }
    eprintln!(
        "meili-bench-expiry: {} messages expire over {} s from {} s ahead",
        args.docs, args.spread_secs, args.lead_secs
    );
    if let Some(late) = Instant::now().checked_duration_since(expiries[0]) {
        eprintln!(
            "meili-bench-expiry: warning: the expiries were still being written {:.1} s after \
             the first one passed (those count as late as they were written): raise --lead-secs",
            late.as_secs_f64()
        );
    }
    let deadline = *expiries.last().unwrap() + Duration::from_secs(args.drain_secs);
    let mut delays: Vec<Option<f64>> = vec![None; ids.len()];
    while delays.iter().any(Option::is_none) && Instant::now() < deadline {
        let present = listed(&http, &args).await?;
        let at = Instant::now();
        for (i, id) in ids.iter().enumerate() {
            if delays[i].is_none() && !present.contains(id) {
                let delay = if at >= expiries[i] {
                    (at - expiries[i]).as_secs_f64()
                } else {
                    -(expiries[i] - at).as_secs_f64()
                };
                delays[i] = Some(delay);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut done: Vec<f64> = delays.iter().flatten().copied().collect();
    done.sort_by(f64::total_cmp);
    let report = json!({
        "docs": ids.len(),
        "gone": done.len(),
        "p50Secs": quantile(&done, 0.5),
        "p99Secs": quantile(&done, 0.99),
        "maxSecs": done.last(),
        "earlySecs": done.first().map_or(0.0, |d| d.min(0.0)),
    });
    println!("{report}");
    Ok(())
}
