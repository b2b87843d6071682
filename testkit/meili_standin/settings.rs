//! Index settings: the full default object Meilisearch 1.x returns, the
//! validation of updates (unknown fields, wrong types), applying an update
//! (null resets to the default; nested objects merge), and the routes
//! `/indexes/{uid}/settings` and `/indexes/{uid}/settings/{name}`.
//!
//! Every accepted update enqueues a `settingsUpdate` task, even one that
//! changes nothing, as the real server does.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::body::JsonBody;
use crate::errors::{validate_index_uid, ApiError};
use crate::state::AppState;
use crate::tasks::{enqueue, Work};

/// Settings an update may name, in Meilisearch's order.
const ACCEPTED_FIELDS: [&str; 22] = [
    "displayedAttributes",
    "searchableAttributes",
    "filterableAttributes",
    "sortableAttributes",
    "foreignKeys",
    "rankingRules",
    "stopWords",
    "nonSeparatorTokens",
    "separatorTokens",
    "dictionary",
    "synonyms",
    "distinctAttribute",
    "proximityPrecision",
    "typoTolerance",
    "faceting",
    "pagination",
    "embedders",
    "searchCutoffMs",
    "localizedAttributes",
    "facetSearch",
    "prefixSearch",
    "chat",
];

/// The default settings object, as `GET /indexes/{uid}/settings` shows it.
fn defaults() -> Map<String, Value> {
    let value = json!({
        "displayedAttributes": ["*"],
        "searchableAttributes": ["*"],
        "filterableAttributes": [],
        "sortableAttributes": [],
        "rankingRules": ["words", "typo", "proximity", "attributeRank", "sort", "wordPosition", "exactness"],
        "stopWords": [],
        "nonSeparatorTokens": [],
        "separatorTokens": [],
        "dictionary": [],
        "synonyms": {},
        "distinctAttribute": null,
        "proximityPrecision": "byWord",
        "typoTolerance": {
            "enabled": true,
            "minWordSizeForTypos": {"oneTypo": 5, "twoTypos": 9},
            "disableOnWords": [],
            "disableOnAttributes": [],
            "disableOnNumbers": false
        },
        "faceting": {"maxValuesPerFacet": 100, "sortFacetValuesBy": {"*": "alpha"}},
        "pagination": {"maxTotalHits": 1000},
        "embedders": {},
        "searchCutoffMs": null,
        "localizedAttributes": null,
        "facetSearch": true,
        "prefixSearch": "indexingTime"
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The JSON kind each setting must have (besides `null`, which resets it).
fn expected_kind(field: &str) -> &'static str {
    match field {
        "synonyms" | "typoTolerance" | "faceting" | "pagination" | "embedders" | "chat" => {
            "an object"
        }
        "distinctAttribute" | "proximityPrecision" | "prefixSearch" => "a string",
        "searchCutoffMs" => "a positive integer",
        "facetSearch" => "a boolean",
        _ => "an array",
    }
}

fn has_kind(value: &Value, kind: &str) -> bool {
    match kind {
        "an object" => value.is_object(),
        "a string" => value.is_string(),
        "a positive integer" => value.is_u64(),
        "a boolean" => value.is_boolean(),
        _ => value.is_array(),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn snake_case(camel: &str) -> String {
    let mut snake = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    snake
}

/// Checks an update as Meilisearch does before enqueuing it.
fn validate(changes: &Map<String, Value>) -> Result<(), ApiError> {
    for (field, value) in changes {
        if !ACCEPTED_FIELDS.contains(&field.as_str()) {
            let expected = ACCEPTED_FIELDS
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ApiError::bad(
                "bad_request",
                format!("Unknown field `{field}`: expected one of {expected}"),
            ));
        }
        let kind = expected_kind(field);
        if !value.is_null() && !has_kind(value, kind) {
            return Err(ApiError::bad(
                &format!("invalid_settings_{}", snake_case(field)),
                format!(
                    "Invalid value type at `.{field}`: expected {kind}, but found {}: `{value}`",
                    json_kind(value)
                ),
            ));
        }
    }
    Ok(())
}

/// Merges `patch` into `target`; `null` members take the default's value.
fn merge_object(target: &mut Map<String, Value>, patch: &Map<String, Value>, default: &Value) {
    for (key, value) in patch {
        let default_member = default.get(key).cloned().unwrap_or(Value::Null);
        match (target.get_mut(key), value) {
            (_, Value::Null) => {
                target.insert(key.clone(), default_member);
            }
            (Some(Value::Object(current)), Value::Object(nested)) => {
                merge_object(current, nested, &default_member)
            }
            _ => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

/// One index's settings.
pub struct Settings {
    values: Map<String, Value>,
}

impl Default for Settings {
    fn default() -> Self {
        Self { values: defaults() }
    }
}

impl Settings {
    /// The settings object of `GET /indexes/{uid}/settings`.
    pub fn view(&self) -> Value {
        let shown: Map<String, Value> = defaults()
            .keys()
            .filter_map(|key| Some((key.clone(), self.values.get(key)?.clone())))
            .collect();
        Value::Object(shown)
    }

    pub fn get(&self, field: &str) -> Value {
        self.values.get(field).cloned().unwrap_or(Value::Null)
    }

    /// Applies a validated update.
    pub fn apply(&mut self, changes: &Map<String, Value>) {
        let defaults = defaults();
        for (field, value) in changes {
            let default = defaults.get(field).cloned().unwrap_or(Value::Null);
            match (self.values.get_mut(field), value) {
                (_, Value::Null) => {
                    self.values.insert(field.clone(), default);
                }
                (Some(Value::Object(current)), Value::Object(patch))
                    if matches!(field.as_str(), "typoTolerance" | "faceting" | "pagination") =>
                {
                    merge_object(current, patch, &default)
                }
                _ => {
                    self.values.insert(field.clone(), value.clone());
                }
            }
        }
    }

    /// Strings of a list setting (ignores non-string members).
    fn strings(&self, field: &str) -> Vec<String> {
        self.values
            .get(field)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Attribute patterns of `filterableAttributes` (strings or `{attributePatterns}` objects).
    pub fn filterable_patterns(&self) -> Vec<String> {
        let Some(items) = self
            .values
            .get("filterableAttributes")
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        let mut patterns = Vec::new();
        for item in items {
            match item {
                Value::String(pattern) => patterns.push(pattern.clone()),
                Value::Object(rule) => patterns.extend(
                    rule.get("attributePatterns")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.as_str().map(str::to_string)),
                ),
                _ => {}
            }
        }
        patterns
    }

    pub fn sortable(&self) -> Vec<String> {
        self.strings("sortableAttributes")
    }

    pub fn searchable(&self) -> Vec<String> {
        self.strings("searchableAttributes")
    }

    pub fn displayed(&self) -> Vec<String> {
        self.strings("displayedAttributes")
    }

    /// `pagination.maxTotalHits`.
    pub fn max_total_hits(&self) -> usize {
        self.values
            .get("pagination")
            .and_then(|p| p.get("maxTotalHits"))
            .and_then(Value::as_u64)
            .unwrap_or(1000) as usize
    }
}

/// The setting a `/settings/{name}` route names (`filterable-attributes` → `filterableAttributes`).
fn field_of_route(name: &str) -> Option<&'static str> {
    let mut camel = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            camel.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            camel.push(c);
        }
    }
    ACCEPTED_FIELDS
        .iter()
        .copied()
        .find(|field| *field == camel)
}

fn unknown_route() -> Response {
    StatusCode::NOT_FOUND.into_response()
}

/// `GET /indexes/{uid}/settings`.
pub async fn get_all(
    State(state): State<AppState>,
    Path(uid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = state.store();
    let index = store
        .indexes
        .get(&uid)
        .ok_or_else(|| ApiError::index_not_found(&uid))?;
    Ok(Json(index.settings.view()))
}

fn enqueue_update(
    state: &AppState,
    uid: &str,
    changes: Map<String, Value>,
) -> Result<Response, ApiError> {
    validate_index_uid(uid)?;
    validate(&changes)?;
    let details = changes.clone();
    Ok(enqueue(
        state,
        Some(uid),
        Work::UpdateSettings { changes },
        details,
    ))
}

/// `PATCH /indexes/{uid}/settings` (creates the index if missing).
pub async fn patch_all(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    JsonBody(changes): JsonBody<Map<String, Value>>,
) -> Result<Response, ApiError> {
    enqueue_update(&state, &uid, changes)
}

/// `DELETE /indexes/{uid}/settings`: every setting back to its default.
pub async fn reset_all(
    State(state): State<AppState>,
    Path(uid): Path<String>,
) -> Result<Response, ApiError> {
    let changes = defaults()
        .keys()
        .map(|key| (key.clone(), Value::Null))
        .collect();
    enqueue_update(&state, &uid, changes)
}

/// `GET /indexes/{uid}/settings/{name}`.
pub async fn get_one(
    State(state): State<AppState>,
    Path((uid, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let Some(field) = field_of_route(&name) else {
        return Ok(unknown_route());
    };
    let store = state.store();
    let index = store
        .indexes
        .get(&uid)
        .ok_or_else(|| ApiError::index_not_found(&uid))?;
    Ok(Json(index.settings.get(field)).into_response())
}

/// `PUT` or `PATCH /indexes/{uid}/settings/{name}`.
pub async fn update_one(
    State(state): State<AppState>,
    Path((uid, name)): Path<(String, String)>,
    JsonBody(value): JsonBody<Value>,
) -> Result<Response, ApiError> {
    let Some(field) = field_of_route(&name) else {
        return Ok(unknown_route());
    };
    enqueue_update(&state, &uid, Map::from_iter([(field.to_string(), value)]))
}

/// `DELETE /indexes/{uid}/settings/{name}`.
pub async fn reset_one(
    State(state): State<AppState>,
    Path((uid, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let Some(field) = field_of_route(&name) else {
        return Ok(unknown_route());
    };
    enqueue_update(
        &state,
        &uid,
        Map::from_iter([(field.to_string(), Value::Null)]),
    )
}
