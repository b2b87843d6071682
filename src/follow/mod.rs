//! Follow mode (docs/design.md §4.12, §5.12, §6.1): between reconciliations
//! the `run` replica that owns the lease tails one MongoDB change stream on
//! the chat collections and applies every insert, edit and delete to
//! Meilisearch in micro-batches, within about a second of the write.
//!
//! The owner keeps the lease while it follows (`lease.hold_after_completion`),
//! saves its resume token under the fence with each applied micro-batch, and
//! hands the lease over at a safe point when `once`, `reindex` or
//! `verify --repair` asks for it. The next owner resumes from the saved
//! token; without one (or when it is no longer in the oplog) it opens the
//! stream first, reconciles, and follows from the point taken before the
//! reconciliation began. Periodic reconciliations keep running as the
//! safety net.
//!
//! Where each rule lives:
//! - `stream`: the change stream itself — its filter and options,
//!   pre-images, where it starts, what its errors mean, and the task that
//!   reads it;
//! - `batch`: micro-batching (last change per document, when to flush);
//! - `apply`: what one micro-batch does to Meilisearch and MongoDB, in
//!   three steps (prepare, enqueue, settle);
//! - `pipeline`: the micro-batches in flight — the next one enqueued while
//!   Meilisearch still processes the one before — and what stays in order;
//! - `latency`: where the delay from a change to Meilisearch goes, stage by
//!   stage;
//! - `expiry`: when the next document expires, and the sweep at that time
//!   (expiry writes nothing to the stream);
//! - `owner`: the lease owner's job (start, follow, periodic runs,
//!   handover);
//! - `pending`: what the owner has applied but not yet saved, or owes (the
//!   resume tokens, the comparisons owed);
//! - `replica`: a `run` replica's loop around it (wait for the lease,
//!   resume after a handover, fall back to interval mode);
//! - `saved`: what follow mode keeps in the lease document (the resume
//!   token, the comparisons owed), written under the lease's fence;
//! - `mode`: follow or interval mode, and why (the server's answer, what
//!   would give follow mode), for the log, `/status` and `status`;
//! - `status`: what `/status` and `/metrics` show;
//! - [`ReplicaReport`]: what follow mode tells the replica it runs on (its
//!   role, its last run, its mode), implemented above follow mode (`serve`),
//!   so that nothing here imports the layer that runs it.

mod apply;
mod batch;
mod expiry;
mod latency;
pub mod mode;
mod owner;
mod pending;
mod pipeline;
pub(crate) mod replica;
pub mod saved;
mod status;
mod stream;

use std::time::Duration;

pub(crate) use crate::config::FollowOptions;
use crate::job::RunOutcome;
use crate::progress::Progress;
pub(crate) use mode::Mode;
pub use mode::ModeView;
pub(crate) use status::{FollowState, FollowStatus};

/// What follow mode tells the `run` replica it runs on, for its `/status`
/// (the replica's own state lives in `serve`, which implements this).
pub(crate) trait ReplicaReport: Send + Sync {
    /// Where follow mode stands on this replica.
    fn follow(&self) -> &FollowStatus;
    /// The progress of the run this replica owns.
    fn progress(&self) -> &Progress;
    /// The replica reconciles (`true`), or is between runs (following, or
    /// waiting to follow).
    fn reconciling(&self, reconciling: bool);
    /// A run ended with `outcome`; the next is due in `next_run_in_secs`.
    fn finished(&self, outcome: RunOutcome, next_run_in_secs: u64);
    /// The replica's mode changed (interval mode, when the server turned out
    /// not to serve change streams); said once.
    fn enter_mode(&self, mode: ModeView, interval: Duration);
}
