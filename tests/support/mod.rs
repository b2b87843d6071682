//! Shared harness for the integration tests: where the test servers are, and
//! a unique namespace per test so tests run in parallel without interfering.
//!
//! Servers come from the environment (`MONGO_URI`, `MEILI_HOST`,
//! `MEILI_MASTER_KEY`) so the same suite runs unchanged against real servers.
//! When they are not set, the file written by `scripts/test-servers start`
//! (`.test-servers/env` at the repository root) is read instead. A test asks
//! only for the servers it uses ([`mongo_uri`], [`meili`]), so e.g. the
//! Meilisearch contract suite needs no MongoDB.
#![allow(dead_code)]

/// The seeder of `meili-seed` (testkit/), compiled into the tests as well:
/// they seed in-process.
#[path = "../../testkit/seeder.rs"]
pub mod seeder;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The Meilisearch a test run talks to.
#[derive(Clone, Debug)]
pub struct MeiliServer {
    pub host: String,
    pub key: String,
}

impl MeiliServer {
    /// One request with this server's key: the status and the JSON body (`null` when there is none).
    pub async fn request(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut request = http
            .request(method, format!("{}{path}", self.host))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("Meilisearch answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("read the body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }
}

fn env_file() -> &'static HashMap<String, String> {
    static FILE: OnceLock<HashMap<String, String>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/.test-servers/env");
        let Ok(text) = std::fs::read_to_string(path) else {
            return HashMap::new();
        };
        text.lines()
            .filter_map(|line| {
                let line = line.trim().strip_prefix("export ").unwrap_or(line.trim());
                let (k, v) = line.split_once('=')?;
                Some((
                    k.to_string(),
                    v.trim_matches(|c| c == '"' || c == '\'').to_string(),
                ))
            })
            .collect()
    })
}

/// `name` from the environment, else from `.test-servers/env`; panics with a
/// hint naming the variables a test of this server needs when neither has it.
fn setting(name: &str, needed: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| env_file().get(name).cloned())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not set and .test-servers/env does not name it: \
                 run `scripts/test-servers start` (or set {needed})"
            )
        })
}

/// The MongoDB of the test run (`MONGO_URI`). Only tests that use MongoDB
/// ask for it, so a Meilisearch-only suite runs without one.
pub fn mongo_uri() -> &'static str {
    hide_driver_shutdown_panics();
    static URI: OnceLock<String> = OnceLock::new();
    URI.get_or_init(|| setting("MONGO_URI", "MONGO_URI"))
}

/// The Meilisearch of the test run (`MEILI_HOST`, `MEILI_MASTER_KEY`). Only
/// tests that use Meilisearch ask for it.
pub fn meili() -> &'static MeiliServer {
    hide_driver_shutdown_panics();
    static MEILI: OnceLock<MeiliServer> = OnceLock::new();
    MEILI.get_or_init(|| {
        let needed = "MEILI_HOST and MEILI_MASTER_KEY";
        MeiliServer {
            host: setting("MEILI_HOST", needed),
            key: setting("MEILI_MASTER_KEY", needed),
        }
    })
}

/// A name unique to this test process and call, usable as a MongoDB database
/// name and as a Meilisearch index-uid prefix (`[A-Za-z0-9_]`).
pub fn unique_name(tag: &str) -> String {
    hide_driver_shutdown_panics();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let tag: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(20)
        .collect();
    format!("t_{tag}_{}_{n}_{nanos:x}", std::process::id())
}

/// Keeps the MongoDB driver's panic at runtime shutdown out of a failed
/// test's output. When a test fails, its tokio runtime shuts down with the
/// test's clients still alive; a driver task that awaits one of its own
/// tasks (a connection being established, a pool worker) then finds it
/// cancelled and panics with `JoinError::Cancelled` (the driver unwraps the
/// join, `mongodb/src/runtime/join_handle.rs`). That panic says nothing about
/// the test — tokio catches it, nothing else fails — but it follows the real
/// failure in the output, as if it were one. The binaries avoid it with
/// `client.shutdown().immediate(true)`; a panicking test cannot, so a panic
/// hook drops exactly that panic and passes every other to the default hook.
/// Installed once per test process by the helpers nearly every test calls
/// first ([`unique_name`], [`mongo_uri`], [`meili`]).
pub fn hide_driver_shutdown_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_driver_shutdown_panic(info) {
                previous(info);
            }
        }));
    });
}

fn is_driver_shutdown_panic(info: &std::panic::PanicHookInfo<'_>) -> bool {
    let in_driver = info.location().is_some_and(|at| {
        let file = at.file().replace('\\', "/");
        file.contains("/mongodb-") && file.ends_with("/runtime/join_handle.rs")
    });
    let payload = info.payload();
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    in_driver && message.contains("JoinError::Cancelled")
}

pub mod chat_data;
pub mod cli;
pub mod counting_proxy;
pub mod faults;
pub mod follow;
pub mod job_timeline;
pub mod lease_harness;
pub mod librechat_double;
pub mod private_mongo;
pub mod server;
pub mod skip;
pub mod standin;
pub mod timing;
pub mod turn;
