//! The reconciliation engine (docs/design.md §4): bring both Meilisearch indexes
//! in step with the chat collections, in a safe order — settings and index
//! structure of both indexes first, then — both collections side by side —
//! flag resets, the cleanup of excluded documents, the exact comparison a
//! reindex left pending (or `--deep` asked for), indexing (acknowledged
//! version-exactly), and last the id-set drift repair, so that what was
//! deleted while the run worked is found too.
//!
//! [`plan`](plan::plan) and [`verify`](verify::verify) are read-only;
//! [`reconcile`], [`reindex()`] and [`verify::repair`] do the work under a
//! lease [`Guard`](crate::lease::Guard) that every write checks first.
//!
//! Where each rule lives, lowest first (a module imports only from those
//! above it in this list; this file only declares and re-exports):
//! - `options`, `error`, `phases`, `test_hook`: what every step reads
//!   (settings, index uids), returns, times, and the tests' pause points;
//! - `ctx`: what one collection's work is handed;
//! - `batch`: what one Meilisearch task carries;
//! - `settings`, `marker`: index settings; the reindex marker;
//! - `plan`: the read-only plan;
//! - `ack`, `rejects`, `orphans`, `rebuild`: version-exact acknowledgement,
//!   poison isolation, the id-set drift repair, recreating an index and
//!   resetting its flags;
//! - `excluded`, `expiry`: removing excluded and expired documents;
//! - `send`: the sender and the acknowledger every feed uses;
//! - `apply`, `exact`, `sync`: the feeds — given documents (follow mode),
//!   the exact comparison, the pipelined indexer;
//! - `head_start`: a small backlog sent while the plan counts;
//! - `summary`: what a run did;
//! - `run`: one reconciliation;
//! - `reindex`, `verify`: the forced reindex and the comparison command,
//!   built on `run`'s steps.

mod ack;
pub(crate) mod apply;
mod batch;
mod ctx;
mod error;
pub(crate) mod exact;
mod excluded;
pub(crate) mod expiry;
mod head_start;
mod marker;
mod options;
mod orphans;
mod packed;
pub(crate) mod phases;
pub mod plan;
mod rebuild;
pub mod reindex;
mod rejects;
mod run;
mod send;
pub mod settings;
mod summary;
mod sync;
mod test_hook;
pub mod verify;

pub(crate) use ctx::Run;
pub use error::ReconcileError;
pub(crate) use options::build_uid;
pub use options::SyncOptions;
pub use plan::{plan, RebuildReason};
pub(crate) use plan::{IndexPlan, Plan};
pub use reindex::{reindex, ReindexOptions};
pub(crate) use rejects::Rejected;
pub use run::reconcile;
pub(crate) use summary::CollectionSummary;
pub use summary::RunSummary;
