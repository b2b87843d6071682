//! The HTTP side of `run`: `/healthz` (alive), `/readyz` (both servers
//! answer), `/status` (JSON: this build's version, this replica, its mode
//! and why, the lease, the last run, progress)
//! and `/metrics` (Prometheus text).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use mongodb::bson::doc;
use mongodb::Database;
use serde_json::json;

use super::state::ReplicaState;
use crate::follow::ModeView;
use crate::lease::{self, LeaseOptions};
use crate::meili::Meili;

/// A readiness probe answers within this, whatever the servers do.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub(crate) struct HttpContext {
    pub(crate) state: ReplicaState,
    pub(crate) db: Database,
    pub(crate) meili: Meili,
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

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(ctx): State<HttpContext>) -> Response {
    let mongo = tokio::time::timeout(PROBE_TIMEOUT, ctx.db.run_command(doc! { "ping": 1 }));
    let meili = tokio::time::timeout(PROBE_TIMEOUT, ctx.meili.health());
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
    (code, Json(body)).into_response()
}

async fn status(State(ctx): State<HttpContext>) -> Response {
    let read = lease::read_status_with(&ctx.db, &ctx.lease, crate::follow::saved::describe);
    let lease = match tokio::time::timeout(PROBE_TIMEOUT, read).await {
        Ok(Ok(status)) => serde_json::to_value(status).unwrap_or_default(),
        Ok(Err(e)) => json!({ "error": e.to_string() }),
        Err(_) => json!({ "error": "MongoDB did not answer in time" }),
    };
    let mut body = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "replica": ctx.state.replica,
        "role": ctx.state.role(),
        "progress": ctx.state.progress.snapshot(),
        "lastRun": ctx.state.last_run(),
        "nextRunInSecs": ctx.state.next_run_in_secs(),
        "follow": ctx.state.follow.view(),
        "lease": lease,
    });
    let mode = ModeView::status_fields(ctx.state.mode().as_ref());
    body.as_object_mut()
        .expect("the body is an object")
        .extend(mode);
    Json(body).into_response()
}

async fn metrics(State(ctx): State<HttpContext>) -> Response {
    ctx.state.follow.publish_lag();
    (
        [("content-type", "text/plain; version=0.0.4")],
        crate::metrics::render(&ctx.metrics),
    )
        .into_response()
}
