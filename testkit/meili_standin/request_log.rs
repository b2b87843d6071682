//! The request log behind `GET /_standin/requests`: method, path, query,
//! status, start/end times and request-body size of every request except the
//! knobs' own, so tests can assert what a client sent (batch sizes, retries).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::clock;
use crate::state::AppState;

/// One logged request.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    method: String,
    path: String,
    query: Option<String>,
    status: u16,
    started_at: String,
    finished_at: String,
    body_bytes: u64,
}

/// The log itself.
#[derive(Default)]
pub struct RequestLog {
    entries: Mutex<Vec<Entry>>,
}

impl RequestLog {
    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The log as a JSON array, oldest first.
    pub fn snapshot(&self) -> Value {
        serde_json::to_value(&*self.entries()).unwrap_or_default()
    }

    /// Empties the log; how many entries it had.
    pub fn clear(&self) -> usize {
        let mut entries = self.entries();
        let count = entries.len();
        entries.clear();
        count
    }
}

/// Middleware recording every request outside `/_standin/`. The body size is
/// its `Content-Length`, else what the handler read (streamed bodies have no
/// length header).
pub async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/_standin/") {
        return next.run(request).await;
    }
    let started_at = clock::rfc3339(clock::now());
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let query = request.uri().query().map(str::to_string);

    let counted = Arc::new(AtomicU64::new(0));
    let counter = counted.clone();
    let (parts, body) = request.into_parts();
    let declared_length = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    let body = Body::from_stream(body.into_data_stream().inspect(move |chunk| {
        if let Ok(bytes) = chunk {
            counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
    }));
    let response = next.run(Request::from_parts(parts, body)).await;

    let entry = Entry {
        method,
        path,
        query,
        status: response.status().as_u16(),
        started_at,
        finished_at: clock::rfc3339(clock::now()),
        body_bytes: declared_length.unwrap_or_else(|| counted.load(Ordering::Relaxed)),
    };
    state.request_log.entries().push(entry);
    response
}
