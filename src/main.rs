//! The `meili-reconciler` command line: parses arguments, loads settings,
//! calls the library, and ends with the exit code of each outcome
//! ([`Exit`], numbered in `meili_reconciler::job`).

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};

use meili_reconciler::config::{self, LogFormat, Settings, Sources};
use meili_reconciler::follow::{self, ModeView};
use meili_reconciler::job::{self, Exit, Reconciler, RunOutcome};
use meili_reconciler::lease::{self, LeaseOptions};
use meili_reconciler::memory;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{self, ReindexOptions, RunSummary};
use meili_reconciler::serve;
use meili_reconciler::servers::{self, Unreachable};
use meili_reconciler::shutdown::Shutdown;
use meili_reconciler::telemetry;
use meili_reconciler::views;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// Prints a line to stdout. A reader that went away (`status --json | head`)
/// is not an error of ours: the failed write is ignored instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
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
    after_help = "Exit codes: 0 done (by us or by the owner we waited for) · 1 failed (verify: differences found) · \
2 bad configuration · 3 lease lost or wait timed out · 4 a server unreachable"
)]
struct Cli {
    /// A TOML file layered over config/default.toml (and under the environment).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Log format; overrides log.format / RECONCILER__LOG__FORMAT.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,

    #[command(subcommand)]
    command: Command,
}

