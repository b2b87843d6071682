//! meili-reconciler: keeps Meilisearch in step with LibreChat's MongoDB
//! collections, with exactly one replica doing the cluster-wide work.
//!
//! The binary (`src/main.rs`) is a thin CLI over this library; integration
//! tests drive the same entry points.
//!
//! Module docs name the private items that do the work on purpose: read them
//! with `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub mod between_runs;
pub mod cause;
pub mod config;
pub mod flag_retry;
pub mod follow;
pub mod job;
pub mod lease;
pub mod librechat;
pub mod meili;
pub mod memory;
pub mod metrics;
pub mod mongo;
pub mod progress;
pub mod reconcile;
pub mod report;
pub mod retry;
pub mod serve;
pub mod servers;
pub mod setting;
pub mod shutdown;
pub mod telemetry;
pub mod views;
