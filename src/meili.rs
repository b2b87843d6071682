//! Meilisearch access for the reconciler, over `meilisearch-sdk`'s HTTP
//! transport: index lookup and (re)creation, settings, document writes and
//! id paging, tasks, swaps.
//!
//! Requests go over reqwest directly, answers are read by the SDK's
//! `parse_response`: the SDK's own client streams a body through an 8 MiB
//! buffer it allocates and zeroes per request, a second copy of every
//! document batch ([`Meili::add_documents_ndjson`]); our request hands hyper
//! the batch's own bytes.
//!
//! Every call goes through one place ([`Meili::call`], with
//! [`Meili::classify`] mapping errors) that retries transient
//! failures (connection refused, timeouts, 5xx, 429) as
//! [`crate::retry::meili_calls`] says, turns 4xx answers into errors naming Meilisearch's
//! error code, and checks the lease [`Guard`] before each attempt of a write.
//! Answers are kept as JSON (`serde_json::Value`) so that settings are compared
//! whole and unknown task types or error codes survive intact. The master key
//! lives only in the client's default headers (marked sensitive): it never
//! appears in an error or a log line.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, Retryable};
use bytes::Bytes;
use meilisearch_sdk::errors::{Error as SdkError, ErrorType};
use meilisearch_sdk::request::parse_response;
use meilisearch_sdk::reqwest::qualified_version;
use reqwest::Method;
use serde::Serialize;
use serde_json::{json, Value};

use crate::lease::{Guard, LeaseLost};

/// How long transient failures are retried, by default, before a call gives up.
const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(300);

/// How long one HTTP answer may take, by default.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A Meilisearch call's result.
type Result<T, E = MeiliError> = std::result::Result<T, E>;

/// Why a Meilisearch call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MeiliError {
    /// Connection refused, timed out, or 5xx answers for longer than the
    /// retry budget.
    #[error("Meilisearch at {host} is unreachable ({what}): {detail}")]
    Unreachable {
        host: String,
        what: String,
        detail: String,
    },
    /// A 4xx answer: the request itself is wrong (or the key is).
    #[error("Meilisearch refused {what}: {code}: {message}")]
    Refused {
        what: String,
        code: String,
        message: String,
    },
    /// An asynchronous task ended in failure.
    #[error("Meilisearch task {uid} ({what}) failed: {}: {}", .error.code, .error.message)]
    TaskFailed {
        uid: u64,
        what: String,
        error: TaskError,
    },
    /// An answer we could not make sense of.
    #[error("unexpected answer from Meilisearch to {what}: {detail}")]
    Unexpected { what: String, detail: String },
    /// The lease was lost: no further write may be made.
    #[error(transparent)]
    LeaseLost(#[from] LeaseLost),
}

/// An index as Meilisearch describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexInfo {
    pub primary_key: Option<String>,
}

/// The error of a failed task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskError {
    pub(crate) code: String,
    pub(crate) message: String,
}

/// How an asynchronous task ended.
#[derive(Clone, Debug)]
pub(crate) struct TaskOutcome {
    pub(crate) uid: u64,
    /// `None` when it succeeded.
    pub(crate) error: Option<TaskError>,
    /// The task object as Meilisearch returned it.
    pub(crate) raw: Value,
}

impl TaskOutcome {
    /// Fails with [`MeiliError::TaskFailed`] unless the task succeeded.
    pub(crate) fn into_result(self, what: &str) -> Result<TaskOutcome> {
        let (uid, what) = (self.uid, what.to_string());
        match self.error.clone() {
            Some(error) => Err(MeiliError::TaskFailed { uid, what, error }),
            None => Ok(self),
        }
    }
}

