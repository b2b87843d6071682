//! Test knobs: a path real Meilisearch lacks (`/_standin/`), protected by the
//! same master key, letting tests make the stand-in slow, failing or down.
//!
//! | Route | Body | Effect |
//! |---|---|---|
//! | `POST /_standin/latency` | `{"taskMs": N, "perDocumentUs": M}` (both optional) | every task then spends `N` ms processing, plus `M` µs per document of an addition (start-up default of `M`: `--per-document-cost-us`, 0) |
//! | `GET /_standin/latency` | | the current values |
//! | `POST /_standin/model` | `{"enabled": true, "fixedMs": F, "perIndexedDocUs": I, "perBatchDocUs": D, "scale": S, "maxTasks": T, "maxDocs": N}` (all optional) | the benchmark model of Meilisearch's indexing cost and auto-batching ([`crate::model`]; start-up default: `--model-meilisearch`, `--model-scale`) |
//! | `GET /_standin/model` | | the current model settings |
//! | `POST /_standin/hold-additions` | `{"held": true}` or `{"held": false}` | while held, document additions stay `enqueued` and the worker processes the tasks after them (deletions, settings) as usual; on release they are processed in uid order |
//! | `POST /_standin/fail-next-tasks` | `{"count": N, "code": "...", "message": "...", "type": "..."}` | the next `N` tasks processed fail with that error object (defaults: `internal` / `Injected failure` / `internal`), leaving documents untouched |
//! | `POST /_standin/outage` | `{"mode": "refuse", "ms": N}` | closes the listening socket and every open connection (so new connections are refused) and binds the same port again after `N` ms; answers once connections are refused |
//! | `POST /_standin/outage` | `{"mode": "unavailable", "ms": N}` | every route but `/_standin/*` answers `503` with a Meilisearch-shaped error for `N` ms |
//! | `POST /_standin/outage` | `{"mode": "none"}` | ends an `unavailable` outage early |
//! | `GET /_standin/requests` | | the request log: JSON array of `{method, path, query, status, startedAt, finishedAt, bodyBytes}` (RFC 3339 times; `/_standin/*` requests are not logged) |
//! | `DELETE /_standin/requests` | | empties the request log |
//! | `POST /_standin/reset` | | drops every index, task and batch (uids restart at 0), the request log and all knobs (the model returns to its start-up settings) |
//!
//! Every knob answers `200` with a JSON object describing what it set.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::body::JsonBody;
use crate::errors::{ApiError, ErrorBody};
use crate::model::Model;
use crate::state::AppState;

/// A pending injected failure.
struct InjectedFailures {
    remaining: u64,
    error: ErrorBody,
}

