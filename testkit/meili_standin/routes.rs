//! The router: every Meilisearch route the stand-in answers, the knob routes,
//! and the middleware stack (request log outermost, then the `unavailable`
//! outage guard, then bearer-key authentication).

use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::state::AppState;
use crate::{auth, documents, indexes, knobs, model, request_log, search, settings, tasks};

async fn health() -> Json<Value> {
    Json(json!({ "status": "available" }))
}

async fn version() -> Json<Value> {
    Json(json!({
        "commitSha": "meili-standin",
        "commitDate": "2026-01-01T00:00:00Z",
        "pkgVersion": "1.50.0",
    }))
}

/// The whole application.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/version", get(version))
        .route("/stats", get(indexes::global_stats))
        .route(
            "/indexes",
            get(indexes::list_indexes).post(indexes::create_index),
        )
        .route(
            "/indexes/{uid}",
            get(indexes::get_index)
                .patch(indexes::update_index)
                .delete(indexes::delete_index),
        )
        .route("/indexes/{uid}/stats", get(indexes::index_stats))
        .route("/swap-indexes", post(indexes::swap_indexes))
        .route(
            "/indexes/{uid}/settings",
            get(settings::get_all)
                .patch(settings::patch_all)
                .delete(settings::reset_all),
        )
        .route(
            "/indexes/{uid}/settings/{name}",
            get(settings::get_one)
                .put(settings::update_one)
                .patch(settings::update_one)
                .delete(settings::reset_one),
        )
        .route(
            "/indexes/{uid}/documents",
            get(documents::get_documents)
                .post(documents::add_or_replace)
                .put(documents::add_or_update)
                .delete(documents::clear_documents),
        )
        .route(
            "/indexes/{uid}/documents/fetch",
            post(documents::fetch_documents),
        )
        .route(
            "/indexes/{uid}/documents/delete-batch",
            post(documents::delete_batch),
        )
        .route(
            "/indexes/{uid}/documents/delete",
            post(documents::delete_by_filter),
        )
        .route(
            "/indexes/{uid}/documents/{id}",
            get(documents::get_document).delete(documents::delete_document),
        )
        .route(
            "/indexes/{uid}/search",
            get(search::search_get).post(search::search_post),
        )
        .route("/tasks", get(tasks::list_tasks))
        .route("/tasks/{uid}", get(tasks::get_task))
        .route(
            "/_standin/latency",
            get(knobs::get_latency).post(knobs::set_latency),
        )
        .route(
            "/_standin/model",
            get(model::get_model).post(model::set_model),
        )
        .route("/_standin/fail-next-tasks", post(knobs::fail_next_tasks))
        .route("/_standin/hold-additions", post(knobs::hold_additions))
        .route("/_standin/outage", post(knobs::outage))
        .route(
            "/_standin/requests",
            get(knobs::get_requests).delete(knobs::clear_requests),
        )
        .route("/_standin/reset", post(knobs::reset))
        .layer(from_fn_with_state(state.clone(), auth::require_master_key))
        .layer(from_fn_with_state(state.clone(), knobs::unavailable_guard))
        .layer(from_fn_with_state(state.clone(), request_log::record))
        .with_state(state)
}