/// A request's body: its content type and bytes (a retry sends the same).
type Body = Option<(&'static str, Bytes)>;

/// `body` as a JSON request body.
fn json_body(body: &impl Serialize) -> Body {
    let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
    Some(("application/json", bytes.into()))
}

/// A Meilisearch server. Cheap to clone. Its `Debug` shows the host (without
/// credentials) and the timings, never the client: it prints its headers,
/// the master key among them.
#[derive(Clone)]
pub struct Meili {
    http: reqwest::Client,
    host: String,
    /// `host` with any `user:password@` hidden: the only form errors show.
    shown_host: String,
    retry_for: Duration,
    /// Longest wait for one HTTP answer; a slower one counts as transient.
    request_timeout: Duration,
    /// First interval between polls of a task (doubles up to `poll_max`).
    poll_min: Duration,
    poll_max: Duration,
    /// Calls this client (and its clones) sent again after a transient failure.
    retries: Arc<AtomicU64>,
}

impl std::fmt::Debug for Meili {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meili")
            .field("host", &self.shown_host)
            .field("retry_for", &self.retry_for)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Meili {
    /// A client for `host` (e.g. `http://127.0.0.1:7700`) using `key` as the
    /// bearer token.
    pub fn new(host: &str, key: Option<&str>) -> Result<Meili> {
        let key = key.filter(|k| !k.is_empty());
        let Some(http) = client(key) else {
            let detail = "the master key is not a valid HTTP header value";
            return Err(unexpected("client setup", detail));
        };
        let host = host.trim_end_matches('/').to_string();
        Ok(Meili {
            http,
            shown_host: crate::config::redact_uri(&host),
            host,
            retry_for: DEFAULT_RETRY_FOR,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            poll_min: Duration::from_millis(10),
            poll_max: Duration::from_millis(250),
            retries: Arc::default(),
        })
    }

    /// For tests: calls sent again after a transient failure (an outage, a
    /// timeout) by this client and its clones so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// How long transient failures are retried before a call fails with
    /// [`MeiliError::Unreachable`].
    pub fn with_retry_for(mut self, retry_for: Duration) -> Meili {
        self.retry_for = retry_for;
        self
    }

    /// The longest wait for one HTTP answer before it is retried.
    pub(crate) fn with_request_timeout(mut self, request_timeout: Duration) -> Meili {
        self.request_timeout = request_timeout;
        self
    }

    /// How a task is polled until it ends: first after `min`, the interval
    /// doubling up to `max` (10 ms … 250 ms by default). Follow mode waits
    /// for small tasks one after another and each poll is a cheap read, so
    /// it uses a shorter `max`: the delay between a task ending and its end
    /// being seen is at most `max`.
    pub(crate) fn with_task_polling(mut self, min: Duration, max: Duration) -> Meili {
        self.poll_min = min.max(Duration::from_millis(1));
        self.poll_max = max.max(self.poll_min);
        self
    }

    /// One attempt at `GET /health`: `Ok(status)` (normally `available`).
    pub(crate) async fn health(&self) -> Result<String> {
        let once = self.clone().with_retry_for(Duration::ZERO);
        let answer = once.get("health", "/health").await?;
        Ok(answer["status"].as_str().unwrap_or("unknown").to_string())
    }

    /// The index, or `None` when it does not exist.
    pub async fn index(&self, uid: &str) -> Result<Option<IndexInfo>> {
        match self.get("get index", &format!("/indexes/{uid}")).await {
            Ok(v) => {
                let primary_key = v["primaryKey"].as_str().map(str::to_string);
                Ok(Some(IndexInfo { primary_key }))
            }
            Err(MeiliError::Refused { code, .. }) if code == "index_not_found" => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Enqueues the creation of `uid` with `primary_key`; returns the task uid.
    pub async fn create_index(&self, uid: &str, primary_key: &str, guard: &Guard) -> Result<u64> {
        let body = json_body(&json!({ "uid": uid, "primaryKey": primary_key }));
        self.enqueue("create index", Method::POST, "/indexes", body, guard)
            .await
    }

    /// Enqueues the deletion of `uid`; returns the task uid.
    pub async fn delete_index(&self, uid: &str, guard: &Guard) -> Result<u64> {
        let path = format!("/indexes/{uid}");
        self.enqueue("delete index", Method::DELETE, &path, None, guard)
            .await
    }

    /// The whole settings object of `uid`.
    pub async fn settings(&self, uid: &str) -> Result<Value> {
        self.get("get settings", &format!("/indexes/{uid}/settings"))
            .await
    }

    /// Enqueues a settings update (only the keys given); returns the task uid.
    pub async fn patch_settings(&self, uid: &str, settings: &Value, guard: &Guard) -> Result<u64> {
        let path = format!("/indexes/{uid}/settings");
        let body = json_body(settings);
        self.enqueue("update settings", Method::PATCH, &path, body, guard)
            .await
    }

    /// Enqueues an add-or-replace of already serialized NDJSON documents;
    /// returns the task uid. `ndjson` is sent as it is, never copied (a
    /// retry sends the same bytes again).
    pub async fn add_documents_ndjson(
        &self,
        uid: &str,
        ndjson: Bytes,
        guard: &Guard,
    ) -> Result<u64> {
        let path = format!("/indexes/{uid}/documents");
        let body = Some(("application/x-ndjson", ndjson));
        self.enqueue("add documents", Method::POST, &path, body, guard)
            .await
    }

    /// Enqueues the deletion of documents by id; returns the task uid.
    pub async fn delete_documents(&self, uid: &str, ids: &[String], guard: &Guard) -> Result<u64> {
        let path = format!("/indexes/{uid}/documents/delete-batch");
        let body = json_body(&ids);
        self.enqueue("delete documents", Method::POST, &path, body, guard)
            .await
    }

    /// One page of document ids (only the primary-key field is fetched), and
    /// the index's total number of documents.
    pub async fn document_ids(
        &self,
        uid: &str,
        primary_key: &str,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<String>, u64)> {
        let page = self.page("list document ids", uid, offset, limit, Some(primary_key));
        let (docs, total) = page.await?;
        let ids = docs.iter().filter_map(|d| id_string(&d[primary_key]));
        Ok((ids.collect(), total))
    }

    /// One page of documents with only `fields` (a field a document lacks
    /// stays absent), in Meilisearch's listing order.
    pub(crate) async fn documents_with_fields(
        &self,
        uid: &str,
        fields: &[&str],
        offset: u64,
        limit: u64,
    ) -> Result<Vec<Value>> {
        let fields = fields.join(",");
        let page = self.page("get documents", uid, offset, limit, Some(&fields));
        Ok(page.await?.0)
    }

    /// For tests: full documents, a page of them.
    pub async fn documents_page(&self, uid: &str, offset: u64, limit: u64) -> Result<Vec<Value>> {
        let page = self.page("get documents", uid, offset, limit, None);
        Ok(page.await?.0)
    }

    /// The number of documents in the index (from its stats).
    pub async fn document_count(&self, uid: &str) -> Result<u64> {
        let path = format!("/indexes/{uid}/stats");
        let v = self.get("index stats", &path).await?;
        Ok(v["numberOfDocuments"].as_u64().unwrap_or(0))
    }

    /// Enqueues an atomic swap of two indexes; returns the task uid.
    pub(crate) async fn swap_indexes(&self, a: &str, b: &str, guard: &Guard) -> Result<u64> {
        let body = json_body(&json!([{ "indexes": [a, b] }]));
        self.enqueue("swap indexes", Method::POST, "/swap-indexes", body, guard)
            .await
    }

    /// `GET /tasks?{query}` as Meilisearch answers it (for diagnostics and tests).
    pub async fn tasks(&self, query: &str) -> Result<Value> {
        self.get("list tasks", &format!("/tasks?{query}")).await
    }

    /// Polls task `uid` until it ends (interval growing from 10 ms to 250 ms,
    /// or as [`Meili::with_task_polling`] set),
    /// stopping at once if the guard is cancelled.
    pub(crate) async fn wait_for_task(&self, uid: u64, guard: &Guard) -> Result<TaskOutcome> {
        let path = format!("/tasks/{uid}");
        let mut intervals = crate::retry::task_polling(self.poll_min, self.poll_max).build();
        loop {
            let task = cancellable(guard, self.get("get task", &path)).await??;
            if let Some(outcome) = task_outcome(uid, task) {
                return Ok(outcome);
            }
            let interval = intervals.next().unwrap_or(self.poll_max);
            cancellable(guard, tokio::time::sleep(interval)).await?;
        }
    }

    /// Enqueues nothing; waits for `uid` and fails unless it succeeded.
    pub async fn wait_ok(&self, uid: u64, what: &str, guard: &Guard) -> Result<()> {
        self.wait_for_task(uid, guard).await?.into_result(what)?;
        Ok(())
    }

    /// `GET path`: a read, never guarded.
    async fn get(&self, what: &str, path: &str) -> Result<Value> {
        self.call(what, Method::GET, path, None, 200, None).await
    }

    /// A write Meilisearch answers by enqueueing a task, guarded; returns the
    /// task uid.
    async fn enqueue(
        &self,
        what: &str,
        method: Method,
        path: &str,
        body: Body,
        guard: &Guard,
    ) -> Result<u64> {
        let v = self
            .call(what, method, path, body, 202, Some(guard))
            .await?;
        task_uid(what, &v)
    }

    /// A page of a document listing (with only `fields`, comma-separated,
    /// when given): its documents and the index's total.
    async fn page(
        &self,
        what: &str,
        uid: &str,
        offset: u64,
        limit: u64,
        fields: Option<&str>,
    ) -> Result<(Vec<Value>, u64)> {
        let mut path = format!("/indexes/{uid}/documents?offset={offset}&limit={limit}");
        path.extend(fields.map(|fields| format!("&fields={fields}")));
        let v = self.get(what, &path).await?;
        let docs = v["results"].as_array().cloned().unwrap_or_default();
        Ok((docs, v["total"].as_u64().unwrap_or(0)))
    }

    /// One request, retried until it succeeds or fails for good. Each
    /// attempt first checks the guard, if any (so no write is sent once the
    /// lease is lost), is answered within the request timeout (or fails as
    /// transient) and read as the SDK reads an answer; transient failures
    /// are retried as [`crate::retry::meili_calls`] says.
    async fn call(
        &self,
        what: &str,
        method: Method,
        path: &str,
        body: Body,
        expected: u16,
        guard: Option<&Guard>,
    ) -> Result<Value> {
        let url = format!("{}{path}", self.host);
        let attempt = || async {
            guard.map_or(Ok(()), Guard::check)?;
            let mut request = self.http.request(method.clone(), &url);
            if let Some((content_type, bytes)) = body.clone() {
                request = request.header(reqwest::header::CONTENT_TYPE, content_type);
                request = request.body(bytes);
            }
            let exchange = async {
                let response = request.send().await?;
                let status = response.status().as_u16();
                let text = response.text().await?;
                let text = if text.is_empty() { "null".into() } else { text };
                parse_response::<Value>(status, expected, &text, url.clone())
            };
            match tokio::time::timeout(self.request_timeout, exchange).await {
                Ok(answer) => answer.map_err(|e| self.classify(what, e)),
                Err(_) => {
                    let detail = format!("no answer within {:?}", self.request_timeout);
                    Err(self.unreachable(what, detail))
                }
            }
        };
        attempt
            .retry(crate::retry::meili_calls(self.retry_for))
            .when(|e| matches!(e, MeiliError::Unreachable { .. }))
            .notify(|error, wait| {
                self.retries.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %error, retry_in = ?wait, "retrying {what}");
            })
            .await
    }

    /// A transient failure of `what`, naming the host without credentials.
    fn unreachable(&self, what: &str, detail: String) -> MeiliError {
        MeiliError::Unreachable {
            host: self.shown_host.clone(),
            what: what.to_string(),
            detail,
        }
    }

    /// Maps an SDK error to ours. Transient failures become `Unreachable`;
    /// the retry loop retries exactly those.
    fn classify(&self, what: &str, error: SdkError) -> MeiliError {
        match error {
            SdkError::HttpError(e) => self.unreachable(what, http_cause(&e)),
            SdkError::MeilisearchCommunication(e) if matches!(e.status_code, 408 | 429 | 500..) => {
                self.unreachable(what, format!("HTTP {}", e.status_code))
            }
            SdkError::MeilisearchCommunication(e) => MeiliError::Refused {
                what: what.to_string(),
                code: format!("http_{}", e.status_code),
                message: e.message.unwrap_or_default(),
            },
            SdkError::Meilisearch(e) => {
                let code = serde_json::to_value(&e.error_code).ok();
                let code = code.as_ref().and_then(Value::as_str).unwrap_or("unknown");
                match e.error_type {
                    ErrorType::InvalidRequest | ErrorType::Auth => MeiliError::Refused {
                        what: what.to_string(),
                        code: known_code(code, &e.error_message),
                        message: e.error_message,
                    },
                    _ => self.unreachable(what, format!("{code}: {}", e.error_message)),
                }
            }
            SdkError::ParseError(_) => unexpected(what, "unparsable answer"),
            other => unexpected(what, &other.to_string()),
        }
    }
}

/// Runs `work` unless the guard is cancelled first, which ends it with why
/// (the lease lost, or shutdown).
async fn cancellable<T>(guard: &Guard, work: impl Future<Output = T>) -> Result<T> {
    tokio::select! {
        done = work => Ok(done),
        _ = guard.cancelled() => Err(guard.check().err().unwrap_or(LeaseLost::ShuttingDown).into()),
    }
}

/// How task `uid` ended, or `None` while it has not.
fn task_outcome(uid: u64, raw: Value) -> Option<TaskOutcome> {
    let code_unless_given = match raw["status"].as_str()? {
        "succeeded" => None,
        "failed" => Some("unknown"),
        "canceled" => Some("canceled"),
        _ => return None,
    };
    let given = &raw["error"];
    let error = code_unless_given.map(|fallback| TaskError {
        code: given["code"].as_str().unwrap_or(fallback).to_string(),
        message: given["message"].as_str().unwrap_or("").to_string(),
    });
    Some(TaskOutcome { uid, error, raw })
}

/// A reqwest client sending what the SDK's does (its user agent, the key as
/// a bearer token); `None` when the key is no valid header value.
fn client(key: Option<&str>) -> Option<reqwest::Client> {
    use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, USER_AGENT};
    let mut headers = HeaderMap::new();
    let agent = HeaderValue::from_str(&qualified_version()).ok()?;
    headers.insert(USER_AGENT, agent);
    if let Some(key) = key {
        let mut bearer = HeaderValue::from_str(&format!("Bearer {key}")).ok()?;
        bearer.set_sensitive(true);
        headers.insert(AUTHORIZATION, bearer);
    }
    let client = reqwest::Client::builder().default_headers(headers);
    client.build().ok()
}

/// The SDK maps codes it does not know to `unknown`; recover the ones we act
/// on from the message so reports stay precise.
fn known_code(code: &str, message: &str) -> String {
    if code == "unknown" && message.contains("already has a primary key") {
        return "index_primary_key_already_exists".into();
    }
    code.to_string()
}

/// An answer we could not make sense of.
fn unexpected(what: &str, detail: &str) -> MeiliError {
    MeiliError::Unexpected {
        what: what.to_string(),
        detail: detail.to_string(),
    }
}

fn task_uid(what: &str, v: &Value) -> Result<u64> {
    v["taskUid"]
        .as_u64()
        .or_else(|| v["uid"].as_u64())
        .ok_or_else(|| unexpected(what, "no taskUid in the answer"))
}

/// Why an HTTP exchange failed, as an operator says it ("connection refused"):
/// reqwest's own message names only the URL, the cause is in its sources.
fn http_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut source = Some(error);
    while let Some(current) = source {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return crate::cause::io_cause(io);
        }
        source = current.source();
    }
    error.to_string()
}