/// Current knob values.
#[derive(Default)]
pub struct Knobs {
    task_latency_ms: AtomicU64,
    per_document_cost_us: AtomicU64,
    injected: Mutex<Option<InjectedFailures>>,
    /// Document additions wait while set (`/_standin/hold-additions`).
    additions_held: AtomicBool,
    unavailable_until: Mutex<Option<Instant>>,
    /// Wakes the server loop to close its socket for `refusal_ms`.
    pub refusal_requested: Notify,
    refusal_ms: AtomicU64,
    /// Where the server listens, to check a refusal took effect.
    bound_addr: Mutex<Option<SocketAddr>>,
    model: Mutex<Model>,
    /// What `/_standin/reset` returns the model to.
    startup_model: Mutex<Model>,
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Knobs {
    /// Simulated processing time of a task with `documents` documents.
    pub fn processing_cost(&self, documents: usize) -> Duration {
        Duration::from_millis(self.task_latency_ms.load(Ordering::Relaxed))
            + Duration::from_micros(self.per_document_cost_us.load(Ordering::Relaxed))
                * documents as u32
    }

    /// The Meilisearch cost model's current settings.
    pub fn model(&self) -> Model {
        *locked(&self.model)
    }

    /// Changes the model atomically (`change` sees the current settings).
    pub fn update_model<E>(
        &self,
        change: impl FnOnce(Model) -> Result<Model, E>,
    ) -> Result<Model, E> {
        let mut model = locked(&self.model);
        *model = change(*model)?;
        Ok(*model)
    }

    /// The model's settings at start-up, restored by `/_standin/reset`.
    pub fn set_startup_model(&self, model: Model) {
        *locked(&self.startup_model) = model;
        *locked(&self.model) = model;
    }

    pub fn set_per_document_cost_us(&self, micros: u64) {
        self.per_document_cost_us.store(micros, Ordering::Relaxed);
    }

    /// The error the next processed task must fail with, if one was injected.
    pub fn take_injected_failure(&self) -> Option<ErrorBody> {
        let mut injected = locked(&self.injected);
        let pending = injected.as_mut()?;
        let error = pending.error.clone();
        pending.remaining -= 1;
        if pending.remaining == 0 {
            *injected = None;
        }
        Some(error)
    }

    /// Whether document additions must wait (`/_standin/hold-additions`).
    pub fn additions_held(&self) -> bool {
        self.additions_held.load(Ordering::Relaxed)
    }

    fn is_unavailable(&self) -> bool {
        locked(&self.unavailable_until).is_some_and(|until| Instant::now() < until)
    }

    pub fn refusal_ms(&self) -> u64 {
        self.refusal_ms.load(Ordering::Relaxed)
    }

    pub fn set_bound_addr(&self, addr: SocketAddr) {
        *locked(&self.bound_addr) = Some(addr);
    }

    fn reset(&self) {
        self.task_latency_ms.store(0, Ordering::Relaxed);
        self.per_document_cost_us.store(0, Ordering::Relaxed);
        *locked(&self.injected) = None;
        self.additions_held.store(false, Ordering::Relaxed);
        *locked(&self.unavailable_until) = None;
        *locked(&self.model) = *locked(&self.startup_model);
    }
}

/// Middleware: while an `unavailable` outage lasts, answer 503 except on `/_standin/`.
pub async fn unavailable_guard(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if state.knobs.is_unavailable() && !request.uri().path().starts_with("/_standin/") {
        let body = ErrorBody::new(
            "service_unavailable",
            "system",
            "Meilisearch is unavailable (simulated outage of the stand-in).",
        );
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    next.run(request).await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencyRequest {
    task_ms: Option<u64>,
    per_document_us: Option<u64>,
}

fn latency_view(knobs: &Knobs) -> Value {
    json!({
        "taskMs": knobs.task_latency_ms.load(Ordering::Relaxed),
        "perDocumentUs": knobs.per_document_cost_us.load(Ordering::Relaxed),
    })
}

/// `POST /_standin/latency`.
pub async fn set_latency(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<LatencyRequest>,
) -> Json<Value> {
    if let Some(ms) = request.task_ms {
        state.knobs.task_latency_ms.store(ms, Ordering::Relaxed);
    }
    if let Some(us) = request.per_document_us {
        state.knobs.set_per_document_cost_us(us);
    }
    Json(latency_view(&state.knobs))
}

/// `GET /_standin/latency`.
pub async fn get_latency(State(state): State<AppState>) -> Json<Value> {
    Json(latency_view(&state.knobs))
}

#[derive(Deserialize)]
pub struct FailRequest {
    count: u64,
    code: Option<String>,
    message: Option<String>,
    #[serde(rename = "type")]
    error_type: Option<String>,
}

/// `POST /_standin/fail-next-tasks`.
pub async fn fail_next_tasks(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<FailRequest>,
) -> Json<Value> {
    let error = ErrorBody::new(
        request.code.as_deref().unwrap_or("internal"),
        request.error_type.as_deref().unwrap_or("internal"),
        request
            .message
            .unwrap_or_else(|| "Injected failure".to_string()),
    );
    let answer = json!({ "count": request.count, "error": error });
    *locked(&state.knobs.injected) = (request.count > 0).then_some(InjectedFailures {
        remaining: request.count,
        error,
    });
    Json(answer)
}

#[derive(Deserialize)]
pub struct HoldRequest {
    held: bool,
}

/// `POST /_standin/hold-additions`: holds document additions, or releases
/// them (waking the worker).
pub async fn hold_additions(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<HoldRequest>,
) -> Json<Value> {
    state
        .knobs
        .additions_held
        .store(request.held, Ordering::Relaxed);
    if !request.held {
        state.worker_wakeup.notify_one();
    }
    Json(json!({ "held": request.held }))
}

#[derive(Deserialize)]
pub struct OutageRequest {
    mode: String,
    #[serde(default)]
    ms: u64,
}

/// `POST /_standin/outage`.
pub async fn outage(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<OutageRequest>,
) -> Result<Json<Value>, ApiError> {
    let knobs = &state.knobs;
    match request.mode.as_str() {
        "refuse" => {
            knobs.refusal_ms.store(request.ms, Ordering::Relaxed);
            knobs.refusal_requested.notify_one();
            let addr = *locked(&knobs.bound_addr);
            if let Some(addr) = addr {
                wait_until_refused(addr).await;
            }
        }
        "unavailable" => {
            *locked(&knobs.unavailable_until) =
                Some(Instant::now() + Duration::from_millis(request.ms));
        }
        "none" => *locked(&knobs.unavailable_until) = None,
        other => {
            return Err(ApiError::bad(
                "bad_request",
                format!(
                    "Unknown outage mode `{other}`: expected `refuse`, `unavailable` or `none`."
                ),
            ))
        }
    }
    Ok(Json(json!({ "mode": request.mode, "ms": request.ms })))
}

/// Waits (at most 2 s) until connecting to `addr` is refused, so the caller
/// of the knob can rely on the outage having started when it gets its answer.
async fn wait_until_refused(addr: SocketAddr) {
    let target = if addr.ip().is_unspecified() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
    } else {
        addr
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match tokio::net::TcpStream::connect(target).await {
            Err(_) => return,
            Ok(stream) => drop(stream),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `GET /_standin/requests`.
pub async fn get_requests(State(state): State<AppState>) -> Json<Value> {
    Json(state.request_log.snapshot())
}

/// `DELETE /_standin/requests`.
pub async fn clear_requests(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "cleared": state.request_log.clear() }))
}

/// `POST /_standin/reset`.
pub async fn reset(State(state): State<AppState>) -> Json<Value> {
    {
        let mut store = state.store();
        store.indexes.clear();
        store.tasks.clear();
        store.next_to_process = 0;
        store.next_batch_uid = 0;
        store.epoch += 1;
        store.last_update = None;
    }
    state.knobs.reset();
    state.request_log.clear();
    Json(json!({ "reset": true }))
}
