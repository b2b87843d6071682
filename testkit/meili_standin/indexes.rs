//! The index routes (`/indexes`, `/indexes/{uid}`, `/indexes/{uid}/stats`,
//! `/stats`, `/swap-indexes`) and the processing of index tasks: creation
//! (`index_already_exists`), primary-key change (refused once the index holds
//! documents: `index_primary_key_already_exists`), deletion and swaps (which,
//! as in Meilisearch, also swap the index uids in the task history).

use std::collections::{BTreeMap, HashMap, HashSet};

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::body::JsonBody;
use crate::clock;
use crate::errors::{validate_index_uid, ApiError, ErrorBody};
use crate::index::Index;
use crate::state::{AppState, Store};
use crate::tasks::{details, enqueue, Swap, Work};

fn reject_unknown_fields(body: &Map<String, Value>, accepted: &[&str]) -> Result<(), ApiError> {
    match body.keys().find(|key| !accepted.contains(&key.as_str())) {
        None => Ok(()),
        Some(unknown) => {
            let expected = accepted
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ");
            Err(ApiError::bad(
                "bad_request",
                format!("Unknown field `{unknown}`: expected one of {expected}"),
            ))
        }
    }
}

fn primary_key_field(body: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match body.get("primaryKey") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(key)) => Ok(Some(key.clone())),
        Some(other) => Err(ApiError::bad(
            "invalid_index_primary_key",
            format!("Invalid value type at `.primaryKey`: expected a string, but found `{other}`"),
        )),
    }
}

