//! Bearer-key authentication as Meilisearch applies it with a master key: no
//! `Authorization` header is a 401 `missing_authorization_header`, a wrong key
//! a 403 `invalid_api_key`. `/health` is open, as on the real server.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::errors::{ApiError, ErrorBody};
use crate::state::AppState;

/// Middleware rejecting requests without the master key.
pub async fn require_master_key(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorBody::new(
                "missing_authorization_header",
                "auth",
                "The Authorization header is missing. It must use the bearer authorization method.",
            ),
        )
        .into_response();
    };
    let presented = value
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    if presented != Some(state.config.master_key.as_str()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorBody::new(
                "invalid_api_key",
                "auth",
                "The provided API key is invalid.",
            ),
        )
        .into_response();
    }
    next.run(request).await
}