/// `--index NAME`: one of the table's index names (`messages`, `convos`).
fn index_arg() -> impl TypedValueParser<Value = Collection> {
    let names = PossibleValuesParser::new(Collection::ALL.map(Collection::index_name));
    let named = |name: String| Collection::ALL.into_iter().find(|c| c.index_name() == name);
    names.map(move |name| named(name).unwrap())
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
        /// Compare every document's contents with MongoDB (as verify --repair
        /// does), not only the id sets, and repair what differs.
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
        #[arg(long, value_parser = index_arg())]
        index: Option<Collection>,
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
    /// Compare every Meilisearch document with its MongoDB document and report
    /// missing, unexpected and stale documents (exit 1 when there are any);
    /// with --repair, fix exactly those as the lease owner.
    Verify {
        /// Only this index (default: both).
        #[arg(long, value_parser = index_arg())]
        index: Option<Collection>,
        /// Fix the differences (send, flag, delete) under the lease.
        #[arg(long)]
        repair: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// With --repair: how long to wait for another owner before exiting with code 3.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
        wait_timeout: Duration,
    },
    /// Show the lease (owner, epoch, state, expiry, progress, ETA) and the last run's summary.
    Status {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// This build's version (`Cargo.toml`), as `--version`, the start line and
/// `/status` show it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

impl Command {
    /// The subcommand's name, as typed.
    fn name(&self) -> &'static str {
        match self {
            Command::Run => "run",
            Command::Once { .. } => "once",
            Command::Reindex { .. } => "reindex",
            Command::Plan { .. } => "plan",
            Command::Verify { repair: false, .. } => "verify",
            Command::Verify { repair: true, .. } => "verify --repair",
            Command::Status { .. } => "status",
        }
    }

    /// Commands an operator runs at a terminal: they try each server once and
    /// exit 4 within `mongo.connect_timeout`, with one line on stderr, instead
    /// of waiting for a server that may still be starting (as `once` and `run`
    /// do beside it).
    fn is_interactive(&self) -> bool {
        matches!(self.name(), "plan" | "status" | "verify")
    }
}

fn main() -> ExitCode {
    memory::tune();
    let cli = Cli::parse();
    let mut settings = match config::load(&Sources::from_process(cli.config.clone())) {
        Ok(settings) => settings,
        Err(error) => return fail(format!("configuration error: {error}"), Exit::BadConfig).into(),
    };
    settings.log.format = cli.log_format.unwrap_or(settings.log.format);
    // Unique per process even when every replica is given the same
    // `lease.owner`: this replica's id in the lease and in every log line.
    let replica = settings.lease.owner.clone();
    telemetry::init(&settings.log.format, &replica);
    if !cli.command.is_interactive() {
        // Which build wrote the log: one line, before anything else.
        let command = cli.command.name();
        tracing::info!(
            version = VERSION,
            command,
            "meili-reconciler {VERSION} starting `{command}`"
        );
    }
    for set in &settings.librechat_overrides {
        // LibreChat's own sync settings in the shared `.env`: said once, plainly.
        tracing::warn!(
            variable = set.var,
            value = %set.value,
            setting = set.key,
            set_to = %set.set_to,
            replaced = %set.replaced,
            "{set}"
        );
    }
    if settings.librechat_sync_off {
        // LibreChat's switch, not ours: say we saw it, and that we still work.
        tracing::info!(
            "MEILI_NO_SYNC=true: LibreChat's in-process sync is off, the recommended set-up beside this service; \
             this service still reconciles (plan only is RECONCILER__SYNC__PLAN_ONLY=true or `plan`)"
        );
    }

    if !settings.sync.enabled {
        tracing::info!("search is disabled (SEARCH=false); nothing to do");
        return Exit::Done.into();
    }

    memory::give_back_periodically();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let exit = runtime.block_on(dispatch(cli.command, settings, replica));
    // Leave without tearing the runtime down: the MongoDB driver's
    // background tasks may still be running (an error can end a command
    // while its client is connecting), and dropping them mid-flight can make
    // one panic on a closed channel and print that after our one-line
    // error. Everything worth writing is written; the process ends here.
    std::mem::forget(runtime);
    exit.into()
}

async fn dispatch(command: Command, settings: Settings, replica: String) -> Exit {
    let interactive = command.is_interactive();
    let patience = interactive.then_some(settings.mongo.connect_timeout);
    let (_mongo_client, db) = match servers::connect_mongo(&settings.mongo, patience).await {
        Ok(connected) => connected,
        Err(error) => return unreachable(error, interactive),
    };
    let lease_opts = job::lease_options(&settings);
    if let Command::Status { json } = command {
        return status(&db, &settings, json).await;
    }
    let meili = servers::meili_client(&settings.meili);
    if let Err(error) = servers::check_meili(&meili, &settings.meili, patience).await {
        return unreachable(error, interactive);
    }
    let mut reconciler = Reconciler {
        db,
        meili,
        sync: job::sync_options(&settings),
    };
    match command {
        Command::Plan { json } => plan(&reconciler, json).await,
        Command::Once { .. } | Command::Run if settings.sync.plan_only => {
            tracing::info!("sync.plan_only is set: printing the plan, writing nothing");
            plan(&reconciler, false).await
        }
        Command::Once {
            force,
            deep,
            wait_timeout,
        } => {
            reconciler.sync.force = force;
            reconciler.sync.deep = deep;
            // A deep comparison is asked for by name: a fresh completion
            // (which compared no contents) does not satisfy it.
            let r = &reconciler;
            let lease_opts = under_lease(lease_opts, wait_timeout, force || deep, false);
            leased(r, lease_opts, false, |guard, progress| async move {
                reconcile::reconcile(&r.db, &r.meili, &r.sync, &guard, &progress).await
            })
            .await
        }
        Command::Reindex {
            index: only,
            in_place,
            wait_timeout,
        } => {
            let options = &ReindexOptions { only, in_place };
            let r = &reconciler;
            let lease_opts = under_lease(lease_opts, wait_timeout, true, true);
            leased(r, lease_opts, false, |guard, progress| async move {
                reconcile::reindex(&r.db, &r.meili, &r.sync, options, &guard, &progress).await
            })
            .await
        }
        Command::Verify {
            index,
            repair,
            json,
            wait_timeout,
        } => match repair {
            false => verify(&reconciler, index, json).await,
            true => {
                let r = &reconciler;
                let lease_opts = under_lease(lease_opts, wait_timeout, true, true);
                leased(r, lease_opts, json, |guard, progress| async move {
                    reconcile::verify::repair(&r.db, &r.meili, &r.sync, index, &guard, &progress)
                        .await
                })
                .await
            }
        },
        Command::Run => run(&settings, reconciler, lease_opts, replica).await,
        Command::Status { .. } => unreachable!("handled above"),
    }
}

/// `run`: serves until a signal (exit 0), or fails to start (exit 2).
async fn run(settings: &Settings, r: Reconciler, lease: LeaseOptions, replica: String) -> Exit {
    let shutdown = Shutdown::on_signals();
    match serve::run(settings, r, lease, replica, shutdown).await {
        Ok(()) => Exit::Done,
        Err(error) => fail(error, Exit::BadConfig),
    }
}

/// The lease options of a command under the lease (`once`, `reindex`,
/// `verify --repair`): a replica following change streams is asked to hand
/// the lease over, another owner is waited for up to `wait`. With `force`
/// no completion satisfies it; with `own` (`reindex`, `verify --repair`)
/// only a run of its own does.
fn under_lease(mut opts: LeaseOptions, wait: Duration, force: bool, own: bool) -> LeaseOptions {
    opts.force = force;
    opts.own_run_only = own;
    opts.request_handover = true;
    opts.wait_timeout = Some(wait);
    opts
}

/// A command under the lease: `work` runs as the owner ([`job::run_leased`])
/// with a progress reporter until done or a signal, then its outcome is
/// printed ([`finish`]).
async fn leased<W, Fut>(r: &Reconciler, opts: LeaseOptions, json: bool, work: W) -> Exit
where
    W: FnMut(lease::Guard, Progress) -> Fut + Send,
    Fut: std::future::Future<Output = Result<RunSummary, reconcile::ReconcileError>> + Send,
{
    let shutdown = Shutdown::on_signals();
    let outcome =
        with_progress(|progress| job::run_leased(&r.db, &opts, progress, shutdown.token(), work))
            .await;
    finish(outcome, json)
}

/// Runs `work` with a progress reporter (log lines, and a bar on a terminal).
async fn with_progress<F, Fut, T>(work: F) -> T
where
    F: FnOnce(Progress) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let progress = Progress::new();
    let stop = CancellationToken::new();
    let reporter = telemetry::spawn_progress_reporter(progress.clone(), stop.clone());
    let outcome = work(progress).await;
    stop.cancel();
    let _ = reporter.await;
    outcome
}

