//! The benchmark mode: a model of what indexing costs a real Meilisearch, so
//! `scripts/bench-sync` can show on the stand-in how a sync pipeline's batching
//! decides its speed. Off unless the stand-in starts with
//! `--model-meilisearch` or `POST /_standin/model` turns it on; off, the
//! stand-in processes every task at once as it always did.
//!
//! On, the worker auto-batches document tasks the way Meilisearch v1 does
//! ([`crate::autobatch`]) and each such batch takes, in wall time (a sleep,
//! not CPU):
//!
//! ```text
//! scale × ( fixed + per_indexed_doc × documents already in the index
//!                 + per_batch_doc   × documents in the batch )
//! ```
//!
//! All its tasks then finish together (one `batchUid`, `startedAt`,
//! `finishedAt`). Tasks that are not document tasks are not modelled: they
//! keep the latency knobs' cost.
//!
//! # Calibration (defaults: fixed 1.8 s, per indexed document 3.3 µs, per batch document 156 µs)
//!
//! Real figures (Meilisearch 1.50, 2 cores): (1) 50k messages
//! (44,260 indexable, 5 tasks) + 2,000 conversations (1,806, 1 task), every
//! task enqueued at once: 12.7 s; (2) 1M messages (909,844 indexable, 91
//! tasks of 10k) enqueued at once: 146 s; (3) `once` with 2 tasks of 10k in
//! flight at 1M: 722 s, ~1,500 falling to ~1,000 docs/s; (4) `once` at 50k,
//! same 2 in flight: 17.5 s.
//!
//! Tasks enqueued one after another do not all land in one batch: the worker
//! wakes on the first and processes it alone, and the rest (enqueued while
//! it works) form the second batch. So (1) is 3 batches (10k; 34,260 on top
//! of 10k; the 1,806 conversations) and (2) is 2 (10k; 899,844 on top of
//! 10k). With the per-indexed-document cost `a` fixed at 3.3 µs (see below):
//!
//! ```text
//! (1) 3·fixed + a·10k + b·46,066  = 12.7 s
//! (2) 2·fixed + a·10k + b·909,844 = 146 s   ⇒ b ≈ 156 µs, fixed ≈ 1.8 s
//! ```
//!
//! Checks with the rounded values: (1) 12.6 s, (2) 145.6 s; (4) `once` can
//! only ever have one 10k task waiting, so it gets ~6 single-task batches:
//! 6·1.8 + b·46,066 + a·10k·(0+1+2+3+4) = 18.3 s against 17.5 s measured
//! (+5%). (3): 91 single-task batches cost 441 s of Meilisearch time, less
//! than the 722 s measured — that run was bound by MongoDB, whose reads the
//! way `once` made them (5–7 s a page plus ~3 s an acknowledgement, per 10k)
//! run at exactly ~1,000–1,250 docs/s. `a` is only bounded by (3) (≤ 10 µs,
//! or Meilisearch would have been the slower side) and barely moves (1), (2)
//! and (4); 3.3 µs is the issue's estimate of how a batch's cost grows with
//! the index.
//!
//! An earlier fit (fixed 5 s, a 3.3 µs, b 160 µs) reproduces (2) and (3)
//! when each ingest is assumed to be ONE batch, but the stand-in (like
//! Meilisearch) batches (1) as three, giving 22.4 s for (1), and it predicts
//! 37.7 s for (4), twice what `once` took. It stays available through the
//! knob (`{"fixedMs": 5000, "perBatchDocUs": 160}`).
//!
//! # Knob
//!
//! `GET /_standin/model` shows the settings; `POST /_standin/model` with any of
//! `{"enabled", "fixedMs", "perIndexedDocUs", "perBatchDocUs", "scale",
//! "maxTasks", "maxDocs"}` changes those given (caps: a number ≥ 1, or `null`
//! for none, the default — as Meilisearch, whose batches are unlimited unless
//! `--experimental-max-number-of-batched-tasks` says otherwise). `scale`
//! multiplies every cost (0.1 for quick runs). `/_standin/reset` restores the
//! settings the stand-in started with.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::body::JsonBody;
use crate::errors::ApiError;
use crate::state::AppState;

