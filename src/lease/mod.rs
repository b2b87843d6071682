//! The single-flight lease over `distributedJobs` (docs/design.md §5): many
//! replicas call [`run_single_flight`]; exactly one runs the job at a time,
//! the others wait for its completion or take over when it dies.
//!
//! The document is shared with LibreChat's own `runDistributedJob`, which
//! claims the same `_id` (docs/design.md §5.10), and every lease write is
//! confirmed by a majority, with unknown outcomes settled by a re-read
//! (§5.11).
//!
//! Where each rule lives:
//! - `clock`: every protocol time is the primary's (`hello.localTime`);
//! - `store`: every read and write of the job document (claim, renew,
//!   complete, fail, release), the fence they share, their concerns, and who
//!   wrote last (us or LibreChat);
//! - `follower`: polling, freshness, `retryAt`, takeover, wait timeout;
//! - `renewer`: the renewal timer and self-fencing;
//! - `runner`: the owner's life cycle and how a run is recorded;
//! - `guard`: what the job checks before each side effect, and the owner
//!   job's own writes to the document made under it (keep the lease after
//!   completing; fields whose names and meaning are the job's alone);
//! - `job`, `outcome`: the job's interface and how a run ends, in the job's
//!   own types (exit codes are numbered above the lease, in `crate::job`);
//! - `status`: the operator's view.

pub mod clock;
mod follower;
mod guard;
mod job;
mod options;
mod outcome;
mod renewer;
mod runner;
mod status;
pub mod store;

pub(crate) use guard::{unless_lost, LeaseHandle, LeaseWriteError};
pub use guard::{Guard, LeaseLost};
pub use job::{JobEnd, LeasedJob};
pub use options::{LeaseOptions, LeaseWriteConcern};
pub use outcome::{LeaseError, Outcome};
pub use runner::run_single_flight;
pub use status::{read_status, LeaseState};
pub(crate) use status::{JobFields, LeaseStatus};
