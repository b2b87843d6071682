//! Why a reconciliation stopped ([`ReconcileError`]), and how MongoDB's and
//! Meilisearch's errors become it. Below every step of the engine, which all
//! return it.

use crate::lease::LeaseLost;
use crate::meili::MeiliError;
use crate::mongo::MongoError;

/// Why a reconciliation stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReconcileError {
    /// The guard failed: someone else owns the work now, or we are stopping.
    #[error("lease lost: {0}")]
    LeaseLost(#[from] LeaseLost),
    #[error("{0}")]
    MeiliUnreachable(String),
    #[error("{0}")]
    MongoUnreachable(String),
    #[error("{0}")]
    Other(String),
}

impl From<MeiliError> for ReconcileError {
    fn from(e: MeiliError) -> Self {
        match e {
            MeiliError::LeaseLost(lost) => ReconcileError::LeaseLost(lost),
            e @ MeiliError::Unreachable { .. } => ReconcileError::MeiliUnreachable(e.to_string()),
            e => ReconcileError::Other(e.to_string()),
        }
    }
}

impl From<MongoError> for ReconcileError {
    fn from(e: MongoError) -> Self {
        match e {
            MongoError::LeaseLost(lost) => ReconcileError::LeaseLost(lost),
            e @ MongoError::Unreachable(_) => ReconcileError::MongoUnreachable(e.to_string()),
            e => ReconcileError::Other(e.to_string()),
        }
    }
}
