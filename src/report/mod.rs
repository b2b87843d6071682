//! What the command line prints for an operator to read: the text of the
//! engine's data, one file per command output. The engine's types stay
//! plain data; their `Display` lives here, above them (this module imports
//! `lease`, `reconcile`, `follow` and `views`; none of them imports it). The
//! same text reads in the log where the engine logs a value (a run's
//! summary, a rebuild's reason).
//!
//! - [`status`]: `status` — the lease, the mode, the chat collections;
//! - [`plan`]: `plan` — what a reconciliation would do;
//! - [`summary`]: what a run did (`once`, `reindex`, `verify --repair`, the
//!   log line of every reconciliation);
//! - [`verify`]: `verify` — what the exact comparison found.

mod plan;
mod status;
mod summary;
mod verify;
