//! What this replica knows about itself, for `/status`: its role, the last
//! run's outcome, the progress of the run it owns, its mode (follow or
//! interval, and why) and where it stands in follow mode.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use crate::follow::{FollowState, FollowStatus, Mode, ModeView, ReplicaReport};
use crate::job::RunOutcome;
use crate::progress::Progress;

/// What the replica is doing right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Role {
    /// Started, no run yet.
    #[default]
    Starting,
    /// In a run: owning the lease or waiting for its owner.
    Reconciling,
    /// Between runs (in follow mode: following, or waiting for the owner).
    Idle,
    /// Shutting down.
    Stopping,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LastRun {
    /// RFC 3339, this replica's clock (informational only).
    finished_at: String,
    #[serde(flatten)]
    outcome: RunOutcome,
}

#[derive(Debug, Default)]
struct Inner {
    role: Role,
    last_run: Option<LastRun>,
    next_run_in_secs: Option<u64>,
    /// `None` until `run` has decided (it asks the server first).
    mode: Option<ModeView>,
}

/// Shared between the schedule and the HTTP handlers. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ReplicaState {
    pub(crate) replica: String,
    pub(crate) progress: Progress,
    /// Follow mode (`off` until `run` starts following).
    pub(crate) follow: FollowStatus,
    inner: Arc<RwLock<Inner>>,
}

impl ReplicaState {
    pub(crate) fn new(replica: String) -> Self {
        ReplicaState {
            replica,
            progress: Progress::new(),
            follow: FollowStatus::new(FollowState::Off),
            inner: Arc::default(),
        }
    }

    pub(crate) fn set_role(&self, role: Role) {
        self.inner.write().expect("state poisoned").role = role;
    }

    /// `/status`'s body: this replica, with `lease` as the store answered.
    pub(crate) fn status(&self, lease: Value) -> Value {
        let inner = self.inner.read().expect("state poisoned");
        let mut body = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "replica": self.replica,
            "role": inner.role,
            "progress": self.progress.snapshot(),
            "lastRun": inner.last_run,
            "nextRunInSecs": inner.next_run_in_secs,
            "follow": self.follow.view(),
            "lease": lease,
        });
        body.as_object_mut()
            .expect("the body is an object")
            .extend(ModeView::status_fields(inner.mode.as_ref()));
        body
    }
}

impl ReplicaReport for ReplicaState {
    fn follow(&self) -> &FollowStatus {
        &self.follow
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    fn reconciling(&self, reconciling: bool) {
        self.set_role(if reconciling {
            Role::Reconciling
        } else {
            Role::Idle
        });
    }

    fn finished(&self, outcome: RunOutcome, next_run_in_secs: u64) {
        let mut inner = self.inner.write().expect("state poisoned");
        inner.last_run = Some(LastRun {
            finished_at: time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            outcome,
        });
        inner.next_run_in_secs = Some(next_run_in_secs);
        if inner.role != Role::Stopping {
            inner.role = Role::Idle;
        }
    }

    /// Takes `mode` and logs its line, once: the mode this replica already
    /// has is not logged again. Interval mode imposed by the server also
    /// shows as follow state `unsupported`.
    fn enter_mode(&self, mode: ModeView, interval: Duration) {
        let mut inner = self.inner.write().expect("state poisoned");
        if inner.mode.as_ref() == Some(&mode) {
            return;
        }
        mode.log(interval);
        if mode.mode == Mode::Interval && !mode.chosen {
            self.follow.set_state(FollowState::Unsupported);
        }
        inner.mode = Some(mode);
    }
}
