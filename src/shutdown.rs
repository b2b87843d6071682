//! Graceful shutdown: one token that SIGTERM or SIGINT cancels.
//!
//! Every long-running part of the process (the schedule in `run`, a follower's
//! wait, the leased job through its guard) selects on [`Shutdown::requested`]
//! and stops at its next safe point; the lease is then released so a follower
//! can take over at once instead of waiting out the ttl.

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// Cheap to clone; all clones observe the same request.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    /// A shutdown that SIGTERM and SIGINT (Ctrl-C) trigger.
    pub fn on_signals() -> Self {
        let shutdown = Shutdown::default();
        let trigger = shutdown.token();
        tokio::spawn(async move {
            let signal = wait_for_signal().await;
            tracing::info!(
                signal,
                "shutdown requested; stopping at the next safe point"
            );
            trigger.cancel();
        });
        shutdown
    }

    pub(crate) fn is_requested(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once shutdown has been requested.
    pub(crate) fn requested(&self) -> WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// The token behind it, for APIs that take one.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}
