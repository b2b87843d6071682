//! `meili-seed`: fills a MongoDB database with LibreChat-shaped `messages`
//! and `conversations` (every edge case in small proportions) for the demo
//! and the benchmarks. The generator itself is `seeder.rs`, shared with the
//! integration tests.

#[allow(dead_code)]
mod seeder;

use anyhow::Context;
use clap::Parser;
use mongodb::bson::doc;

/// Seed LibreChat-shaped data into MongoDB.
#[derive(Parser, Debug)]
#[command(name = "meili-seed", version)]
struct Args {
    /// MongoDB connection string.
    #[arg(long, env = "MONGO_URI", hide_env_values = true)]
    mongo_uri: String,
    /// Database to write into.
    #[arg(long, default_value = "librechat")]
    database: String,
    /// Number of messages.
    #[arg(long, default_value_t = 1_000)]
    messages: usize,
    /// Number of conversations.
    #[arg(long, default_value_t = 100)]
    conversations: usize,
    /// Seed of the generator: the same seed gives the same documents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Drop `messages` and `conversations` before seeding.
    #[arg(long)]
    drop: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Print progress on stderr about every 5 s.
    #[arg(long)]
    progress: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Errors below never include the URI: it may carry credentials.
    let client = mongodb::Client::with_uri_str(&args.mongo_uri)
        .await
        .context("invalid MongoDB connection string")?;
    let db = client.database(&args.database);
    db.run_command(doc! { "ping": 1 })
        .await
        .context("MongoDB is unreachable")?;
    if args.drop {
        for name in ["messages", "conversations"] {
            db.collection::<mongodb::bson::Document>(name)
                .drop()
                .await
                .with_context(|| format!("dropping {name}"))?;
        }
    }
    let spec = seeder::SeedSpec {
        messages: args.messages,
        conversations: args.conversations,
        seed: args.seed,
        progress: args.progress,
        ..Default::default()
    };
    let report = seeder::seed(&db, &spec).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("database {}:\n{report}", args.database);
    }
    // End the driver's sessions while the runtime still runs: a client
    // dropped as `main` returns spawns that work onto a runtime shutting
    // down, where it can panic on the closed connection pool and print a
    // backtrace after the report.
    client.shutdown().immediate(true).await;
    Ok(())
}
