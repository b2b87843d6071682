//! Why a MongoDB operation failed ([`MongoError`]), and the driver's errors
//! told apart and turned into it.

use mongodb::error::ErrorKind;

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

impl MongoError {
    /// `what` failed for `detail`.
    pub(crate) fn new(what: &str, detail: impl Into<String>) -> MongoError {
        MongoError::Failed {
            what: what.into(),
            detail: detail.into(),
        }
    }
}

/// Turns a driver error into ours, `what` naming the operation: unreachable
/// when no server could be selected or the connection failed, failed
/// otherwise.
pub(crate) fn mongo_err(what: &str) -> impl FnOnce(mongodb::error::Error) -> MongoError + '_ {
    move |e| match *e.kind {
        ErrorKind::ServerSelection { .. }
        | ErrorKind::Io(_)
        | ErrorKind::ConnectionPoolCleared { .. } => {
            MongoError::Unreachable(format!("{what}: {}", short(&e)))
        }
        _ => MongoError::new(what, short(&e)),
    }
}

/// A driver error as ours (`what` names the operation that failed).
pub(crate) fn failed(what: &str, error: &mongodb::error::Error) -> MongoError {
    mongo_err(what)(error.clone())
}

/// The error's message without the topology dump server-selection errors carry.
pub(crate) fn short(e: &mongodb::error::Error) -> String {
    let mut text = e.kind.to_string();
    text.truncate(text.find(", Topology:").unwrap_or(text.len()));
    text
}

/// The code of a command error (`None` for any other kind of error).
pub(crate) fn command_code(error: &mongodb::error::Error) -> Option<i32> {
    match &*error.kind {
        ErrorKind::Command(command) => Some(command.code),
        _ => None,
    }
}

/// MongoDB's `MaxTimeMSExpired`: the server stopped the operation for
/// taking longer than it allows.
pub(crate) const MAX_TIME_EXPIRED: i32 = 50;

pub(crate) fn took_too_long(error: &mongodb::error::Error) -> bool {
    command_code(error) == Some(MAX_TIME_EXPIRED)
}

/// MongoDB's error code for a collection (or database) that does not exist.
pub(crate) const NAMESPACE_NOT_FOUND: i32 = 26;
