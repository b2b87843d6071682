//! The `run` mode, beside every API replica: reconcile at start and then
//! every `serve.interval` (jittered so replicas do not fire together), serve
//! health, status and metrics over HTTP, and stop cleanly on SIGTERM/SIGINT.
//!
//! Every scheduled run goes through the lease like `once`: one replica does
//! the work, the others wait for its completion. At start a completion younger
//! than `lease.reuse_completion_for` satisfies a replica (rolling deploys);
//! afterwards one younger than 90% of the interval does, so the cluster
//! reconciles about once per interval, not once per replica. A failed run is
//! retried when the lease's `retryAt` comes, not only at the next interval.
//!
//! With `serve.follow` (the default) the replica instead waits for the lease
//! for itself and, as its owner, follows MongoDB's change streams between
//! periodic reconciliations ([`crate::follow::replica`]); a server without
//! change streams falls back to the interval schedule above, saying why
//! once ([`crate::follow::mode`]).

mod http;
mod state;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::between_runs::{jittered, retry_delay};
use crate::config::Settings;
use crate::follow::replica::{self, FollowEnd};
use crate::follow::{Mode, ModeView, ReplicaReport};
use crate::job::{self, Reconciler, RunOutcome};
use crate::lease::LeaseOptions;
use crate::mongo::Collection;
use crate::shutdown::Shutdown;
use state::{ReplicaState, Role};

pub use crate::between_runs::update_backlog;

/// `run` could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} (serve.listen): {reason}")]
pub struct ListenError {
    addr: String,
    reason: String,
}

/// Runs until `shutdown`; returns once the lease is released (if held) and
/// the HTTP server has stopped, or after `serve.grace` at the latest.
pub async fn run(
    settings: &Settings,
    reconciler: Reconciler,
    lease: LeaseOptions,
    replica: String,
    shutdown: Shutdown,
) -> Result<(), ListenError> {
    let listener = TcpListener::bind(settings.serve.listen)
        .await
        .map_err(|e| ListenError {
            addr: settings.serve.listen.to_string(),
            reason: e.to_string(),
        })?;
    let local = listener.local_addr().map(|a| a.to_string());
    let local = local.unwrap_or_default();
    tracing::info!(listen = %local, "serving /healthz /readyz /status /metrics");

    let state = ReplicaState::new(replica);
    let prefix = &reconciler.sync.index_prefix;
    let ctx = http::HttpContext {
        state: state.clone(),
        reconciler: reconciler.clone(),
        lease: lease.clone(),
        metrics: crate::metrics::install(&Collection::ALL.map(|c| c.index_uid(prefix))),
    };
    let server = axum::serve(listener, http::router(ctx))
        .with_graceful_shutdown(shutdown.token().cancelled_owned())
        .into_future();
    let server = tokio::spawn(server);

    let schedule = schedule(settings, &reconciler, &lease, &state, &shutdown);
    tokio::pin!(schedule);
    tokio::select! {
        _ = &mut schedule => {}
        _ = shutdown.requested() => {
            state.set_role(Role::Stopping);
            // The run in progress sees the same token: it stops at its next
            // safe point and releases the lease. Give it `grace` to do so.
            if tokio::time::timeout(settings.serve.grace, &mut schedule).await.is_err() {
                tracing::warn!(grace = ?settings.serve.grace, "work did not stop within the grace period; exiting anyway");
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    tracing::info!("stopped");
    Ok(())
}

/// The reconcile-then-wait loop; returns when shutdown is requested.
async fn schedule(
    settings: &Settings,
    reconciler: &Reconciler,
    lease: &LeaseOptions,
    state: &ReplicaState,
    shutdown: &Shutdown,
) {
    let interval = settings.serve.interval;
    // Never under `sync.plan_only`: `run` then only prints the plan (main.rs).
    let mode = ModeView::of_server(&reconciler.db, settings.serve.follow, false).await;
    let follow = mode.mode == Mode::Follow;
    state.enter_mode(mode, interval);
    if follow {
        let report: Arc<dyn ReplicaReport> = Arc::new(state.clone());
        let end = replica::run(reconciler, &settings.follow, lease, &report, shutdown).await;
        if end == FollowEnd::Stopped {
            return;
        }
    }
    let mut lease = lease.clone();
    lease.wait_timeout = None;
    while !shutdown.is_requested() {
        state.set_role(Role::Reconciling);
        let outcome =
            job::reconcile_once(reconciler, &lease, state.progress.clone(), shutdown.token()).await;
        report(&outcome);
        if shutdown.is_requested() {
            state.finished(outcome, 0);
            break;
        }
        update_backlog(reconciler).await;
        let wait = match &outcome {
            RunOutcome::Failed { .. } | RunOutcome::Unreachable { .. } => {
                retry_delay(reconciler, &lease).await.unwrap_or(interval)
            }
            _ => jittered(interval),
        };
        state.finished(outcome, wait.as_secs());
        tracing::info!(next_run_in = %humantime::format_duration(Duration::from_secs(wait.as_secs())), "waiting for the next run");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.requested() => break,
        }
        // After the first run, a completion from within this interval
        // (by any replica) is the reconciliation this tick asks for.
        lease.reuse_completion_for = interval.mul_f64(0.9);
    }
}

fn report(outcome: &RunOutcome) {
    match outcome {
        RunOutcome::Completed { .. } | RunOutcome::DoneByOther { .. } => {}
        RunOutcome::HandedOver { to } => tracing::info!(%to, "lease handed over"),
        RunOutcome::Failed { error }
        | RunOutcome::Unreachable { error }
        | RunOutcome::LeaseLost { error } => tracing::warn!(%error, "run did not complete"),
    }
}
