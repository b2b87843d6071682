//! Logging and progress reporting.
//!
//! `tracing` with a human format on a terminal and JSON lines otherwise
//! (overridable by `log.format`), level from `RUST_LOG` (default `info`;
//! the Meilisearch SDK's own lines only at `error` unless `RUST_LOG` names it).
//! Every line carries this replica's id, so the logs of many replicas can be
//! merged and still read. When stderr is a terminal, a run's progress is also
//! drawn as a bar.

use std::fmt;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;
use crate::progress::Progress;

/// Without `RUST_LOG`: our `info`, and only the SDK's errors (it warns on
/// every 404, which for us is the normal answer to "does this index exist?").
const DEFAULT_FILTER: &str = "info,meilisearch_sdk=error";

/// The log filter: `RUST_LOG` when set (with the SDK kept to its errors
/// unless it names `meilisearch_sdk` itself: `RUST_LOG=info` should not fill
/// operators' logs with those 404 warnings), else [`DEFAULT_FILTER`].
fn log_filter(rust_log: Option<&str>) -> EnvFilter {
    EnvFilter::new(match rust_log.filter(|v| !v.trim().is_empty()) {
        None => DEFAULT_FILTER.to_string(),
        Some(given) if given.contains("meilisearch_sdk") => given.to_string(),
        Some(given) => format!("{given},meilisearch_sdk=error"),
    })
}

/// Installs the global subscriber. Safe to call once per process.
pub fn init(format: &LogFormat, replica: &str) {
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let replica = replica.to_string();
    // A second init (tests) keeps the first subscriber.
    let _ = if json {
        let format = WithReplica(replica, true, format::format().json().flatten_event(true));
        let fields = format::JsonFields::new();
        builder.event_format(format).fmt_fields(fields).try_init()
    } else {
        let format = WithReplica(replica, false, format::format().with_target(false));
        builder.event_format(format).try_init()
    };
}

/// Adds the replica id (`.0`) to every line the format `.2` writes: a
/// `replica` field in JSON (`.1`), a prefix in the human format.
struct WithReplica<F>(String, bool, F);

impl<S, N, F> FormatEvent<S, N> for WithReplica<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let WithReplica(replica, json, inner) = self;
        if !json {
            write!(writer, "[{replica}] ")?;
            return inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        inner.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => {
                let id = serde_json::to_string(replica).map_err(|_| fmt::Error)?;
                write!(writer, "{{\"replica\":{id},{rest}")
            }
            None => writer.write_str(&line),
        }
    }
}

/// Draws `progress` as a live bar on stderr until `stop` fires, when stderr
/// is a terminal. (The engine itself logs progress every few seconds, so
/// non-terminal output — containers, CI — gets log lines, not bar frames.)
pub fn spawn_progress_reporter(progress: Progress, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let bar = ProgressBar::new(0);
        let template = "{msg:>20} [{bar:40}] {pos}/{len} ({per_sec}, ETA {eta})";
        let style = ProgressStyle::with_template(template).expect("static template");
        bar.set_style(style.progress_chars("=> "));
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {
                    let snap = progress.snapshot();
                    bar.set_message(snap.phase.clone());
                    bar.set_length(snap.total.max(snap.done));
                    bar.set_position(snap.done);
                }
            }
        }
        bar.finish_and_clear();
    })
}
