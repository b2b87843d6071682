//! What follow mode shows: `follow` in `/status` (`state`, `lagSecs`,
//! `lastEventAt`, `applied`, `deletes`: how each collection's deletes reach
//! Meilisearch, `nextExpiryAt`) and the metrics `reconciler_follow_events_total`
//! and `reconciler_follow_lag_seconds` (where the delay goes, stage by stage,
//! is `follow::latency`'s metrics).
//!
//! **Lag** is MongoDB's time now minus the point up to which every change is
//! applied: the time of the last applied change, or the last moment the
//! stream had nothing more to give, whichever is later; 0 while the stream
//! has nothing more. During a periodic reconciliation (changes wait) it
//! grows. MongoDB's time is estimated from its clock read with the last
//! micro-batch (an offset to the local clock), so reading it costs no round
//! trip.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use mongodb::bson::DateTime;
use serde::Serialize;
use serde_json::{json, Value};

use crate::lease::clock::rfc3339;
use crate::metrics;
use crate::mongo::Collection;
use crate::views::DeleteRegime;

/// Where this replica stands in follow mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FollowState {
    /// `serve.follow` is false: interval-only reconciliation.
    #[default]
    Off,
    /// The server has no change streams: interval-only reconciliation.
    Unsupported,
    /// Another replica owns the lease (and follows); this one waits for it.
    Waiting,
    /// This replica owns the lease and reconciles (before following, or a
    /// periodic run; changes wait meanwhile).
    Reconciling,
    /// This replica owns the lease and applies changes as they come.
    Following,
    /// Another replica asked for the lease; this one is handing it over.
    HandingOver,
}

impl FollowState {
    fn owns_the_stream(self) -> bool {
        matches!(
            self,
            FollowState::Reconciling | FollowState::Following | FollowState::HandingOver
        )
    }
}

#[derive(Debug, Default)]
struct Inner {
    state: FollowState,
    caught_up: bool,
    applied_through: Option<DateTime>,
    last_event_at: Option<DateTime>,
    /// MongoDB's clock minus the local one, in ms, as last measured.
    server_offset_ms: i64,
    applied: BTreeMap<&'static str, u64>,
    deletes: BTreeMap<&'static str, DeleteRegime>,
    next_expiry_at: Option<DateTime>,
}

/// Shared between the owner's loop and the HTTP handlers. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct FollowStatus(Arc<Mutex<Inner>>);

fn local_now_ms() -> i64 {
    DateTime::now().timestamp_millis()
}

