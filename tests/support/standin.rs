//! Test-harness access to the Meilisearch stand-in's knobs (`/_standin/*`,
//! documented in `testkit/meili_standin/knobs.rs`), and private
//! stand-ins for tests that change global state (latency, injected failures,
//! outages, the request log, a small payload limit).
//!
//! Against a real Meilisearch there are no knobs: [`private_standin`] then
//! says the test is skipped ([`super::skip::skip`]) and returns `None`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A stand-in process of this test alone; killed on drop.
pub struct PrivateStandin {
    pub host: String,
    pub key: String,
    child: Child,
    /// Kept open so the stand-in never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl PrivateStandin {
    /// Knob helpers for this stand-in.
    pub fn knobs(&self) -> Knobs {
        knobs(&self.host, &self.key)
    }
}

impl Drop for PrivateStandin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Status code of a plain-HTTP GET of `path` on `host` (`http://h:p`), if it answered.
fn http_get_status(host: &str, path: &str, key: Option<&str>) -> Option<u16> {
    let authority = host.strip_prefix("http://")?.trim_end_matches('/');
    let mut stream = TcpStream::connect(authority).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let auth = key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Whether the configured Meilisearch is the stand-in (it has a request log).
pub fn shared_server_is_standin() -> bool {
    let server = super::meili();
    http_get_status(&server.host, "/_standin/requests", Some(&server.key)) == Some(200)
}

/// A fresh stand-in for this test (see [`private_standin_with`]).
pub fn private_standin() -> Option<PrivateStandin> {
    private_standin_with(&[])
}

/// A fresh stand-in started with `extra_args` (e.g. `["--payload-limit-bytes", "1024"]`),
/// or `None` (the test is skipped: [`super::skip::skip`]) when the suite runs
/// against a real Meilisearch.
pub fn private_standin_with(extra_args: &[&str]) -> Option<PrivateStandin> {
    if !shared_server_is_standin() {
        super::skip::skip(format_args!(
            "the configured Meilisearch ({}) is a real server, which has no /_standin knobs",
            super::meili().host
        ));
        return None;
    }
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let key = format!(
        "private-standin-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut child = Command::new(standin_binary())
        .args(["--listen", "127.0.0.1:0", "--master-key", &key])
        .args(extra_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start meili-standin");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("read the stand-in's first line");
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .filter(|addr| addr.contains(':'))
        .unwrap_or_else(|| panic!("unexpected first line from meili-standin: {line:?}"))
        .to_string();
    let host = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_get_status(&host, "/health", None) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "meili-standin at {host} did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(PrivateStandin {
        host,
        key,
        child,
        _stdout: stdout,
    })
}

/// The `meili-standin` binary (testkit/) beside the test binary: the test
/// runs as `target/<profile>/deps/suite-<hash>`, the stand-in is
/// `target/<profile>/meili-standin`. It is another package's binary, so
/// `cargo test` does not build it; `scripts/test` does, before the tests.
fn standin_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary is in target/<profile>/deps");
    let binary = profile_dir.join(format!("meili-standin{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} does not exist: build it with `cargo build --bin meili-standin` \
         (scripts/test does)",
        binary.display()
    );
    binary
}

/// Calls the knobs of the stand-in at `host`.
pub struct Knobs {
    host: String,
    key: String,
    http: reqwest::Client,
}

/// Knob helpers for the stand-in at `host` with master key `key`.
pub fn knobs(host: &str, key: &str) -> Knobs {
    Knobs {
        host: host.trim_end_matches('/').to_string(),
        key: key.to_string(),
        http: reqwest::Client::new(),
    }
}

impl Knobs {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}/_standin/{path}", self.host))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("call a stand-in knob");
        let status = response.status();
        let answer: Value = response.json().await.expect("knob answers JSON");
        assert!(
            status.is_success(),
            "knob {path} answered {status}: {answer}"
        );
        answer
    }

    /// Every task then takes `task_ms` to process.
    pub async fn set_latency(&self, task_ms: u64) -> Value {
        self.call(
            reqwest::Method::POST,
            "latency",
            Some(json!({ "taskMs": task_ms })),
        )
        .await
    }

    /// Each document of an addition then costs `micros` µs of processing.
    pub async fn set_per_document_cost(&self, micros: u64) -> Value {
        self.call(
            reqwest::Method::POST,
            "latency",
            Some(json!({ "perDocumentUs": micros })),
        )
        .await
    }

    /// Changes the benchmark model's settings (`POST /_standin/model`); the settings now.
    pub async fn set_model(&self, settings: Value) -> Value {
        self.call(reqwest::Method::POST, "model", Some(settings))
            .await
    }

    /// The benchmark model's settings (`GET /_standin/model`).
    pub async fn model(&self) -> Value {
        self.call(reqwest::Method::GET, "model", None).await
    }

    /// Holds document additions (`held`: they stay enqueued while later
    /// tasks are processed) or releases them.
    pub async fn hold_additions(&self, held: bool) -> Value {
        self.call(
            reqwest::Method::POST,
            "hold-additions",
            Some(json!({ "held": held })),
        )
        .await
    }

    /// The next `count` tasks processed fail with this error.
    pub async fn fail_next_tasks(
        &self,
        count: u64,
        code: &str,
        message: &str,
        error_type: &str,
    ) -> Value {
        let body = json!({ "count": count, "code": code, "message": message, "type": error_type });
        self.call(reqwest::Method::POST, "fail-next-tasks", Some(body))
            .await
    }

    /// Starts an outage: `"refuse"` (connections refused) or `"unavailable"` (503s) for `ms`.
    pub async fn outage(&self, mode: &str, ms: u64) -> Value {
        self.call(
            reqwest::Method::POST,
            "outage",
            Some(json!({ "mode": mode, "ms": ms })),
        )
        .await
    }

    /// The request log, oldest first.
    pub async fn requests(&self) -> Vec<Value> {
        match self.call(reqwest::Method::GET, "requests", None).await {
            Value::Array(entries) => entries,
            other => panic!("request log is not an array: {other}"),
        }
    }

    /// Waits until a batch of documents has been posted to the messages
    /// index, failing if the run (`run`) ends first.
    pub async fn await_messages_batch<T>(&self, run: &tokio::task::JoinHandle<T>) {
        self.await_documents_post("messages", run).await;
    }

    /// Waits until a batch of documents has been posted to an index whose
    /// uid ends with `index_suffix`, failing if the run (`run`) ends first.
    pub async fn await_documents_post<T>(
        &self,
        index_suffix: &str,
        run: &tokio::task::JoinHandle<T>,
    ) {
        let path_end = format!("{index_suffix}/documents");
        loop {
            assert!(
                !run.is_finished(),
                "the run ended before a batch was posted to the {index_suffix} index"
            );
            let sent = self.requests().await.iter().any(|r| {
                r["method"] == "POST" && r["path"].as_str().unwrap_or("").ends_with(&path_end)
            });
            if sent {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Empties the request log.
    pub async fn clear_requests(&self) -> Value {
        self.call(reqwest::Method::DELETE, "requests", None).await
    }

    /// Drops all indexes, tasks, the request log and knob settings.
    pub async fn reset(&self) -> Value {
        self.call(reqwest::Method::POST, "reset", None).await
    }
}
