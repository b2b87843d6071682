//! The `meili-reconciler` command line: parses arguments, loads settings,
//! calls the library, and maps each outcome to the exit codes operators script
//! against (see [`Exit`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use meili_reconciler::config::{self, LogFormat, Settings, Sources};
use meili_reconciler::servers::{self, StartupRetry, Unreachable};
use meili_reconciler::telemetry;

/// Exit codes (DESIGN.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// Done: by us, or by the owner we waited for.
    Done = 0,
    /// The run failed.
    Failed = 1,
    /// Bad configuration (nothing was touched).
    BadConfig = 2,
    /// The lease was lost mid-run, or the wait for the owner timed out.
    #[allow(dead_code)] // returned once the lease is wired in
    LeaseLost = 3,
    /// MongoDB or Meilisearch could not be reached.
    Unreachable = 4,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "meili-reconciler",
    version,
    about = "Keeps Meilisearch in step with LibreChat's MongoDB collections; one replica at a time does the work.",
    long_about = "Keeps the Meilisearch indexes `messages` and `convos` in step with LibreChat's MongoDB \
collections `messages` and `conversations` (the `_meiliIndex` flag on each document). Replicas \
coordinate through a lease in MongoDB (`distributedJobs`): exactly one does the work, the others wait \
for its completion or take over if it dies.\n\n\
Settings: built-in defaults < config/default.toml < --config FILE < environment \
(LibreChat's MONGO_URI, MEILI_HOST, MEILI_MASTER_KEY, … or RECONCILER__SECTION__KEY).",
    after_help = "Exit codes: 0 done (by us or by the owner we waited for) · 1 failed · 2 bad configuration · \
3 lease lost or wait timed out · 4 a server unreachable"
)]
struct Cli {
    /// A TOML file layered over config/default.toml (and under the environment).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Log format; overrides log.format / RECONCILER__LOG__FORMAT.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormatArg>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormatArg {
    Auto,
    Pretty,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum IndexArg {
    Messages,
    Convos,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run beside an API replica: reconcile at start and every serve.interval,
    /// serve /healthz, /readyz, /status and /metrics; release the lease on SIGTERM/SIGINT.
    Run,
    /// One reconciliation as the owner, or wait as a follower for the owner's
    /// completion (taking over if it dies). Exit code says what happened.
    Once {
        /// Run even if a fresh completion exists and below the threshold.
        #[arg(long)]
        force: bool,
        /// Compare document id sets even when counts agree.
        #[arg(long)]
        deep: bool,
        /// How long a follower waits for the owner before exiting with code 3.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
        wait_timeout: Duration,
    },
    /// Forced full reindex under the same lease: builds `<index>_reindex`, swaps it
    /// in atomically, then drops the old index (search keeps answering throughout).
    Reindex {
        /// Only this index (default: both).
        #[arg(long, value_enum)]
        index: Option<IndexArg>,
        /// Reset flags and re-index into the live index instead of building a new one.
        #[arg(long)]
        in_place: bool,
        /// How long a follower waits for the owner before exiting with code 3.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
        wait_timeout: Duration,
    },
    /// Dry run: print what a reconciliation would do. Writes nothing, takes no lease.
    Plan {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Show the lease (owner, epoch, state, expiry, progress, ETA) and the last run's summary.
    Status {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut settings = match config::load(&Sources::from_process(cli.config.clone())) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("meili-reconciler: configuration error: {error}");
            return Exit::BadConfig.into();
        }
    };
    if let Some(format) = cli.log_format {
        settings.log.format = match format {
            LogFormatArg::Auto => LogFormat::Auto,
            LogFormatArg::Pretty => LogFormat::Pretty,
            LogFormatArg::Json => LogFormat::Json,
        };
    }
    let replica = replica_id(&settings);
    telemetry::init(&settings.log.format, &replica);

    if !settings.sync.enabled {
        tracing::info!("search is disabled (SEARCH=false); nothing to do");
        return Exit::Done.into();
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime
        .block_on(dispatch(cli.command, settings, replica))
        .into()
}

/// This replica's owner id in the lease and in every log line.
fn replica_id(settings: &Settings) -> String {
    if !settings.lease.owner.is_empty() {
        return settings.lease.owner.clone();
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "replica".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..6])
}

async fn dispatch(command: Command, settings: Settings, _replica: String) -> Exit {
    let retry = StartupRetry::default();
    let (_mongo_client, _db) = match servers::connect_mongo(&settings.mongo, &retry).await {
        Ok(connected) => connected,
        Err(error) => return unreachable(error),
    };
    if !matches!(command, Command::Status { .. }) {
        let meili = servers::meili_client(&settings.meili);
        if let Err(error) = servers::check_meili(&meili, &settings.meili, &retry).await {
            return unreachable(error);
        }
    }
    let name = match command {
        Command::Run => "run",
        Command::Once { .. } => "once",
        Command::Reindex { .. } => "reindex",
        Command::Plan { .. } => "plan",
        Command::Status { .. } => "status",
    };
    tracing::error!("`{name}` is not implemented yet");
    Exit::Failed
}

fn unreachable(error: Unreachable) -> Exit {
    tracing::error!(server = %error.server, reason = %error.reason, "server unreachable");
    eprintln!("meili-reconciler: {error}");
    Exit::Unreachable
}