/// The model's settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Model {
    pub enabled: bool,
    /// Cost of any document batch, in milliseconds.
    pub fixed_ms: f64,
    /// Cost per document already in the index when the batch starts, in µs.
    pub per_indexed_doc_us: f64,
    /// Cost per document (added, or id deleted) in the batch, in µs.
    pub per_batch_doc_us: f64,
    /// Multiplies every cost.
    pub scale: f64,
    /// Most tasks in one batch (`None`: no cap).
    pub max_tasks: Option<u64>,
    /// Most documents in one batch (`None`: no cap); a batch always takes its first task.
    pub max_docs: Option<u64>,
}

impl Default for Model {
    /// Off, with the calibrated costs (see the module documentation).
    fn default() -> Self {
        Model {
            enabled: false,
            fixed_ms: 1_800.0,
            per_indexed_doc_us: 3.3,
            per_batch_doc_us: 156.0,
            scale: 1.0,
            max_tasks: None,
            max_docs: None,
        }
    }
}

impl Model {
    /// Wall time of a batch of `batch_docs` documents on an index holding `indexed`.
    pub fn batch_cost(&self, indexed: usize, batch_docs: usize) -> Duration {
        let micros = self.fixed_ms * 1_000.0
            + self.per_indexed_doc_us * indexed as f64
            + self.per_batch_doc_us * batch_docs as f64;
        Duration::from_secs_f64((self.scale * micros / 1_000_000.0).max(0.0))
    }
}

/// Reads a field that may be absent (keep), `null` (no cap) or a number.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

/// Body of `POST /_standin/model`: the settings to change.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRequest {
    enabled: Option<bool>,
    fixed_ms: Option<f64>,
    per_indexed_doc_us: Option<f64>,
    per_batch_doc_us: Option<f64>,
    scale: Option<f64>,
    #[serde(default, deserialize_with = "present")]
    max_tasks: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    max_docs: Option<Option<u64>>,
}

fn cost_field(name: &str, value: Option<f64>, into: &mut f64) -> Result<(), ApiError> {
    match value {
        None => Ok(()),
        Some(v) if v.is_finite() && v >= 0.0 => {
            *into = v;
            Ok(())
        }
        Some(v) => Err(ApiError::bad(
            "bad_request",
            format!("`{name}` must be a finite number ≥ 0, got {v}."),
        )),
    }
}

fn cap_field(
    name: &str,
    value: Option<Option<u64>>,
    into: &mut Option<u64>,
) -> Result<(), ApiError> {
    match value {
        None => Ok(()),
        Some(Some(0)) => Err(ApiError::bad(
            "bad_request",
            format!("`{name}` must be at least 1, or null for no cap."),
        )),
        Some(cap) => {
            *into = cap;
            Ok(())
        }
    }
}

impl ModelRequest {
    /// `model` with this request's changes, or the first invalid field.
    fn applied_to(self, mut model: Model) -> Result<Model, ApiError> {
        if let Some(enabled) = self.enabled {
            model.enabled = enabled;
        }
        cost_field("fixedMs", self.fixed_ms, &mut model.fixed_ms)?;
        cost_field(
            "perIndexedDocUs",
            self.per_indexed_doc_us,
            &mut model.per_indexed_doc_us,
        )?;
        cost_field(
            "perBatchDocUs",
            self.per_batch_doc_us,
            &mut model.per_batch_doc_us,
        )?;
        cost_field("scale", self.scale, &mut model.scale)?;
        cap_field("maxTasks", self.max_tasks, &mut model.max_tasks)?;
        cap_field("maxDocs", self.max_docs, &mut model.max_docs)?;
        Ok(model)
    }
}

fn view(model: &Model) -> Json<Value> {
    Json(serde_json::to_value(model).unwrap_or_default())
}

/// `GET /_standin/model`.
pub async fn get_model(State(state): State<AppState>) -> Json<Value> {
    view(&state.knobs.model())
}

/// `POST /_standin/model`: all fields are checked before any is applied.
pub async fn set_model(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<ModelRequest>,
) -> Result<Json<Value>, ApiError> {
    let model = state
        .knobs
        .update_model(|model| request.applied_to(model))?;
    Ok(view(&model))
}