/// `POST /indexes`.
pub async fn create_index(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Response, ApiError> {
    reject_unknown_fields(&body, &["uid", "primaryKey"])?;
    let uid = match body.get("uid") {
        None => return Err(ApiError::bad("missing_index_uid", "Missing field `uid`")),
        Some(Value::String(uid)) => uid.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => return Err(validate_index_uid(&other.to_string()).unwrap_err()),
    };
    validate_index_uid(&uid)?;
    let primary_key = primary_key_field(&body)?;
    let details = details([("primaryKey", json!(primary_key))]);
    Ok(enqueue(
        &state,
        Some(&uid),
        Work::CreateIndex { primary_key },
        details,
    ))
}

/// `GET /indexes`.
pub async fn list_indexes(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let parse = |name: &str, default: usize| -> Result<usize, ApiError> {
        query.get(name).map_or(Ok(default), |raw| {
            raw.parse().map_err(|_| {
                ApiError::bad(
                    &format!("invalid_index_{name}"),
                    format!("Invalid value in parameter `{name}`: could not parse `{raw}` as a positive integer"),
                )
            })
        })
    };
    let offset = parse("offset", 0)?;
    let limit = parse("limit", 20)?;
    let store = state.store();
    let results: Vec<Value> = store
        .indexes
        .values()
        .skip(offset)
        .take(limit)
        .map(Index::view)
        .collect();
    Ok(Json(json!({
        "results": results,
        "offset": offset,
        "limit": limit,
        "total": store.indexes.len(),
    })))
}

/// `GET /indexes/{uid}`.
pub async fn get_index(
    State(state): State<AppState>,
    Path(uid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = state.store();
    let index = store
        .indexes
        .get(&uid)
        .ok_or_else(|| ApiError::index_not_found(&uid))?;
    Ok(Json(index.view()))
}

/// `PATCH /indexes/{uid}`.
pub async fn update_index(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Response, ApiError> {
    validate_index_uid(&uid)?;
    reject_unknown_fields(&body, &["primaryKey"])?;
    let primary_key = primary_key_field(&body)?;
    let details = details([("primaryKey", json!(primary_key))]);
    Ok(enqueue(
        &state,
        Some(&uid),
        Work::UpdateIndex { primary_key },
        details,
    ))
}

/// `DELETE /indexes/{uid}`.
pub async fn delete_index(
    State(state): State<AppState>,
    Path(uid): Path<String>,
) -> Result<Response, ApiError> {
    validate_index_uid(&uid)?;
    let details = details([("deletedDocuments", Value::Null)]);
    Ok(enqueue(&state, Some(&uid), Work::DeleteIndex, details))
}

/// `GET /indexes/{uid}/stats`.
pub async fn index_stats(
    State(state): State<AppState>,
    Path(uid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = state.store();
    let index = store
        .indexes
        .get(&uid)
        .ok_or_else(|| ApiError::index_not_found(&uid))?;
    Ok(Json(index.stats(store.is_indexing(&uid))))
}

/// `GET /stats`.
pub async fn global_stats(State(state): State<AppState>) -> Json<Value> {
    let store = state.store();
    let indexes: BTreeMap<&str, Value> = store
        .indexes
        .values()
        .map(|index| {
            (
                index.uid.as_str(),
                index.stats(store.is_indexing(&index.uid)),
            )
        })
        .collect();
    let size: u64 = indexes
        .values()
        .filter_map(|stats| stats["rawDocumentDbSize"].as_u64())
        .sum();
    Json(json!({
        "databaseSize": size,
        "usedDatabaseSize": size,
        "lastUpdate": store.last_update.map(clock::rfc3339),
        "indexes": indexes,
    }))
}

/// One pair of a swap request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwapRequest {
    indexes: Vec<String>,
    #[serde(default)]
    rename: bool,
}

/// `POST /swap-indexes`.
pub async fn swap_indexes(
    State(state): State<AppState>,
    JsonBody(requests): JsonBody<Vec<SwapRequest>>,
) -> Result<Response, ApiError> {
    let mut seen = HashSet::new();
    let mut swaps = Vec::new();
    for (position, request) in requests.into_iter().enumerate() {
        let [first, second] = <[String; 2]>::try_from(request.indexes).map_err(|indexes| {
            ApiError::bad(
                "invalid_swap_indexes",
                format!(
                    "Invalid value at `[{position}].indexes`: two indexes must be given, found {}.",
                    indexes.len()
                ),
            )
        })?;
        for uid in [&first, &second] {
            validate_index_uid(uid)?;
            if !seen.insert(uid.clone()) {
                return Err(ApiError::bad(
                    "invalid_swap_duplicate_index_found",
                    format!("Indexes must be declared only once during a swap. `{uid}` was specified several times."),
                ));
            }
        }
        swaps.push(Swap {
            first,
            second,
            rename: request.rename,
        });
    }
    let shown: Vec<Value> = swaps
        .iter()
        .map(|s| json!({ "indexes": [s.first, s.second], "rename": s.rename }))
        .collect();
    let details = details([("swaps", json!(shown))]);
    Ok(enqueue(&state, None, Work::SwapIndexes { swaps }, details))
}

/// Processes an index creation.
pub fn apply_create(
    store: &mut Store,
    uid: &str,
    primary_key: Option<String>,
) -> Result<(), ErrorBody> {
    if store.indexes.contains_key(uid) {
        return Err(ErrorBody::invalid(
            "index_already_exists",
            format!("Index `{uid}` already exists."),
        ));
    }
    store
        .indexes
        .insert(uid.to_string(), Index::new(uid, primary_key));
    Ok(())
}

/// Processes a primary-key change.
pub fn apply_update(
    store: &mut Store,
    uid: &str,
    primary_key: Option<String>,
) -> Result<(), ErrorBody> {
    let index = store
        .indexes
        .get_mut(uid)
        .ok_or_else(|| ErrorBody::index_not_found(uid))?;
    if let Some(new_key) = primary_key {
        match &index.primary_key {
            Some(existing) if *existing != new_key && !index.documents.is_empty() => {
                return Err(ErrorBody::invalid(
                    "index_primary_key_already_exists",
                    format!("Index `{uid}`: Index already has a primary key: `{existing}`."),
                ))
            }
            _ => index.primary_key = Some(new_key),
        }
    }
    index.touch();
    Ok(())
}

/// Processes an index deletion; how many documents it held.
pub fn apply_delete(store: &mut Store, uid: &str) -> Result<usize, ErrorBody> {
    let index = store
        .indexes
        .remove(uid)
        .ok_or_else(|| ErrorBody::index_not_found(uid))?;
    Ok(index.documents.len())
}

/// Processes swaps: all indexes must exist (a rename's target must not).
pub fn apply_swaps(store: &mut Store, swaps: &[Swap]) -> Result<(), ErrorBody> {
    for swap in swaps {
        if !store.indexes.contains_key(&swap.first) {
            return Err(ErrorBody::index_not_found(&swap.first));
        }
        let second_exists = store.indexes.contains_key(&swap.second);
        if swap.rename && second_exists {
            return Err(ErrorBody::invalid(
                "index_already_exists",
                format!("Index `{}` already exists.", swap.second),
            ));
        }
        if !swap.rename && !second_exists {
            return Err(ErrorBody::index_not_found(&swap.second));
        }
    }
    let mut renamed: HashMap<String, String> = HashMap::new();
    for swap in swaps {
        let mut first = store.indexes.remove(&swap.first).expect("checked above");
        first.uid = swap.second.clone();
        if let Some(mut second) = store.indexes.remove(&swap.second) {
            second.uid = swap.first.clone();
            store.indexes.insert(swap.first.clone(), second);
        }
        store.indexes.insert(swap.second.clone(), first);
        renamed.insert(swap.first.clone(), swap.second.clone());
        if !swap.rename {
            renamed.insert(swap.second.clone(), swap.first.clone());
        }
    }
    // Finished tasks now name the index by its new uid; later ones keep the uid they were sent to.
    let finished = store
        .tasks
        .iter_mut()
        .filter(|task| task.status.is_finished());
    for task in finished {
        if let Some(new_uid) = task.index_uid.as_ref().and_then(|uid| renamed.get(uid)) {
            task.index_uid = Some(new_uid.clone());
        }
    }
    Ok(())
}
