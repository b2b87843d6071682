//! Follow mode (docs/design.md §4.12, §5.12, §6.1): between reconciliations
//! the `run` replica that owns the lease tails one MongoDB change stream on
//! the chat collections and applies every insert, edit and delete to
//! Meilisearch in micro-batches, within about a second of the write.
//!
//! The owner keeps the lease while it follows (`lease.start_following`),
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
//! - `replica`: a `run` replica's loop around it (wait for the lease,
//!   resume after a handover, fall back to interval mode);
//! - `mode`: follow or interval mode, and why (the server's answer, what
//!   would give follow mode), for the log, `/status` and `status`;
//! - `status`: what `/status` and `/metrics` show.

mod apply;
mod batch;
mod expiry;
mod latency;
pub mod mode;
mod owner;
mod pipeline;
pub mod replica;
pub mod status;
mod stream;

use std::time::Duration;

pub use crate::config::PreImages;
pub use mode::{Mode, ModeView};
pub use status::{FollowState, FollowStatus};

/// The knobs of follow mode, from the settings.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// A micro-batch is applied once it holds this many documents...
    pub max_docs: usize,
    /// ...or once its first change is this old.
    pub max_wait: Duration,
    pub pre_images: PreImages,
    /// The id-set comparison for deletes without a pre-image runs at most
    /// this often.
    pub orphan_check_every: Duration,
    /// `serve.interval`: the periodic reconciliation, and how fresh the last
    /// one must be to resume from a saved token without reconciling.
    pub interval: Duration,
    /// `lease.poll_every`: how often the owner looks for a handover request.
    pub poll_every: Duration,
}

impl FollowOptions {
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        FollowOptions {
            max_docs: settings.follow.max_docs,
            max_wait: settings.follow.max_wait,
            pre_images: settings.follow.pre_images,
            orphan_check_every: settings.follow.orphan_check_every,
            interval: settings.serve.interval,
            poll_every: settings.lease.poll_every,
        }
    }
}