/// Prints the outcome for the operator (a completed run's summary as JSON
/// with `json`) and picks the exit code.
fn finish(outcome: RunOutcome, json: bool) -> Exit {
    let exit = outcome.exit();
    match &outcome {
        RunOutcome::Completed { summary, .. } if json => return show(summary, true, exit),
        RunOutcome::Completed { text, rejects, .. } => {
            out!("{text}");
            if *rejects > 0 {
                out!("(the rejected documents are listed in the lease's summary: `meili-reconciler status --json`; they stay unindexed)");
            }
        }
        RunOutcome::DoneByOther { owner, .. } => out!(
            "done by {} (this replica waited for its completion)",
            owner.as_deref().unwrap_or("another replica")
        ),
        RunOutcome::HandedOver { to } => out!("handed the lease over to {to}"),
        RunOutcome::Failed { error }
        | RunOutcome::Unreachable { error }
        | RunOutcome::LeaseLost { error } => return fail(error, exit),
    }
    exit
}

async fn plan(reconciler: &Reconciler, json: bool) -> Exit {
    let planned = async {
        let mut plan = reconcile::plan(&reconciler.db, &reconciler.meili, &reconciler.sync).await?;
        reconcile::plan::librechat_view(&reconciler.db, &reconciler.sync, &mut plan).await?;
        Ok::<_, reconcile::ReconcileError>(plan)
    };
    match planned.await {
        Ok(plan) => show(&plan, json, Exit::Done),
        Err(error) => fail(&error, Exit::of_engine_error(&error)),
    }
}

/// `verify` without `--repair`: reads both sides, writes nothing, takes no
/// lease. Exit 0 clean, 1 differences found (or the comparison failed), 4 a
/// server unreachable.
async fn verify(reconciler: &Reconciler, only: Option<Collection>, json: bool) -> Exit {
    let (db, meili, sync) = (&reconciler.db, &reconciler.meili, &reconciler.sync);
    let report = with_progress(|progress| async move {
        reconcile::verify::verify(db, meili, sync, only, &progress).await
    })
    .await;
    match report {
        Ok(report) if report.clean => show(&report, json, Exit::Done),
        Ok(report) => show(&report, json, Exit::Failed),
        Err(error) => fail(&error, Exit::of_engine_error(&error)),
    }
}

/// `status`: the lease, the mode `run` takes with these settings on this
/// server (and why), and the chat collections.
async fn status(db: &mongodb::Database, settings: &Settings, json: bool) -> Exit {
    let read = async {
        let status = lease::read_status(db, &settings.lease, follow::saved::describe)
            .await
            .map_err(|e| e.to_string())?;
        let mode = ModeView::of_server(db, settings.serve.follow, settings.sync.plan_only).await;
        let (rules, pre_images) = (settings.sync.rules(), settings.follow.pre_images);
        let collections = views::collections(db, &rules, pre_images).await;
        let collections = collections.map_err(|e| format!("counting the chat collections: {e}"))?;
        Ok::<_, String>((status, mode, collections))
    };
    match read.await {
        Ok((status, mode, collections)) if json => {
            let mut value = serde_json::to_value(&status).expect("status serializes");
            let object = value.as_object_mut().expect("the status is an object");
            object.extend(ModeView::status_fields(Some(&mode)));
            value["collections"] = serde_json::to_value(&collections).expect("the views serialize");
            show(&value, true, Exit::Done)
        }
        Ok((status, mode, collections)) => {
            out!("{status}");
            out!("{mode}");
            for view in &collections {
                out!("{view}");
            }
            Exit::Done
        }
        Err(error) => fail(error, Exit::Unreachable),
    }
}

/// Prints what a command found, as text or, with `json`, as pretty JSON;
/// `exit` is the exit code it ends with.
fn show(value: &(impl Serialize + fmt::Display), json: bool, exit: Exit) -> Exit {
    if json {
        let json = serde_json::to_string_pretty(value).expect("the output serializes");
        out!("{json}");
    } else {
        out!("{value}");
    }
    exit
}

/// Says why a command failed, in one line on stderr; `exit` is the exit
/// code it ends with.
fn fail(error: impl fmt::Display, exit: Exit) -> Exit {
    eprintln!("meili-reconciler: {error}");
    exit
}

/// Reports an unreachable server: one line on stderr; a service (`once`,
/// `run`, `reindex`) also logs it, for the log collector.
fn unreachable(error: Unreachable, interactive: bool) -> Exit {
    if !interactive {
        tracing::error!(server = %error.server, reason = %error.reason, "server unreachable");
    }
    fail(error, Exit::Unreachable)
}
