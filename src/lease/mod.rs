//! The single-flight lease over `distributedJobs` (DESIGN.md §4).

pub mod guard;

pub use guard::{Guard, LeaseLost};
