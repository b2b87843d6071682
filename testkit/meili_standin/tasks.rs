//! The task queue: what a task is (its Meilisearch view and the work it
//! carries), enqueuing with the `202` summarized answer, and the `/tasks`
//! routes. The worker (`worker.rs`) processes the queue in uid order.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use time::OffsetDateTime;

use crate::clock;
use crate::errors::{ApiError, ErrorBody};
use crate::index::Document;
use crate::state::{AppState, Shared};

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    Enqueued,
    Processing,
    Succeeded,
    Failed,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enqueued => "enqueued",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

const STATUSES: [&str; 5] = ["enqueued", "processing", "succeeded", "failed", "canceled"];

const TASK_TYPES: [&str; 16] = [
    "documentAdditionOrUpdate",
    "documentEdition",
    "documentDeletion",
    "settingsUpdate",
    "indexCreation",
    "indexDeletion",
    "indexUpdate",
    "indexSwap",
    "taskCancelation",
    "taskDeletion",
    "dumpCreation",
    "snapshotCreation",
    "export",
    "upgradeDatabase",
    "indexCompaction",
    "networkTopologyChange",
];

/// One pair of `POST /swap-indexes`.
#[derive(Clone, Debug)]
pub struct Swap {
    pub first: String,
    pub second: String,
    /// Rename `first` to `second` instead of exchanging them.
    pub rename: bool,
}

/// What a task does when processed; dropped once it is.
pub enum Work {
    CreateIndex {
        primary_key: Option<String>,
    },
    UpdateIndex {
        primary_key: Option<String>,
    },
    DeleteIndex,
    AddDocuments {
        documents: Vec<Document>,
        primary_key: Option<String>,
        /// PUT (add or update: merge fields) rather than POST (add or replace).
        merge: bool,
    },
    DeleteDocuments {
        ids: Vec<String>,
    },
    DeleteByFilter {
        filter: Value,
    },
    ClearDocuments,
    UpdateSettings {
        changes: Map<String, Value>,
    },
    SwapIndexes {
        swaps: Vec<Swap>,
    },
}

impl Work {
    /// The Meilisearch task `type`.
    pub fn task_type(&self) -> &'static str {
        match self {
            Self::CreateIndex { .. } => "indexCreation",
            Self::UpdateIndex { .. } => "indexUpdate",
            Self::DeleteIndex => "indexDeletion",
            Self::AddDocuments { .. } => "documentAdditionOrUpdate",
            Self::DeleteDocuments { .. } | Self::DeleteByFilter { .. } | Self::ClearDocuments => {
                "documentDeletion"
            }
            Self::UpdateSettings { .. } => "settingsUpdate",
            Self::SwapIndexes { .. } => "indexSwap",
        }
    }
}

/// A task as stored.
pub struct Task {
    pub uid: u32,
    pub index_uid: Option<String>,
    pub status: TaskStatus,
    pub task_type: &'static str,
    pub details: Map<String, Value>,
    pub error: Option<ErrorBody>,
    /// The batch that processed it, set when processing starts.
    pub batch_uid: Option<u32>,
    pub enqueued_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    pub work: Option<Work>,
}

impl Task {
    /// The task object of `GET /tasks/{uid}`.
    pub fn view(&self) -> Value {
        let duration = match (self.started_at, self.finished_at) {
            (Some(start), Some(end)) => Some(clock::iso_duration(end - start)),
            _ => None,
        };
        json!({
            "uid": self.uid,
            "batchUid": self.batch_uid,
            "indexUid": self.index_uid,
            "status": self.status.as_str(),
            "type": self.task_type,
            "canceledBy": null,
            "details": self.details,
            "error": self.error,
            "duration": duration,
            "enqueuedAt": clock::rfc3339(self.enqueued_at),
            "startedAt": self.started_at.map(clock::rfc3339),
            "finishedAt": self.finished_at.map(clock::rfc3339),
        })
    }

    /// The summarized task a write answers with.
    pub fn summary(&self) -> Value {
        json!({
            "taskUid": self.uid,
            "indexUid": self.index_uid,
            "status": self.status.as_str(),
            "type": self.task_type,
            "enqueuedAt": clock::rfc3339(self.enqueued_at),
        })
    }
}

/// Enqueues `work` and answers `202` with the summarized task.
pub fn enqueue(
    shared: &Shared,
    index_uid: Option<&str>,
    work: Work,
    details: Map<String, Value>,
) -> Response {
    let summary = {
        let mut store = shared.store();
        let task = Task {
            uid: store.tasks.len() as u32,
            index_uid: index_uid.map(str::to_string),
            status: TaskStatus::Enqueued,
            task_type: work.task_type(),
            details,
            error: None,
            batch_uid: None,
            enqueued_at: clock::now(),
            started_at: None,
            finished_at: None,
            work: Some(work),
        };
        let summary = task.summary();
        store.tasks.push(task);
        summary
    };
    shared.worker_wakeup.notify_one();
    (StatusCode::ACCEPTED, Json(summary)).into_response()
}

