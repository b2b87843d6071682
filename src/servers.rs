//! Connections to the two servers, built from the settings.
//!
//! Owns client construction (timeouts, application name) and the start-up
//! reachability check: a bounded retry with backoff (`backon`), after which an
//! unreachable server is reported as [`Unreachable`], naming the server by its
//! redacted address — never by a secret. The CLI maps it to exit code 4.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use mongodb::bson::doc;
use mongodb::options::ClientOptions;

use crate::config::{redact_uri, MeiliSettings, MongoSettings};
use crate::meili::{Meili, MeiliError};

/// A server could not be reached within the start-up retries.
#[derive(Debug, thiserror::Error)]
#[error("{server} is unreachable: {reason}")]
pub struct Unreachable {
    /// e.g. `MongoDB at mongodb://***@db:27017/LibreChat`
    pub server: String,
    pub reason: String,
}

/// How long start-up keeps retrying a server before giving up.
#[derive(Clone, Debug)]
pub struct StartupRetry {
    pub attempts: usize,
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl Default for StartupRetry {
    /// Five attempts over about 15 s: long enough for a server that is still
    /// starting beside us, short enough for a deploy job to fail fast.
    fn default() -> Self {
        StartupRetry {
            attempts: 5,
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl StartupRetry {
    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.first_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.attempts.saturating_sub(1))
            .with_jitter()
    }
}

/// Removes `secret` from `text` wherever a driver echoed it back.
fn scrub(text: String, secrets: &[&str]) -> String {
    secrets
        .iter()
        .filter(|s| s.len() >= 4)
        .fold(text, |t, s| t.replace(s, "***"))
}

fn uri_password(uri: &str) -> Option<&str> {
    let rest = uri.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    userinfo.split_once(':').map(|(_, p)| p)
}

/// Connects to MongoDB and checks it answers `ping`; returns the database.
pub async fn connect_mongo(
    settings: &MongoSettings,
    retry: &StartupRetry,
) -> Result<(mongodb::Client, mongodb::Database), Unreachable> {
    let server = format!("MongoDB at {}", settings.uri.redacted());
    let secrets: Vec<&str> = uri_password(settings.uri.expose()).into_iter().collect();
    let unreachable = |e: mongodb::error::Error| Unreachable {
        server: server.clone(),
        reason: scrub(e.to_string(), &secrets),
    };
    let mut options = ClientOptions::parse(settings.uri.expose())
        .await
        .map_err(unreachable)?;
    options.app_name = Some("meili-reconciler".into());
    options.connect_timeout = Some(settings.connect_timeout);
    options.server_selection_timeout = Some(settings.connect_timeout);
    let client = mongodb::Client::with_options(options).map_err(unreachable)?;
    let db = client.database(&settings.database);
    let ping = || async { db.run_command(doc! { "ping": 1 }).await };
    ping.retry(retry.backoff())
        .notify(|e, delay| {
            tracing::warn!(
                server = %server,
                error = %scrub(e.to_string(), &secrets),
                retry_in = ?delay,
                "MongoDB not reachable yet"
            )
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
/// task, which needs it). A rejected key is not retried.
pub async fn check_meili(
    meili: &Meili,
    settings: &MeiliSettings,
    retry: &StartupRetry,
) -> Result<(), Unreachable> {
    let server = format!("Meilisearch at {}", redact_uri(&settings.host));
    // Each probe tries once: the start-up retry below is the only retry loop.
    let probe_client = meili.clone().with_retry_for(Duration::ZERO);
    let probe = || async {
        probe_client.health().await?;
        probe_client.tasks("limit=1").await.map(|_| ())
    };
    probe
        .retry(retry.backoff())
        .when(|e: &MeiliError| matches!(e, MeiliError::Unreachable { .. }))
        .notify(|e, delay| {
            tracing::warn!(server = %server, error = %e, retry_in = ?delay, "Meilisearch not reachable yet")
        })
        .await
        .map_err(|e| Unreachable {
            server: server.clone(),
            reason: match e {
                MeiliError::Refused { code, .. } if code.contains("api_key") || code.contains("authorization") => {
                    format!("the master key was rejected ({code}); check MEILI_MASTER_KEY")
                }
                other => other.to_string(),
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_scrubs_uri_passwords() {
        assert_eq!(
            uri_password("mongodb://u:s3cret@h:27017/db"),
            Some("s3cret")
        );
        assert_eq!(uri_password("mongodb://h:27017/db"), None);
        assert_eq!(
            scrub("auth failed for s3cret".into(), &["s3cret"]),
            "auth failed for ***"
        );
    }
}
