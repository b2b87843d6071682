//! Which way `run` keeps the index in step, and why — the one rule that
//! `run`'s log line, `/status` and `status` all show.
//!
//! - **follow**: MongoDB serves change streams and `serve.follow` is on:
//!   the lease owner applies every change within about a second and
//!   reconciles every `serve.interval` besides.
//! - **interval**: a reconciliation every `serve.interval`, nothing in
//!   between. Either the operator chose it (`serve.follow = false`:
//!   logged at INFO) or the server serves no change
//!   streams. The latter is logged as a WARN: the operator left follow mode
//!   on (the default) and gets a slower guarantee, so it must not pass
//!   silently; the line says why, from the server's answer, and what would
//!   give follow mode. Setting `serve.follow = false` makes it a choice and
//!   the line an INFO.

use std::time::Duration;

use mongodb::Database;
use serde::Serialize;
use serde_json::{json, Value};

pub use super::stream::NoChangeStreams;
pub(crate) use super::stream::Refusal;
use super::stream::{self, StreamError};

/// Where the operator reads how to get follow mode.
const FOLLOW_MODE_DOCS: &str = "docs/install.md#follow-mode";

/// The two ways `run` keeps the index in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Mode {
    /// Change streams, applied within about a second.
    Follow,
    /// A reconciliation every `serve.interval`, nothing in between.
    Interval,
}

impl Mode {
    /// `follow` or `interval`, as `/status` shows it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Follow => "follow",
            Mode::Interval => "interval",
        }
    }
}

/// The mode and why, as `/status` and `status --json` show it (`mode`,
/// `modeReason`, `followNeeds`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeView {
    pub(crate) mode: Mode,
    /// Why this mode, in a sentence (the server's answer included).
    pub(crate) mode_reason: String,
    /// In interval mode, what would give follow mode; `null` in follow mode.
    pub(crate) follow_needs: Option<String>,
    /// The operator chose it (logged at INFO), or the server imposed it (WARN).
    #[serde(skip)]
    pub(crate) chosen: bool,
}

impl ModeView {
    /// Follow mode: the server serves change streams.
    pub fn follow() -> Self {
        ModeView {
            mode: Mode::Follow,
            mode_reason: "MongoDB serves change streams: the lease owner applies every insert, edit and \
                          delete to Meilisearch within about a second, and reconciles every serve.interval \
                          besides"
                .into(),
            follow_needs: None,
            chosen: true,
        }
    }

    /// Follow mode, though the server could not be asked yet.
    fn follow_unconfirmed(error: &StreamError) -> Self {
        ModeView {
            mode_reason: format!(
                "serve.follow is on; whether MongoDB serves change streams could not be told yet \
                 ({error}): the lease owner finds out when it starts following"
            ),
            ..ModeView::follow()
        }
    }

    /// Interval mode by `serve.follow = false`.
    pub(crate) fn follow_off() -> Self {
        ModeView {
            mode: Mode::Interval,
            mode_reason: "serve.follow is false: reconciling every serve.interval, nothing in between"
                .into(),
            follow_needs: Some(format!(
                "serve.follow = true (RECONCILER__SERVE__FOLLOW=true, the default) and a MongoDB that serves \
                 change streams, i.e. a replica set ({FOLLOW_MODE_DOCS})"
            )),
            chosen: true,
        }
    }

    /// What `status` shows under `sync.plan_only`, where `run` only plans.
    fn plan_only() -> Self {
        ModeView {
            mode: Mode::Interval,
            mode_reason: "sync.plan_only is set: `run` prints the plan and exits, writing nothing"
                .into(),
            follow_needs: Some("sync.plan_only = false (the default)".into()),
            chosen: true,
        }
    }

    /// Interval mode because the server serves no change streams.
    pub fn no_change_streams(refused: &NoChangeStreams) -> Self {
        let answer = &refused.answer;
        let (why, needs) = match refused.refusal {
            Refusal::Standalone => (
                "it is a standalone server, and change streams need a replica set".to_string(),
                format!(
                    "make MongoDB a replica set, even a one-member one: start mongod with --replSet rs0 \
                     and run rs.initiate() once ({FOLLOW_MODE_DOCS})"
                ),
            ),
            Refusal::NotImplemented => (
                "this server does not implement them".to_string(),
                format!(
                    "a MongoDB replica set (MongoDB Atlas, or mongod --replSet; {FOLLOW_MODE_DOCS}); \
                     on this server interval mode is the only mode"
                ),
            ),
            Refusal::NotPermitted => (
                "the MongoDB user may not open a change stream on the database".to_string(),
                "the changeStream and find actions on the database for the user of MONGO_URI \
                 (the built-in read role has both)"
                    .to_string(),
            ),
            Refusal::Other => (
                "the server refused to open one".to_string(),
                format!("a MongoDB replica set that serves change streams ({FOLLOW_MODE_DOCS})"),
            ),
        };
        ModeView {
            mode: Mode::Interval,
            mode_reason: format!(
                "MongoDB does not serve change streams here: {why}; the server answered: {answer}"
            ),
            follow_needs: Some(needs),
            chosen: false,
        }
    }

