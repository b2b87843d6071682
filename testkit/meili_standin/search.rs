//! `POST`/`GET /indexes/{uid}/search`: a deliberately simple engine. Query
//! words match case-insensitively against the words of searchable string
//! fields (the last word also as a prefix); with Meilisearch's default
//! `matchingStrategy: "last"` documents matching fewer trailing words rank
//! lower, with `"all"` every word must match. Supports `filter`
//! (filterable attributes only: `invalid_search_filter`), `sort` (sortable
//! attributes only), `attributesToRetrieve`, `offset`/`limit` with
//! `estimatedTotalHits`, and `page`/`hitsPerPage` with `totalHits`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::body::JsonBody;
use crate::documents::project;
use crate::errors::ApiError;
use crate::filter;
use crate::index::{Document, Index};
use crate::state::AppState;

/// The search parameters understood (others are accepted and ignored).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchRequest {
    q: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
    page: Option<usize>,
    hits_per_page: Option<usize>,
    filter: Option<Value>,
    sort: Option<Vec<String>>,
    attributes_to_retrieve: Option<Vec<String>>,
    matching_strategy: Option<String>,
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// Words of the searchable fields of `doc`.
fn document_words(doc: &Document, searchable: &[String]) -> Vec<String> {
    fn collect(value: &Value, into: &mut Vec<String>) {
        match value {
            Value::String(s) => into.extend(words(s)),
            Value::Number(n) => into.push(n.to_string()),
            Value::Array(items) => items.iter().for_each(|v| collect(v, into)),
            Value::Object(map) => map.values().for_each(|v| collect(v, into)),
            _ => {}
        }
    }
    let all = searchable.iter().any(|s| s == "*");
    let mut found = Vec::new();
    for (key, value) in doc {
        if all || searchable.iter().any(|s| s == key) {
            collect(value, &mut found);
        }
    }
    found
}

/// How many leading query words `doc` matches.
fn leading_matches(query: &[String], doc_words: &[String]) -> usize {
    query
        .iter()
        .enumerate()
        .take_while(|(position, word)| {
            let is_last = *position + 1 == query.len();
            doc_words
                .iter()
                .any(|w| w == *word || (is_last && w.starts_with(word.as_str())))
        })
        .count()
}