/// `details` from literal pairs.
pub fn details<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
}

/// `GET /tasks/{uid}`.
pub async fn get_task(State(state): State<AppState>, Path(uid): Path<String>) -> Response {
    let Ok(uid) = uid.parse::<usize>() else {
        return ApiError::bad(
            "invalid_task_uids",
            format!("Invalid value in parameter `taskUid`: could not parse `{uid}` as a positive integer"),
        )
        .into_response();
    };
    let store = state.store();
    match store.tasks.get(uid) {
        Some(task) => Json(task.view()).into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorBody::invalid("task_not_found", format!("Task `{uid}` not found.")),
        )
        .into_response(),
    }
}

/// The filters of `GET /tasks`.
struct TaskFilter {
    statuses: Option<Vec<String>>,
    types: Option<Vec<String>>,
    index_uids: Option<Vec<String>>,
    uids: Option<Vec<u32>>,
}

impl TaskFilter {
    fn accepts(&self, task: &Task) -> bool {
        let listed = |list: &Option<Vec<String>>, value: &str| {
            list.as_ref()
                .is_none_or(|values| values.iter().any(|v| v == value))
        };
        listed(&self.statuses, task.status.as_str())
            && listed(&self.types, task.task_type)
            && self.index_uids.as_ref().is_none_or(|uids| {
                task.index_uid
                    .as_ref()
                    .is_some_and(|uid| uids.iter().any(|u| u == uid))
            })
            && self
                .uids
                .as_ref()
                .is_none_or(|uids| uids.contains(&task.uid))
    }
}

/// A comma-separated list parameter; `*` means no filter.
fn list_param(
    query: &HashMap<String, String>,
    name: &str,
    allowed: Option<(&[&str], &str, &str)>,
) -> Result<Option<Vec<String>>, ApiError> {
    let Some(raw) = query.get(name) else {
        return Ok(None);
    };
    let values: Vec<String> = raw
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if values.iter().any(|v| v == "*") {
        return Ok(None);
    }
    if let Some((allowed, code, what)) = allowed {
        if let Some(bad) = values.iter().find(|v| !allowed.contains(&v.as_str())) {
            let available = allowed
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ApiError::bad(
                code,
                format!(
                    "Invalid value in parameter `{name}`: `{bad}` is not a valid task {what}. \
                     Available {what}s are {available}."
                ),
            ));
        }
    }
    Ok(Some(values))
}

fn number_param(
    query: &HashMap<String, String>,
    name: &str,
    code: &str,
) -> Result<Option<u32>, ApiError> {
    match query.get(name) {
        None => Ok(None),
        Some(raw) => raw.parse().map(Some).map_err(|_| {
            ApiError::bad(
                code,
                format!("Invalid value in parameter `{name}`: could not parse `{raw}` as a positive integer"),
            )
        }),
    }
}

/// `GET /tasks`: newest first, filtered, paged with `from`/`limit`/`next`.
pub async fn list_tasks(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let uids = list_param(&query, "uids", None)?
        .map(|uids| {
            uids.iter()
                .map(|uid| uid.parse::<u32>())
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
        .map_err(|_| {
            ApiError::bad(
                "invalid_task_uids",
                "Invalid value in parameter `uids`: could not parse the value as a positive integer",
            )
        })?;
    let filter = TaskFilter {
        statuses: list_param(
            &query,
            "statuses",
            Some((&STATUSES, "invalid_task_statuses", "status")),
        )?,
        types: list_param(
            &query,
            "types",
            Some((&TASK_TYPES, "invalid_task_types", "type")),
        )?,
        index_uids: list_param(&query, "indexUids", None)?,
        uids,
    };
    let limit = number_param(&query, "limit", "invalid_task_limit")?.unwrap_or(20);
    let from = number_param(&query, "from", "invalid_task_from")?;
    let reverse = query.get("reverse").is_some_and(|v| v == "true");

    let store = state.store();
    let matching: Vec<&Task> = store.tasks.iter().filter(|t| filter.accepts(t)).collect();
    let total = matching.len();
    let page: Vec<&Task> = if reverse {
        matching
            .into_iter()
            .filter(|t| from.is_none_or(|from| t.uid >= from))
            .take(limit as usize + 1)
            .collect()
    } else {
        matching
            .into_iter()
            .rev()
            .filter(|t| from.is_none_or(|from| t.uid <= from))
            .take(limit as usize + 1)
            .collect()
    };
    let next = page.get(limit as usize).map(|t| t.uid);
    let results: Vec<Value> = page.iter().take(limit as usize).map(|t| t.view()).collect();
    Ok(Json(json!({
        "results": results,
        "total": total,
        "limit": limit,
        "from": results.first().map(|t| t["uid"].clone()),
        "next": next,
    })))
}
