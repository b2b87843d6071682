//! meili-reconciler: keeps Meilisearch in step with LibreChat's MongoDB
//! collections, with exactly one replica doing the cluster-wide work.
//!
//! The binary (`src/main.rs`) is a thin CLI over this library. What is
//! `pub` here is what the library's users name, and nothing else: the
//! binary, the benchmark drivers of `testkit/` (which measure the service's
//! own projection, batching and flag writes) and the integration tests
//! (`tests/`, which drive the engine's entry points and check its pieces
//! against the servers). Everything else is crate-private, so the compiler
//! reports what nothing uses; a few `pub` items exist for the tests alone
//! and say so ("For tests:").
//!
//! Module docs name the private items that do the work on purpose: read them
//! with `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

mod between_runs;
mod cause;
pub mod config;
pub mod flag_retry;
pub mod follow;
pub mod job;
pub mod lease;
pub mod librechat;
pub mod meili;
pub mod memory;
mod metrics;
pub mod mongo;
pub mod progress;
pub mod reconcile;
mod report;
mod retry;
pub mod serve;
pub mod servers;
mod setting;
pub mod shutdown;
pub mod telemetry;
pub mod views;
