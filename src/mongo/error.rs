//! Why a MongoDB operation failed ([`MongoError`]): below `mongo` and
//! `flag_retry`, which both return it (`mongo` sends its flag writes through
//! `flag_retry`, so the type cannot live in either).

use crate::lease::LeaseLost;

/// Why a MongoDB operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MongoError {
    #[error("MongoDB is unreachable: {0}")]
    Unreachable(String),
    #[error("MongoDB {what} failed: {detail}")]
    Failed { what: String, detail: String },
    #[error(transparent)]
    LeaseLost(#[from] LeaseLost),
}