    /// The mode `run` takes with these settings on `db` (asks the server
    /// whether it serves change streams only when follow mode is wanted).
    pub async fn of_server(db: &Database, follow: bool, plan_only: bool) -> Self {
        if plan_only {
            return ModeView::plan_only();
        }
        if !follow {
            return ModeView::follow_off();
        }
        match stream::probe(db).await {
            Ok(()) => ModeView::follow(),
            Err(StreamError::Unsupported(refused)) => ModeView::no_change_streams(&refused),
            Err(other) => ModeView::follow_unconfirmed(&other),
        }
    }

    /// `mode`, `modeReason` and `followNeeds`, as `/status` and `status
    /// --json` carry them: all `null` while `run` has not decided yet.
    pub fn status_fields(mode: Option<&ModeView>) -> serde_json::Map<String, Value> {
        let fields = json!({
            "mode": mode.map(|m| m.mode),
            "modeReason": mode.map(|m| &m.mode_reason),
            "followNeeds": mode.and_then(|m| m.follow_needs.as_ref()),
        });
        let Value::Object(fields) = fields else {
            unreachable!("json! builds an object")
        };
        fields
    }

    /// The one log line of this mode (`interval`: `serve.interval`).
    pub(crate) fn log(&self, interval: Duration) {
        let (level, line) = self.log_line(interval);
        let mode = self.mode.as_str();
        if level == tracing::Level::WARN {
            tracing::warn!(mode, "{line}");
        } else {
            tracing::info!(mode, "{line}");
        }
    }

    /// That line and its level: WARN when the server imposed interval
    /// mode, INFO otherwise.
    pub fn log_line(&self, interval: Duration) -> (tracing::Level, String) {
        let interval = humantime::format_duration(interval);
        let reason = &self.mode_reason;
        let needs = self.follow_needs.as_deref().unwrap_or("-");
        match self.mode {
            Mode::Follow => (tracing::Level::INFO, format!("follow mode: {reason}")),
            Mode::Interval if self.chosen => (
                tracing::Level::INFO,
                format!(
                    "interval mode: {reason}; serve.interval is {interval}. For follow mode: {needs}"
                ),
            ),
            Mode::Interval => (
                tracing::Level::WARN,
                format!(
                    "interval mode: {reason}. This service applies changes at each reconciliation, \
                     every serve.interval ({interval}), not within about a second. For follow mode: \
                     {needs}. To choose interval mode without this warning: serve.follow = false \
                     (RECONCILER__SERVE__FOLLOW=false)"
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_refusal_is_explained_with_what_gives_follow_mode() {
        let standalone = NoChangeStreams::from_server(
            40573,
            "The $changeStream stage is only supported on replica sets",
            "The $changeStream stage is only supported on replica sets (code 40573 IllegalOperation)"
                .into(),
        );
        assert_eq!(standalone.refusal, Refusal::Standalone);
        let view = ModeView::no_change_streams(&standalone);
        assert_eq!(view.mode, Mode::Interval);
        assert!(!view.chosen);
        assert!(view.mode_reason.contains("standalone server"), "{view}");
        assert!(view.mode_reason.contains("code 40573"), "{view}");
        let needs = view.follow_needs.as_deref().unwrap();
        assert!(
            needs.contains("--replSet rs0") && needs.contains("rs.initiate()"),
            "{needs}"
        );
        assert!(needs.contains(FOLLOW_MODE_DOCS), "{needs}");

        let documentdb = NoChangeStreams::from_server(
            115,
            "Stage $changeStream is not supported yet in native pipeline",
            "Stage $changeStream is not supported yet in native pipeline (code 115 CommandNotSupported)"
                .into(),
        );
        assert_eq!(documentdb.refusal, Refusal::NotImplemented);
        let view = ModeView::no_change_streams(&documentdb);
        assert!(
            view.mode_reason.contains("does not implement them"),
            "{view}"
        );

        let denied = NoChangeStreams::from_server(13, "not authorized", "not authorized".into());
        assert_eq!(denied.refusal, Refusal::NotPermitted);

        assert_eq!(ModeView::follow().follow_needs, None);
        assert!(ModeView::follow_off().chosen);
        let json = serde_json::to_value(ModeView::follow_off()).unwrap();
        assert_eq!(json["mode"], "interval");
        assert!(json["modeReason"]
            .as_str()
            .unwrap()
            .contains("serve.follow"));
        assert!(json.get("chosen").is_none(), "{json}");
        let undecided = ModeView::status_fields(None);
        let mut keys: Vec<&str> = undecided.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["followNeeds", "mode", "modeReason"]);
        assert!(undecided.values().all(serde_json::Value::is_null));
    }
}
