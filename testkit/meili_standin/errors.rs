//! Meilisearch-shaped errors: the `{message, code, type, link}` object, both
//! as a synchronous HTTP answer ([`ApiError`]) and as the `error` of a failed
//! task ([`ErrorBody`]). Codes and messages follow Meilisearch's.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// The error object Meilisearch puts in error answers and failed tasks.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ErrorBody {
    pub message: String,
    pub code: String,
    #[serde(rename = "type")]
    pub error_type: String,
    pub link: String,
}

impl ErrorBody {
    /// An error of any type; the link is derived from the code as Meilisearch does.
    pub fn new(code: &str, error_type: &str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: code.to_string(),
            error_type: error_type.to_string(),
            link: format!("https://docs.meilisearch.com/errors#{code}"),
        }
    }

    /// An `invalid_request` error, the type of almost every client mistake.
    pub fn invalid(code: &str, message: impl Into<String>) -> Self {
        Self::new(code, "invalid_request", message)
    }

    pub fn index_not_found(uid: &str) -> Self {
        Self::invalid("index_not_found", format!("Index `{uid}` not found."))
    }
}

/// An error answered synchronously, with its HTTP status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, body: ErrorBody) -> Self {
        Self { status, body }
    }

    /// A 400 `invalid_request` error with the given code.
    pub fn bad(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorBody::invalid(code, message))
    }

    pub fn index_not_found(uid: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorBody::index_not_found(uid))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// Checks an index uid as Meilisearch does (`[A-Za-z0-9_-]`, at most 512 bytes).
pub fn validate_index_uid(uid: &str) -> Result<(), ApiError> {
    let valid = !uid.is_empty()
        && uid.len() <= 512
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(ApiError::bad(
            "invalid_index_uid",
            format!(
                "Invalid value at `.uid`: `{uid}` is not a valid index uid. Index uid can be an \
                 integer or a string containing only alphanumeric characters, hyphens (-) and \
                 underscores (_), and can not be more than 512 bytes."
            ),
        ))
    }
}