impl FollowStatus {
    pub(crate) fn new(state: FollowState) -> Self {
        FollowStatus(Arc::new(Mutex::new(Inner {
            state,
            applied: metrics::FOLLOW_OPS.iter().map(|op| (*op, 0)).collect(),
            ..Inner::default()
        })))
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.0.lock().expect("follow status poisoned"))
    }

    pub(crate) fn set_state(&self, state: FollowState) {
        self.with(|inner| {
            inner.state = state;
            if state != FollowState::Following {
                inner.caught_up = false;
            }
        });
        self.publish_lag();
    }

    /// MongoDB's clock read now (keeps the estimate of its time current).
    pub(crate) fn server_time(&self, now: DateTime) {
        self.with(|inner| inner.server_offset_ms = now.timestamp_millis() - local_now_ms());
    }

    /// MongoDB's clock minus the local one, in ms, as last measured.
    pub(crate) fn server_offset_ms(&self) -> i64 {
        self.with(|inner| inner.server_offset_ms)
    }

    /// The collections whose deletes come with pre-images (the others' go
    /// through the id-set comparison).
    pub(crate) fn deletes(&self, with_pre_images: &[Collection]) {
        self.with(|inner| {
            inner.deletes = Collection::ALL
                .into_iter()
                .map(|c| (c.name(), DeleteRegime::of(with_pre_images.contains(&c))))
                .collect();
        });
    }

    /// When the next document expires (MongoDB's clock).
    pub(crate) fn next_expiry(&self, at: Option<DateTime>) {
        self.with(|inner| inner.next_expiry_at = at);
    }

    /// A change arrived that is not applied yet.
    pub(crate) fn behind(&self) {
        self.with(|inner| inner.caught_up = false);
    }

    /// A micro-batch was applied: its documents by kind, its newest change's time.
    pub(crate) fn applied(&self, by_op: &BTreeMap<&'static str, u64>, newest: Option<DateTime>) {
        self.with(|inner| {
            for (op, n) in by_op {
                *inner.applied.entry(op).or_default() += n;
            }
            if let Some(at) = newest {
                inner.last_event_at = inner.last_event_at.max(Some(at));
                inner.applied_through = inner.applied_through.max(Some(at));
            }
        });
        for (op, n) in by_op {
            metrics::follow_events(op, *n);
        }
        self.publish_lag();
    }

    /// The stream had nothing more, and everything before is applied.
    pub(crate) fn caught_up(&self) {
        self.with(|inner| {
            inner.caught_up = true;
            let now = DateTime::from_millis(local_now_ms() + inner.server_offset_ms);
            inner.applied_through = inner.applied_through.max(Some(now));
        });
        self.publish_lag();
    }

    /// The lag, when this replica owns the stream.
    fn lag_secs(&self) -> Option<f64> {
        self.with(|inner| {
            if !inner.state.owns_the_stream() {
                return None;
            }
            if inner.caught_up && inner.state == FollowState::Following {
                return Some(0.0);
            }
            let through = inner.applied_through?;
            let now = local_now_ms() + inner.server_offset_ms;
            Some((now - through.timestamp_millis()).max(0) as f64 / 1000.0)
        })
    }

    /// Brings `reconciler_follow_lag_seconds` up to date (0 when not owning).
    pub(crate) fn publish_lag(&self) {
        metrics::follow_lag(self.lag_secs().unwrap_or(0.0));
    }

    /// `follow` in `/status`: `state`; `lagSecs` (MongoDB's clock; `null`
    /// when this replica does not own the stream); `lastEventAt`, when
    /// MongoDB applied the last change this replica applied; `applied`,
    /// documents this replica applied since it started, by the kind of
    /// their last change (`skipped`: already indexed by LibreChat's save
    /// hook); `deletes`, per collection how its deletes reach Meilisearch
    /// (by pre-image, or by the id-set comparison) as the owner found them
    /// when it began following; `nextExpiryAt`, when the next document that
    /// may be in Meilisearch expires (the owner sweeps it out then). The
    /// last two only on the replica that owns the stream; times RFC 3339.
    pub(crate) fn view(&self) -> Value {
        let lag_secs = self.lag_secs();
        self.with(|inner| {
            let owns = inner.state.owns_the_stream();
            json!({
                "state": inner.state,
                "lagSecs": lag_secs,
                "lastEventAt": inner.last_event_at.as_ref().map(rfc3339),
                "applied": inner.applied,
                "deletes": if owns { inner.deletes.clone() } else { BTreeMap::new() },
                "nextExpiryAt": inner.next_expiry_at.filter(|_| owns).as_ref().map(rfc3339),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_zero_when_caught_up_and_grows_while_changes_wait() {
        let status = FollowStatus::new(FollowState::Waiting);
        assert_eq!(status.lag_secs(), None, "no lag without the stream");
        status.set_state(FollowState::Following);
        let server_now = DateTime::from_millis(local_now_ms() + 60_000); // MongoDB 1 min ahead
        status.server_time(server_now);
        let mut by_op = BTreeMap::new();
        by_op.insert("insert", 2);
        status.applied(
            &by_op,
            Some(DateTime::from_millis(
                server_now.timestamp_millis() - 10_000,
            )),
        );
        let lag = status.lag_secs().unwrap();
        assert!((9.0..12.0).contains(&lag), "{lag}");
        status.caught_up();
        assert_eq!(status.lag_secs(), Some(0.0));
        status.behind();
        assert!(status.lag_secs().unwrap() < 2.0, "caught up a moment ago");
        let view = status.view();
        assert_eq!(view["applied"]["insert"], 2);
        assert_eq!(view["applied"]["delete"], 0, "every kind is listed");
        assert!(view["lastEventAt"].is_string());
    }
}
