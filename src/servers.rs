//! Connections to the two servers, built from the settings.
//!
//! Owns client construction (timeouts, application name) and the start-up
//! reachability check, after which an unreachable server is reported as
//! [`Unreachable`]: one line naming the server by its redacted address (never
//! by a secret) and the cause ("connection refused"), with the driver's own
//! detail (MongoDB's topology dump) at debug level only. The CLI maps it to
//! exit code 4. Rejected credentials (Meilisearch's master key, MongoDB's user
//! and password) are reported the same way but at once: retrying cannot help.
//!
//! The MongoDB URI was parsed by the driver in `config` (a malformed one is
//! bad configuration, exit 2); what parsing it here can still fail on is a
//! `mongodb+srv://` DNS lookup, which is an unreachable server.
//!
//! How long to keep trying is the caller's ([`backoff`]): `once`/`run`/`reindex`
//! wait for servers still starting beside them (a bounded retry,
//! [`crate::retry::server_startup`]); interactive commands (`plan`,
//! `status`, …) try once and give up within `mongo.connect_timeout`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use mongodb::bson::doc;
use mongodb::error::{Error as MongoError, ErrorKind};
use mongodb::event::sdam::SdamEvent;
use mongodb::event::EventHandler;
use mongodb::options::{ClientOptions, ServerAddress};

use crate::cause::{first_line, io_cause};
use crate::config::{redact_uri, MeiliSettings, MongoSettings};
use crate::meili::{Meili, MeiliError};
use crate::retry;

/// A server could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("{server} is unreachable: {reason}")]
pub struct Unreachable {
    /// e.g. `MongoDB at mongodb://***@db:27017/LibreChat`
    pub server: String,
    /// One line, e.g. `connection refused (db:27017)`.
    pub reason: String,
}

/// The retries of a reachability check: none for an interactive command
/// (`interactive`: its `mongo.connect_timeout`, see [`connect_mongo`]), else
/// [`retry::server_startup`], for a server that is still starting beside us.
fn backoff(interactive: Option<Duration>) -> ExponentialBuilder {
    let retries = interactive.map_or(retry::SERVER_STARTUP_ATTEMPTS - 1, |_| 0);
    retry::server_startup().with_max_times(retries)
}

/// MongoDB refused the credentials: the driver's authentication error, or
/// the server's `AuthenticationFailed` (code 18). Not retried.
fn is_auth_failure(error: &MongoError) -> bool {
    match error.kind.as_ref() {
        ErrorKind::Authentication { .. } => true,
        ErrorKind::Command(command) => command.code == 18,
        _ => false,
    }
}

/// The last failed heartbeat of the driver's monitor: why no server could be
/// selected, which the selection error itself only buries in a topology dump.
type LastHeartbeatFailure = Arc<Mutex<Option<(ServerAddress, MongoError)>>>;

/// The cause of a MongoDB error, in one line without the driver's framing.
fn mongo_cause(error: &MongoError) -> String {
    match error.kind.as_ref() {
        ErrorKind::Io(io) => io_cause(io),
        ErrorKind::DnsResolve { message, .. } => format!("host name lookup failed: {message}"),
        ErrorKind::Authentication { message, .. } => format!("authentication failed: {message}"),
        other => first_line(&other.to_string()),
    }
}

/// Why a MongoDB operation found no server: the monitor's last failure when
/// it saw one, else the error itself.
fn mongo_reason(error: &MongoError, last: &LastHeartbeatFailure, timeout: Duration) -> String {
    if is_auth_failure(error) {
        return format!(
            "the credentials were rejected ({}); check the user name, password and authSource in MONGO_URI",
            mongo_cause(error)
        );
    }
    if matches!(error.kind.as_ref(), ErrorKind::ServerSelection { .. }) {
        return match last.lock().expect("poisoned").clone() {
            Some((address, failure)) => format!("{} ({address})", mongo_cause(&failure)),
            None => format!(
                "no server answered within {} (mongo.connect_timeout)",
                humantime::format_duration(timeout)
            ),
        };
    }
    mongo_cause(error)
}