fn compare_values(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(Ordering::Equal),
        (Some(Value::String(x)), Some(Value::String(y))) => x.to_lowercase().cmp(&y.to_lowercase()),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

fn search_error(code: &str, message: String) -> ApiError {
    ApiError::bad(code, message)
}

fn run(index: &Index, request: SearchRequest) -> Result<Value, ApiError> {
    let started = Instant::now();
    let settings = &index.settings;
    let filter = match &request.filter {
        Some(f) => filter::parse(f).map_err(|m| search_error("invalid_search_filter", m))?,
        None => None,
    };
    if let Some(filter) = &filter {
        filter
            .check_filterable(&settings.filterable_patterns())
            .map_err(|m| {
                search_error(
                    "invalid_search_filter",
                    format!("Index `{}`: {m}", index.uid),
                )
            })?;
    }
    let mut sort_keys = Vec::new();
    for rule in request.sort.iter().flatten() {
        let (attribute, direction) = rule.rsplit_once(':').unwrap_or((rule.as_str(), "asc"));
        if !settings.sortable().iter().any(|s| s == attribute) {
            return Err(search_error(
                "invalid_search_sort",
                format!(
                    "Index `{}`: Attribute `{attribute}` is not sortable.",
                    index.uid
                ),
            ));
        }
        sort_keys.push((attribute.to_string(), direction == "desc"));
    }

    let query_text = request.q.clone().unwrap_or_default();
    let query: Vec<String> = words(&query_text).collect();
    let require_all = request.matching_strategy.as_deref() == Some("all");
    let searchable = settings.searchable();
    let mut hits: Vec<(usize, &Document)> = index
        .documents
        .iter()
        .filter(|doc| filter.as_ref().is_none_or(|f| f.matches(doc)))
        .filter_map(|doc| {
            if query.is_empty() {
                return Some((0, doc));
            }
            let matched = leading_matches(&query, &document_words(doc, &searchable));
            let enough = if require_all {
                matched == query.len()
            } else {
                matched > 0
            };
            enough.then_some((matched, doc))
        })
        .collect();
    hits.sort_by(|(score_a, a), (score_b, b)| {
        score_b.cmp(score_a).then_with(|| {
            sort_keys
                .iter()
                .fold(Ordering::Equal, |order, (attribute, descending)| {
                    order.then_with(|| {
                        let by = compare_values(a.get(attribute), b.get(attribute));
                        if *descending {
                            by.reverse()
                        } else {
                            by
                        }
                    })
                })
        })
    });
    hits.truncate(settings.max_total_hits());

    let displayed = settings.displayed();
    let shown = |doc: &Document| {
        let visible = project(doc, Some(&displayed));
        project(&visible, request.attributes_to_retrieve.as_deref())
    };
    let total = hits.len();
    let mut answer = if request.page.is_some() || request.hits_per_page.is_some() {
        let per_page = request.hits_per_page.unwrap_or(20);
        let page = request.page.unwrap_or(1).max(1);
        let page_hits: Vec<Document> = hits
            .iter()
            .skip((page - 1) * per_page)
            .take(per_page)
            .map(|(_, doc)| shown(doc))
            .collect();
        json!({
            "hits": page_hits,
            "query": query_text,
            "processingTimeMs": 0,
            "hitsPerPage": per_page,
            "page": page,
            "totalPages": total.div_ceil(per_page.max(1)),
            "totalHits": total,
        })
    } else {
        let offset = request.offset.unwrap_or(0);
        let limit = request.limit.unwrap_or(20);
        let page_hits: Vec<Document> = hits
            .iter()
            .skip(offset)
            .take(limit)
            .map(|(_, doc)| shown(doc))
            .collect();
        json!({
            "hits": page_hits,
            "query": query_text,
            "processingTimeMs": 0,
            "limit": limit,
            "offset": offset,
            "estimatedTotalHits": total,
        })
    };
    answer["processingTimeMs"] = json!(started.elapsed().as_millis() as u64);
    answer["requestUid"] = json!(uuid::Uuid::new_v4().to_string());
    Ok(answer)
}

fn search_index(
    state: &AppState,
    uid: &str,
    request: SearchRequest,
) -> Result<Json<Value>, ApiError> {
    let store = state.store();
    let index = store
        .indexes
        .get(uid)
        .ok_or_else(|| ApiError::index_not_found(uid))?;
    run(index, request).map(Json)
}

/// `POST /indexes/{uid}/search`.
pub async fn search_post(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Json<Value>, ApiError> {
    search_index(&state, &uid, request)
}

/// `GET /indexes/{uid}/search`.
pub async fn search_get(
    State(state): State<AppState>,
    Path(uid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let number = |name: &str| -> Result<Option<usize>, ApiError> {
        query
            .get(name)
            .map(|raw| {
                raw.parse().map_err(|_| {
                    ApiError::bad(
                        &format!("invalid_search_{}", name.to_lowercase()),
                        format!("Invalid value in parameter `{name}`: could not parse `{raw}` as a positive integer"),
                    )
                })
            })
            .transpose()
    };
    let list = |name: &str| {
        query.get(name).map(|raw| {
            raw.split(',')
                .map(|s| s.trim().to_string())
                .collect::<Vec<_>>()
        })
    };
    let request = SearchRequest {
        q: query.get("q").cloned(),
        offset: number("offset")?,
        limit: number("limit")?,
        page: number("page")?,
        hits_per_page: number("hitsPerPage")?,
        filter: query.get("filter").map(|f| Value::String(f.clone())),
        sort: list("sort"),
        attributes_to_retrieve: list("attributesToRetrieve"),
        matching_strategy: query.get("matchingStrategy").cloned(),
    };
    search_index(&state, &uid, request)
}
