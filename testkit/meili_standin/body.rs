//! Request bodies: the payload size limit (`413 payload_too_large`, checked on
//! `Content-Length` and while streaming chunked bodies), the JSON content-type
//! check, and JSON decoding with Meilisearch's error codes.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::errors::{ApiError, ErrorBody};
use crate::state::AppState;

fn payload_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorBody::invalid(
            "payload_too_large",
            format!(
                "The provided payload reached the size limit. The maximum accepted payload size is {}.",
                human_size(limit)
            ),
        ),
    )
}

/// Sizes as Meilisearch prints them (`100 MiB`).
fn human_size(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// Reads the whole body, failing with 413 once it exceeds `limit` bytes.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(payload_too_large(limit));
    }
    let mut collected = Vec::with_capacity(declared.unwrap_or(0));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| {
            ApiError::bad(
                "bad_request",
                format!("Could not read the request body: {error}"),
            )
        })?;
        if collected.len() + chunk.len() > limit {
            return Err(payload_too_large(limit));
        }
        collected.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(collected))
}

/// The media type of the request, without parameters, if any.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    Some(
        value
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase(),
    )
}

fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    match media_type(headers).as_deref() {
        Some("application/json") => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorBody::invalid(
                "invalid_content_type",
                format!(
                    "The Content-Type `{}` is invalid. Accepted values for the Content-Type header are: `application/json`",
                    headers
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                ),
            ),
        )),
        None => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorBody::invalid(
                "missing_content_type",
                "A Content-Type header is missing. Accepted values for the Content-Type header are: `application/json`",
            ),
        )),
    }
}

/// Decodes a JSON body: empty is `missing_payload`, a syntax error
/// `malformed_payload`, a wrong shape `bad_request`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad(
            "missing_payload",
            "A json payload is missing.",
        ));
    }
    serde_json::from_slice(bytes).map_err(|error| {
        if error.is_data() {
            ApiError::bad("bad_request", format!("Invalid value: {error}"))
        } else {
            ApiError::bad(
                "malformed_payload",
                format!("The json payload provided is malformed. `{error}`."),
            )
        }
    })
}

/// Extractor: a size-limited JSON body of type `T`.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        require_json(request.headers())?;
        let (parts, body) = request.into_parts();
        let bytes = read_limited(&parts.headers, body, state.config.payload_limit_bytes).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Extractor: a size-limited body of any type, with its media type.
pub struct RawBody {
    pub media_type: Option<String>,
    pub raw_content_type: Option<String>,
    pub bytes: Bytes,
}

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let bytes = read_limited(&parts.headers, body, state.config.payload_limit_bytes).await?;
        Ok(RawBody {
            media_type: media_type(&parts.headers),
            raw_content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            bytes,
        })
    }
}
