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
    /// Which indexes the collections get after the insert: `own` (the
    /// seeder's: LibreChat's sync index, `messageId`, `conversationId`),
    /// `librechat` (every index LibreChat's own models build on both
    /// collections, by its data layer: `tests/librechat/librechat.cjs
    /// indexes`, which needs Node.js and `npm ci` there),
    /// `librechat-plain-unique` (the same, its two unique compound indexes
    /// built as plain ones: on DocumentDB their uniqueness check makes the
    /// build quadratic and every write linear in the collection) or `none`.
    #[arg(long, value_enum, default_value_t = Indexes::Own)]
    indexes: Indexes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Indexes {
    Own,
    Librechat,
    LibrechatPlainUnique,
    None,
}

/// LibreChat's own index builds of `database`, by its data layer; the
/// index names of each collection afterwards.
fn librechat_indexes(
    mongo_uri: &str,
    database: &str,
    plain_unique: bool,
) -> anyhow::Result<serde_json::Value> {
    let harness = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/librechat/librechat.cjs"
    );
    let output = std::process::Command::new("node")
        .arg(harness)
        .arg("indexes")
        .env("MONGO_URI", mongo_uri)
        .env("LIBRECHAT_DB", database)
        .env(
            "LIBRECHAT_PLAIN_UNIQUE",
            if plain_unique { "1" } else { "0" },
        )
        .stderr(std::process::Stdio::inherit())
        .output()
        .context(
            "running node (LibreChat's indexes need Node.js and `npm ci` in tests/librechat)",
        )?;
    anyhow::ensure!(
        output.status.success(),
        "LibreChat's index builds failed ({}); run `npm ci` in tests/librechat",
        output.status
    );
    serde_json::from_slice(&output.stdout).context("the harness's answer")
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
        indexes: args.indexes == Indexes::Own,
        ..Default::default()
    };
    let report = seeder::seed(&db, &spec).await?;
    if matches!(
        args.indexes,
        Indexes::Librechat | Indexes::LibrechatPlainUnique
    ) {
        let plain_unique = args.indexes == Indexes::LibrechatPlainUnique;
        let built = librechat_indexes(&args.mongo_uri, &args.database, plain_unique)?;
        if args.progress {
            eprintln!("meili-seed: LibreChat's indexes: {built}");
        }
    }
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
