//! The `/indexes/{uid}/documents` routes: additions (`POST` replaces, `PUT`
//! merges) and deletions enqueue tasks; browsing (`GET`, `POST .../fetch`)
//! and single-document reads answer synchronously, with `fields`, `limit`,
//! `offset`, `ids` and `filter` (which must use filterable attributes).
//! Also the processing of deletion tasks.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::body::{JsonBody, RawBody};
use crate::errors::{validate_index_uid, ApiError, ErrorBody};
use crate::filter::{self, Filter};
use crate::index::{Document, Index};
use crate::ingest;
use crate::state::{AppState, Store};
use crate::tasks::{details, enqueue, Work};

/// Keeps only `fields` of `doc` (all of them for `None` or `*`).
pub fn project(doc: &Document, fields: Option<&[String]>) -> Document {
    match fields {
        Some(fields) if !fields.iter().any(|f| f == "*") => doc
            .iter()
            .filter(|(key, _)| fields.iter().any(|f| f == *key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        _ => doc.clone(),
    }
}

fn add(
    state: AppState,
    uid: String,
    query: HashMap<String, String>,
    body: RawBody,
    merge: bool,
) -> Result<Response, ApiError> {
    validate_index_uid(&uid)?;
    let documents = ingest::parse_payload(&body)?;
    let received = documents.len();
    let work = Work::AddDocuments {
        documents,
        primary_key: query.get("primaryKey").cloned(),
        merge,
    };
    let details = details([
        ("receivedDocuments", json!(received)),
        ("indexedDocuments", Value::Null),
    ]);
    Ok(enqueue(&state, Some(&uid), work, details))
}

/// `POST /indexes/{uid}/documents`: add or replace.
pub async fn add_or_replace(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: RawBody,
) -> Result<Response, ApiError> {
    add(state, uid, query, body, false)
}

/// `PUT /indexes/{uid}/documents`: add or update (merge fields).
pub async fn add_or_update(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: RawBody,
) -> Result<Response, ApiError> {
    add(state, uid, query, body, true)
}

/// What a browse asks for.
#[derive(Default, Deserialize)]
pub struct Browse {
    offset: Option<usize>,
    limit: Option<usize>,
    fields: Option<Vec<String>>,
    filter: Option<Value>,
    ids: Option<Vec<Value>>,
}

fn parse_document_filter(filter: &Value) -> Result<Option<Filter>, ApiError> {
    filter::parse(filter).map_err(|message| ApiError::bad("invalid_document_filter", message))
}

fn browse(index: &Index, request: Browse) -> Result<Value, ApiError> {
    let filter = match &request.filter {
        Some(filter) => parse_document_filter(filter)?,
        None => None,
    };
    if let Some(filter) = &filter {
        filter
            .check_filterable(&index.settings.filterable_patterns())
            .map_err(|message| ApiError::bad("invalid_document_filter", message))?;
    }
    let offset = request.offset.unwrap_or(0);
    let limit = request.limit.unwrap_or(20);
    let fields = request.fields.as_deref();
    let selected: Vec<&Document> = match &request.ids {
        Some(ids) => ids
            .iter()
            .filter_map(ingest::document_id)
            .filter_map(|id| index.documents.get(&id))
            .filter(|doc| filter.as_ref().is_none_or(|f| f.matches(doc)))
            .collect(),
        None => index
            .documents
            .iter()
            .filter(|doc| filter.as_ref().is_none_or(|f| f.matches(doc)))
            .collect(),
    };
    let results: Vec<Document> = selected
        .iter()
        .skip(offset)
        .take(limit)
        .map(|doc| project(doc, fields))
        .collect();
    Ok(json!({
        "results": results,
        "offset": offset,
        "limit": limit,
        "total": selected.len(),
    }))
}

fn number(query: &HashMap<String, String>, name: &str) -> Result<Option<usize>, ApiError> {
    query
        .get(name)
        .map(|raw| {
            raw.parse().map_err(|_| {
                ApiError::bad(
                    &format!("invalid_document_{name}"),
                    format!("Invalid value in parameter `{name}`: could not parse `{raw}` as a positive integer"),
                )
            })
        })
        .transpose()
}

fn comma_list(query: &HashMap<String, String>, name: &str) -> Option<Vec<String>> {
    query
        .get(name)
        .map(|raw| raw.split(',').map(|f| f.trim().to_string()).collect())
}

/// `GET /indexes/{uid}/documents`.
pub async fn get_documents(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let request = Browse {
        offset: number(&query, "offset")?,
        limit: number(&query, "limit")?,
        fields: comma_list(&query, "fields"),
        filter: query.get("filter").map(|f| Value::String(f.clone())),
        ids: comma_list(&query, "ids").map(|ids| ids.into_iter().map(Value::String).collect()),
    };
    let store = state.store();
    let index = store
        .indexes
        .get(&uid)
        .ok_or_else(|| ApiError::index_not_found(&uid))?;
    browse(index, request).map(Json)
}

/// `POST /indexes/{uid}/documents/fetch`.
pub async fn fetch_documents(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    JsonBody(request): JsonBody<Browse>,
) -> Result<Json<Value>, ApiError> {
    let store = state.store();
    let index = store
        .indexes
        .get(&uid)
        .ok_or_else(|| ApiError::index_not_found(&uid))?;
    browse(index, request).map(Json)
}

/// `GET /indexes/{uid}/documents/{id}`.
pub async fn get_document(
    State(state): State<AppState>,
    Path((uid, id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Document>, ApiError> {
    let store = state.store();
    let index = store
        .indexes
        .get(&uid)
        .ok_or_else(|| ApiError::index_not_found(&uid))?;
    let doc = index.documents.get(&id).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorBody::invalid("document_not_found", format!("Document `{id}` not found.")),
        )
    })?;
    Ok(Json(project(doc, comma_list(&query, "fields").as_deref())))
}

fn enqueue_id_deletion(
    state: &AppState,
    uid: &str,
    ids: Vec<String>,
) -> Result<Response, ApiError> {
    validate_index_uid(uid)?;
    let details = details([
        ("providedIds", json!(ids.len())),
        ("deletedDocuments", Value::Null),
        ("originalFilter", Value::Null),
    ]);
    Ok(enqueue(
        state,
        Some(uid),
        Work::DeleteDocuments { ids },
        details,
    ))
}

/// `DELETE /indexes/{uid}/documents/{id}`.
pub async fn delete_document(
    State(state): State<AppState>,
    Path((uid, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    enqueue_id_deletion(&state, &uid, vec![id])
}

/// `POST /indexes/{uid}/documents/delete-batch`.
pub async fn delete_batch(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    JsonBody(ids): JsonBody<Vec<Value>>,
) -> Result<Response, ApiError> {
    let ids = ids
        .iter()
        .map(|id| match id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    enqueue_id_deletion(&state, &uid, ids)
}

/// `POST /indexes/{uid}/documents/delete`: by filter (syntax checked now,
/// filterability when processed, as Meilisearch does).
pub async fn delete_by_filter(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Response, ApiError> {
    validate_index_uid(&uid)?;
    let Some(filter) = body.get("filter").filter(|f| !f.is_null()).cloned() else {
        return Err(ApiError::bad(
            "missing_document_filter",
            "Missing field `filter`",
        ));
    };
    parse_document_filter(&filter)?;
    let details = details([
        ("providedIds", json!(0)),
        ("deletedDocuments", Value::Null),
        ("originalFilter", json!(filter.to_string())),
    ]);
    Ok(enqueue(
        &state,
        Some(&uid),
        Work::DeleteByFilter { filter },
        details,
    ))
}

/// `DELETE /indexes/{uid}/documents`: all of them.
pub async fn clear_documents(
    State(state): State<AppState>,
    Path(uid): Path<String>,
) -> Result<Response, ApiError> {
    validate_index_uid(&uid)?;
    let details = details([("deletedDocuments", Value::Null)]);
    Ok(enqueue(&state, Some(&uid), Work::ClearDocuments, details))
}

fn existing_index<'a>(store: &'a mut Store, uid: &str) -> Result<&'a mut Index, ErrorBody> {
    store
        .indexes
        .get_mut(uid)
        .ok_or_else(|| ErrorBody::index_not_found(uid))
}

/// Processes a deletion by ids; how many documents were deleted.
pub fn apply_delete_ids(store: &mut Store, uid: &str, ids: &[String]) -> Result<usize, ErrorBody> {
    let index = existing_index(store, uid)?;
    let deleted = ids.iter().filter(|id| index.documents.remove(id)).count();
    index.touch();
    Ok(deleted)
}

/// Processes a deletion by filter; how many documents were deleted.
pub fn apply_delete_by_filter(
    store: &mut Store,
    uid: &str,
    filter: &Value,
) -> Result<usize, ErrorBody> {
    let index = existing_index(store, uid)?;
    let invalid = |message: String| {
        ErrorBody::invalid(
            "invalid_document_filter",
            format!("Index `{uid}`: {message}"),
        )
    };
    let Some(filter) = filter::parse(filter).map_err(invalid)? else {
        return Ok(0);
    };
    filter
        .check_filterable(&index.settings.filterable_patterns())
        .map_err(invalid)?;
    let deleted = index.documents.remove_where(|doc| filter.matches(doc));
    index.touch();
    Ok(deleted)
}

/// Processes a deletion of every document; how many there were.
pub fn apply_clear(store: &mut Store, uid: &str) -> Result<usize, ErrorBody> {
    let index = existing_index(store, uid)?;
    let deleted = index.documents.clear();
    index.touch();
    Ok(deleted)
}
