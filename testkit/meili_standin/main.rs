//! `meili-standin`: an in-memory HTTP server that answers the Meilisearch v1
//! endpoints meili-reconciler uses the way a real Meilisearch does (status
//! codes, error objects, asynchronous tasks processed one at a time), plus a
//! few test knobs under `/_standin/` (see [`knobs`]).
//!
//! It exists so the test suite, the demo and the benchmarks run without a
//! real Meilisearch, and so tests can inject latency, task failures and
//! outages that a real server cannot be asked for. Its behaviour is pinned by
//! `tests/meili_contract.rs`, which passes against both this and a real server.
//!
//! Usage: `meili-standin --listen 127.0.0.1:7700 --master-key KEY
//! [--payload-limit-bytes N] [--per-document-cost-us N]
//! [--model-meilisearch [--model-scale S]]`.

mod auth;
mod autobatch;
mod body;
mod clock;
mod documents;
mod errors;
mod filter;
mod index;
mod indexes;
mod ingest;
mod knobs;
mod model;
mod request_log;
mod routes;
mod search;
mod server;
mod settings;
mod state;
mod tasks;
mod worker;

use std::net::SocketAddr;

use clap::Parser;

/// Command line of the stand-in.
#[derive(Debug, Parser)]
#[command(
    name = "meili-standin",
    about = "In-memory Meilisearch v1 stand-in for tests"
)]
struct Args {
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Master key every request but `/health` must present as a bearer token.
    #[arg(long, env = "MEILI_MASTER_KEY", hide_env_values = true)]
    master_key: String,
    /// Largest accepted request body, in bytes (Meilisearch's default: 100 MiB).
    #[arg(long, default_value_t = 100 * 1024 * 1024)]
    payload_limit_bytes: usize,
    /// Simulated processing cost per document of an addition task, in microseconds.
    #[arg(long, default_value_t = 0)]
    per_document_cost_us: u64,
    /// Benchmark mode: auto-batch document tasks as Meilisearch does and make
    /// each batch take the time Meilisearch would (see `model.rs`; tune it
    /// with `POST /_standin/model`).
    #[arg(long)]
    model_meilisearch: bool,
    /// Multiplies every modelled cost (e.g. 0.1 for a quick run).
    #[arg(long, default_value_t = 1.0, value_parser = parse_scale)]
    model_scale: f64,
}

fn parse_scale(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(scale) if scale.is_finite() && scale >= 0.0 => Ok(scale),
        _ => Err(format!(
            "expected a finite number ≥ 0 (e.g. 0.1), got `{raw}`"
        )),
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let state = state::AppState::new(state::Config {
        master_key: args.master_key,
        payload_limit_bytes: args.payload_limit_bytes,
    });
    state
        .knobs
        .set_per_document_cost_us(args.per_document_cost_us);
    state.knobs.set_startup_model(model::Model {
        enabled: args.model_meilisearch,
        scale: args.model_scale,
        ..model::Model::default()
    });
    tokio::spawn(worker::run(state.clone()));
    if let Err(error) = server::serve(args.listen, state).await {
        eprintln!("meili-standin: {error}");
        std::process::exit(1);
    }
}
