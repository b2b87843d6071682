//! Logging and progress reporting.
//!
//! `tracing` with a human format on a terminal and JSON lines otherwise
//! (overridable by `log.format`), level from `RUST_LOG` (default `info`).
//! Every line carries this replica's id, so the logs of many replicas can be
//! merged and still read. Progress of a run goes to the log every few seconds
//! and, when stderr is a terminal, to a progress bar.

use std::fmt;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::sync::CancellationToken;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;
use crate::progress::Progress;

/// Installs the global subscriber. Safe to call once per process.
pub fn init(format: &LogFormat, replica: &str) {
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if json {
        builder
            .event_format(WithReplica {
                replica: replica.to_string(),
                json: true,
                inner: format::format().json().flatten_event(true),
            })
            .fmt_fields(format::JsonFields::new())
            .try_init()
    } else {
        builder
            .event_format(WithReplica {
                replica: replica.to_string(),
                json: false,
                inner: format::format().with_target(false),
            })
            .try_init()
    };
    // A second init (tests) keeps the first subscriber.
    let _ = result;
}

/// Adds the replica id to every line: a `replica` field in JSON, a prefix
/// in the human format.
struct WithReplica<F> {
    replica: String,
    json: bool,
    inner: F,
}

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
        if !self.json {
            write!(writer, "[{}] ", self.replica)?;
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => {
                let id = serde_json::to_string(&self.replica).map_err(|_| fmt::Error)?;
                write!(writer, "{{\"replica\":{id},{rest}")
            }
            None => writer.write_str(&line),
        }
    }
}

/// Reports `progress` every `every` until `stop` fires: a log line each
/// time, and a live bar when stderr is a terminal.
pub fn spawn_progress_reporter(
    progress: Progress,
    every: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:>10} [{bar:40}] {pos}/{len} ({per_sec}, ETA {eta})",
                )
                .expect("static template")
                .progress_chars("=> "),
            );
            bar
        });
        let mut log_tick = tokio::time::interval(every);
        let mut bar_tick = tokio::time::interval(Duration::from_millis(200));
        let mut last_logged = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = bar_tick.tick(), if bar.is_some() => {
                    let snap = progress.snapshot();
                    if let Some(bar) = &bar {
                        bar.set_message(snap.phase.clone());
                        bar.set_length(snap.total.max(snap.done));
                        bar.set_position(snap.done);
                    }
                }
                _ = log_tick.tick() => {
                    let snap = progress.snapshot();
                    let key = (snap.phase.clone(), snap.done);
                    if snap.total > 0 && last_logged.as_ref() != Some(&key) {
                        tracing::info!(
                            phase = %snap.phase,
                            done = snap.done,
                            total = snap.total,
                            docs_per_sec = format!("{:.0}", snap.docs_per_sec),
                            eta = snap.eta_secs.map(|s| humantime::format_duration(Duration::from_secs(s)).to_string()).unwrap_or_else(|| "unknown".into()),
                            "progress"
                        );
                        last_logged = Some(key);
                    }
                }
            }
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
    })
}