/// A document id as a string (Meilisearch accepts integer ids too).
pub(crate) fn id_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn errors_never_show_credentials_in_the_host() {
        let meili = Meili::new("http://admin:s3cret-pw@127.0.0.1:1", Some("the-master-key"))
            .unwrap()
            .with_retry_for(Duration::ZERO);
        let error = meili.health().await.unwrap_err().to_string();
        assert!(matches!(
            meili.health().await,
            Err(MeiliError::Unreachable { .. })
        ));
        assert!(error.contains("127.0.0.1:1"), "{error}");
        assert!(error.contains("connection refused"), "{error}");
        for secret in ["s3cret-pw", "the-master-key"] {
            assert!(!error.contains(secret), "{secret} leaked: {error}");
        }
        assert_eq!(meili.shown_host, "http://***@127.0.0.1:1");
    }

    #[tokio::test]
    async fn a_failed_document_batch_and_the_client_itself_never_show_the_key() {
        let meili = Meili::new("http://127.0.0.1:1", Some("the-master-key"))
            .unwrap()
            .with_retry_for(Duration::ZERO);
        let error = meili
            .add_documents_ndjson("idx", Bytes::from_static(b"{}\n"), &Guard::unfenced())
            .await
            .unwrap_err();
        assert!(matches!(error, MeiliError::Unreachable { .. }), "{error:?}");
        let shown = format!("{error} {error:?} {meili:?}");
        assert!(shown.contains("127.0.0.1:1"), "{shown}");
        assert!(!shown.contains("the-master-key"), "the key leaked: {shown}");
    }
}
