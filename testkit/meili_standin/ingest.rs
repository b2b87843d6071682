//! Document additions: decoding the payload at request time (JSON array or
//! object, NDJSON line by line; `malformed_payload` and content-type errors
//! are synchronous, as in Meilisearch) and applying it at processing time:
//! implicit index creation, primary-key choice and inference, id validation
//! that fails the whole payload, then add-or-replace / add-or-update.

use axum::http::StatusCode;
use serde_json::Value;

use crate::body::RawBody;
use crate::errors::{ApiError, ErrorBody};
use crate::index::{Document, Index};
use crate::state::Store;

const ACCEPTED_TYPES: &str = "`application/json`, `application/x-ndjson`, `text/csv`";

fn malformed(format: &str, error: impl std::fmt::Display) -> ApiError {
    ApiError::bad(
        "malformed_payload",
        format!("The `{format}` payload provided is malformed. `Couldn't serialize document value: {error}`."),
    )
}

fn parse_json(bytes: &[u8]) -> Result<Vec<Document>, ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'{') => serde_json::from_slice::<Document>(bytes)
            .map(|doc| vec![doc])
            .map_err(|e| malformed("json", e)),
        _ => serde_json::from_slice::<Vec<Document>>(bytes).map_err(|e| malformed("json", e)),
    }
}

fn parse_ndjson(bytes: &[u8]) -> Result<Vec<Document>, ApiError> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .map(|line| serde_json::from_slice::<Document>(line).map_err(|e| malformed("ndjson", e)))
        .collect()
}

/// Decodes the documents of an addition request.
pub fn parse_payload(body: &RawBody) -> Result<Vec<Document>, ApiError> {
    let format = match body.media_type.as_deref() {
        Some("application/json") => "json",
        Some("application/x-ndjson") => "ndjson",
        Some("text/csv") => {
            return Err(ApiError::bad(
                "invalid_content_type",
                "The Meilisearch stand-in does not support `text/csv` payloads.",
            ))
        }
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorBody::invalid(
                    "invalid_content_type",
                    format!(
                        "The Content-Type `{}` is invalid. Accepted values for the Content-Type header are: {ACCEPTED_TYPES}",
                        body.raw_content_type.as_deref().unwrap_or_default()
                    ),
                ),
            ))
        }
        None => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorBody::invalid(
                    "missing_content_type",
                    format!("A Content-Type header is missing. Accepted values for the Content-Type header are: {ACCEPTED_TYPES}"),
                ),
            ))
        }
    };
    if body.bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad(
            "missing_payload",
            format!("A {format} payload is missing."),
        ));
    }
    if format == "json" {
        parse_json(&body.bytes)
    } else {
        parse_ndjson(&body.bytes)
    }
}

/// The external id of a document id value, if it is a valid one.
pub fn document_id(value: &Value) -> Option<String> {
    match value {
        Value::String(id) => {
            let valid = !id.is_empty()
                && id.len() <= 511
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            valid.then(|| id.clone())
        }
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

fn invalid_id(value: &Value) -> ErrorBody {
    ErrorBody::invalid(
        "invalid_document_id",
        format!(
            "Document identifier `{value}` is invalid. A document identifier can be of type integer \
             or string, only composed of alphanumeric characters (a-z A-Z 0-9), hyphens (-) and \
             underscores (_), and can not be more than 511 bytes."
        ),
    )
}

/// Meilisearch's primary-key inference: the one field whose name ends with `id`.
fn infer_primary_key(first: &Document) -> Result<String, ErrorBody> {
    let candidates: Vec<&String> = first
        .keys()
        .filter(|key| key.to_lowercase().ends_with("id"))
        .collect();
    match candidates.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(ErrorBody::invalid(
            "index_primary_key_no_candidate_found",
            "The primary key inference failed as the engine did not find any field ending with `id` \
             in its name. Please specify the primary key manually using the `primaryKey` query parameter.",
        )),
        [init @ .., last] => {
            let listed = init
                .iter()
                .map(|c| format!("'{c}'"))
                .collect::<Vec<_>>()
                .join(", ");
            Err(ErrorBody::invalid(
                "index_primary_key_multiple_candidates_found",
                format!(
                    "The primary key inference failed as the engine found {} fields ending with `id` \
                     in their names: {listed} and '{last}'. Please specify the primary key manually \
                     using the `primaryKey` query parameter.",
                    candidates.len()
                ),
            ))
        }
    }
}

/// The primary key an addition uses.
fn resolve_primary_key(
    index: &Index,
    requested: Option<String>,
    first: &Document,
) -> Result<String, ErrorBody> {
    match (&index.primary_key, requested) {
        (Some(existing), Some(requested)) if *existing != requested => Err(ErrorBody::invalid(
            "index_primary_key_already_exists",
            format!("Index already has a primary key: `{existing}`."),
        )),
        (Some(existing), _) => Ok(existing.clone()),
        (None, Some(requested)) => Ok(requested),
        (None, None) => infer_primary_key(first),
    }
}

/// Applies an addition; the number of documents indexed. Creates the index
/// when missing, even if the addition then fails (as Meilisearch does).
pub fn apply_addition(
    store: &mut Store,
    uid: &str,
    documents: Vec<Document>,
    requested_primary_key: Option<String>,
    merge: bool,
) -> Result<usize, ErrorBody> {
    let index = store
        .indexes
        .entry(uid.to_string())
        .or_insert_with(|| Index::new(uid, None));
    let Some(first) = documents.first() else {
        return Ok(0);
    };
    let primary_key = resolve_primary_key(index, requested_primary_key, first)?;
    let mut identified = Vec::with_capacity(documents.len());
    for doc in documents {
        let Some(value) = doc.get(&primary_key) else {
            let shown = serde_json::to_string(&doc).unwrap_or_default();
            return Err(ErrorBody::invalid(
                "missing_document_id",
                format!("Document doesn't have a `{primary_key}` attribute: `{shown}`."),
            ));
        };
        let id = document_id(value).ok_or_else(|| invalid_id(value))?;
        identified.push((id, doc));
    }
    let count = identified.len();
    index.primary_key = Some(primary_key);
    for (id, doc) in identified {
        if merge {
            index.documents.merge(id, doc);
        } else {
            index.documents.replace(id, doc);
        }
    }
    index.touch();
    Ok(count)
}
