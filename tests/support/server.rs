//! What the test run's MongoDB can do, for tests that need more than CRUD:
//! a real MongoDB-compatible server may lack it (DocumentDB has no change
//! streams, no `configureFailPoint`, no collection validators, and speaks
//! only TLS). A test that needs what the server lacks is skipped, saying so
//! ([`super::skip::skip`]); it never passes without running.
#![allow(dead_code)]

use mongodb::error::{Error, ErrorKind};
use mongodb::options::{ClientOptions, Tls};

/// A server's error in one line: its message and code (`message (code 115
/// CommandNotSupported)`), without the raw reply the driver's `Display`
/// appends.
pub fn short_error(error: &Error) -> String {
    match &*error.kind {
        ErrorKind::Command(command) => format!(
            "{} (code {} {})",
            command.message, command.code, command.code_name
        ),
        _ => error.to_string(),
    }
}

/// Whether `error` is the server saying it does not support what was asked
/// (code 115 `CommandNotSupported`, or a message saying so).
pub fn is_unsupported(error: &Error) -> bool {
    match &*error.kind {
        ErrorKind::Command(command) => {
            command.code == 115 || command.message.to_lowercase().contains("not supported")
        }
        _ => false,
    }
}

/// Why the shared MongoDB serves no change streams, or `None` if it does
/// (a change stream opened on a scratch collection, once per test binary).
pub async fn no_change_streams() -> Option<String> {
    static ANSWER: tokio::sync::OnceCell<Option<String>> = tokio::sync::OnceCell::const_new();
    ANSWER
        .get_or_init(|| async {
            let client = mongodb::Client::with_uri_str(super::mongo_uri())
                .await
                .expect("MONGO_URI parses");
            let probe = client
                .database(&super::unique_name("change_stream_probe"))
                .collection::<mongodb::bson::Document>("probe");
            let answer = match probe.watch().await {
                Ok(_) => None,
                Err(error) => Some(format!(
                    "the test MongoDB serves no change streams: {}",
                    short_error(&error)
                )),
            };
            client.shutdown().immediate(true).await;
            answer
        })
        .await
        .clone()
}

/// Skips the calling test (saying why) when the shared MongoDB serves no
/// change streams; `true` when it did, so the test returns.
pub async fn skip_without_change_streams() -> bool {
    match no_change_streams().await {
        Some(why) => {
            super::skip::skip(why);
            true
        }
        None => false,
    }
}

/// Whether the shared MongoDB is reached over TLS (`tls=true` in
/// `MONGO_URI`): a test proxy that reads commands off the wire cannot.
pub async fn mongo_uses_tls() -> bool {
    let options = ClientOptions::parse(super::mongo_uri())
        .await
        .expect("MONGO_URI parses");
    matches!(options.tls, Some(Tls::Enabled(_)))
}

/// `uri` (credentials and `authSource` it has dropped) with
/// `user:password@` and `authSource`.
pub fn uri_with_credentials(uri: &str, user: &str, password: &str, auth_db: &str) -> String {
    let (scheme, rest) = uri.split_once("://").expect("a URI with a scheme");
    let (before_options, options) = rest.split_once('?').unwrap_or((rest, ""));
    let hosts_and_path = match before_options.rfind('@') {
        Some(at) => &before_options[at + 1..],
        None => before_options,
    };
    let mut options: Vec<&str> = options
        .split('&')
        .filter(|o| !o.is_empty() && !o.to_ascii_lowercase().starts_with("authsource="))
        .collect();
    let auth_source = format!("authSource={auth_db}");
    options.push(&auth_source);
    format!(
        "{scheme}://{user}:{password}@{hosts_and_path}?{}",
        options.join("&")
    )
}
