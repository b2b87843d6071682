//! The HTTP side of `run`: `/healthz` (alive), `/readyz` (both servers
//! answer), `/status` (JSON: this build's version, this replica, its mode
//! and why, the lease, the last run, progress)
//! and `/metrics` (Prometheus text).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use mongodb::bson::doc;
use serde_json::{json, Value};

use super::state::ReplicaState;
use crate::follow::saved;
use crate::job::Reconciler;
use crate::lease::{self, LeaseOptions};

/// A readiness probe answers within this, whatever the servers do.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub(crate) struct HttpContext {
    pub(crate) state: ReplicaState,
    pub(crate) reconciler: Reconciler,
    pub(crate) lease: LeaseOptions,
    pub(crate) metrics: PrometheusHandle,
}

pub(crate) fn router(ctx: HttpContext) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .with_state(ctx)
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(ctx): State<HttpContext>) -> (StatusCode, Json<Value>) {
    let r = &ctx.reconciler;
    let mongo = tokio::time::timeout(PROBE_TIMEOUT, r.db.run_command(doc! { "ping": 1 }));
    let meili = tokio::time::timeout(PROBE_TIMEOUT, r.meili.health());
    let (mongo, meili) = tokio::join!(mongo, meili);
    let mongo_ok = matches!(mongo, Ok(Ok(_)));
    let meili_ok = matches!(meili, Ok(Ok(_)));
    let body = json!({
        "mongo": if mongo_ok { "ok" } else { "unreachable" },
        "meili": if meili_ok { "ok" } else { "unreachable" },
    });
    let code = if mongo_ok && meili_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

async fn status(State(ctx): State<HttpContext>) -> Json<Value> {
    let read = lease::read_status(&ctx.reconciler.db, &ctx.lease, saved::describe);
    let lease = match tokio::time::timeout(PROBE_TIMEOUT, read).await {
        Ok(Ok(status)) => serde_json::to_value(status).unwrap_or_default(),
        Ok(Err(e)) => json!({ "error": e.to_string() }),
        Err(_) => json!({ "error": "MongoDB did not answer in time" }),
    };
    Json(ctx.state.status(lease))
}

async fn metrics(State(ctx): State<HttpContext>) -> impl IntoResponse {
    ctx.state.follow.publish_lag();
    (
        [("content-type", "text/plain; version=0.0.4")],
        crate::metrics::render(&ctx.metrics),
    )
}