/// Connects to MongoDB and checks it answers `ping`; returns the database.
/// `interactive`: an operator's command at a terminal, which tries once,
/// bounded by this (`mongo.connect_timeout`), to learn at once that a server
/// is down; `None`: retried as [`retry::server_startup`] says.
pub async fn connect_mongo(
    settings: &MongoSettings,
    interactive: Option<Duration>,
) -> Result<(mongodb::Client, mongodb::Database), Unreachable> {
    let server = format!("MongoDB at {}", settings.uri.redacted());
    let last_failure = LastHeartbeatFailure::default();
    let timeout = settings.connect_timeout;
    let reason = |e: &MongoError| settings.uri.scrub(mongo_reason(e, &last_failure, timeout));
    let unreachable = |e: MongoError| {
        tracing::debug!(server = %server, error = %settings.uri.scrub(e.to_string()), "MongoDB unreachable (driver detail)");
        Unreachable {
            server: server.clone(),
            reason: reason(&e),
        }
    };
    // Validated by config; only a `mongodb+srv://` lookup can fail here.
    let parsed = ClientOptions::parse(settings.uri.expose()).await;
    let mut options = parsed.map_err(unreachable)?;
    // The connection string's `appName` wins (operators tell replicas apart
    // by it in MongoDB's logs and `currentOp`).
    let app_name = &mut options.app_name;
    app_name.get_or_insert_with(|| "meili-reconciler".into());
    options.connect_timeout = Some(timeout);
    options.server_selection_timeout = Some(timeout);
    let slot = last_failure.clone();
    options.sdam_event_handler = Some(EventHandler::callback(move |event| {
        if let SdamEvent::ServerHeartbeatFailed(failed) = event {
            *slot.lock().expect("poisoned") = Some((failed.server_address, failed.failure));
        }
    }));
    let client = mongodb::Client::with_options(options).map_err(unreachable)?;
    let db = client.database(&settings.database);
    let ping = || async { db.run_command(doc! { "ping": 1 }).await };
    ping.retry(backoff(interactive))
        .when(|e| !is_auth_failure(e))
        .notify(|e, delay| {
            tracing::warn!(server = %server, error = %reason(e), retry_in = ?delay, "MongoDB not reachable yet")
        })
        .await
        .map_err(unreachable)?;
    Ok((client, db))
}

/// Builds the Meilisearch client (no request is made).
pub fn meili_client(settings: &MeiliSettings) -> Meili {
    Meili::new(&settings.host, Some(settings.master_key.expose()))
        .expect("the master key was validated as a header value by config")
        .with_request_timeout(settings.request_timeout)
}

/// Checks Meilisearch answers `/health` and accepts the key (by listing one
/// task, which needs it). A rejected key is not retried. `interactive`: as
/// for [`connect_mongo`], also bounding the attempt at Meilisearch.
pub async fn check_meili(
    meili: &Meili,
    settings: &MeiliSettings,
    interactive: Option<Duration>,
) -> Result<(), Unreachable> {
    let server = format!("Meilisearch at {}", redact_uri(&settings.host));
    // Each probe tries once: the retry below is the only retry loop.
    let mut probe_client = meili.clone().with_retry_for(Duration::ZERO);
    if let Some(limit) = interactive {
        probe_client = probe_client.with_request_timeout(limit.min(settings.request_timeout));
    }
    let probe = || async {
        probe_client.health().await?;
        probe_client.tasks("limit=1").await.map(|_| ())
    };
    probe
        .retry(backoff(interactive))
        .when(|e: &MeiliError| matches!(e, MeiliError::Unreachable { .. }))
        .notify(|e, delay| {
            tracing::warn!(server = %server, error = %e, retry_in = ?delay, "Meilisearch not reachable yet")
        })
        .await
        .map_err(|e| {
            tracing::debug!(server = %server, error = %e, "Meilisearch unreachable");
            Unreachable {
                server: server.clone(),
                reason: match e {
                    MeiliError::Refused { code, .. } if code.contains("api_key") || code.contains("authorization") => {
                        format!("the master key was rejected ({code}); check MEILI_MASTER_KEY")
                    }
                    MeiliError::Unreachable { detail, .. } => first_line(&detail),
                    other => first_line(&other.to_string()),
                },
            }
        })
}
