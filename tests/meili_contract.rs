//! Contract of the Meilisearch stand-in: every behaviour meili-reconciler
//! relies on, exercised through `meilisearch-sdk` (plus raw HTTP where the SDK
//! hides what is asserted: status codes, error codes it does not know, task
//! `details`). The suite passes unchanged against a real Meilisearch v1 from
//! 1.12.3 (the version LibreChat's compose file pins) to 1.50: where an answer
//! differs between versions, the test asks `GET /version` and asserts what
//! that version documents ([`Version`]). The knob tests need a private
//! stand-in and skip (with a printed reason) when the configured server is a
//! real one.

use crate::support;

use std::time::{Duration, Instant};

use meilisearch_sdk::client::{Client, SwapIndexes};
use meilisearch_sdk::documents::{DocumentDeletionQuery, DocumentsQuery};
use meilisearch_sdk::errors::{Error, ErrorCode};
use meilisearch_sdk::indexes::{Index, IndexesQuery};
use meilisearch_sdk::settings::Settings;
use meilisearch_sdk::task_info::TaskInfo;
use meilisearch_sdk::tasks::{Task, TasksSearchQuery};
use serde_json::{json, Value};
use support::standin::{private_standin, private_standin_with, PrivateStandin};

/// A Meilisearch server seen through the SDK and through raw HTTP.
struct Meili {
    client: Client,
    server: support::MeiliServer,
    http: reqwest::Client,
}

impl Meili {
    fn at(host: &str, key: &str) -> Self {
        Self {
            client: Client::new(host, Some(key)).expect("meilisearch client"),
            server: support::MeiliServer {
                host: host.trim_end_matches('/').to_string(),
                key: key.to_string(),
            },
            http: reqwest::Client::new(),
        }
    }

    /// The shared test server.
    fn shared() -> Self {
        let server = support::meili();
        Self::at(&server.host, &server.key)
    }

    fn private(standin: &PrivateStandin) -> Self {
        Self::at(&standin.host, &standin.key)
    }

    /// A handle on a fresh, uniquely named index (not created yet).
    fn fresh_index(&self, tag: &str) -> Index {
        self.client.index(support::unique_name(tag))
    }

    /// Sends a raw request with the master key; status and JSON body (`null` if none).
    async fn raw(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.server.request(&self.http, method, path, body).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.raw(reqwest::Method::GET, path, None).await
    }

    /// Waits for a task through the SDK, then returns it as the server shows it.
    async fn wait(&self, info: TaskInfo) -> Value {
        let uid = info.task_uid;
        self.client
            .wait_for_task(
                info,
                Some(Duration::from_millis(20)),
                Some(Duration::from_secs(60)),
            )
            .await
            .expect("task finishes");
        let (status, task) = self.get(&format!("/tasks/{uid}")).await;
        assert_eq!(status, 200, "GET /tasks/{uid}: {task}");
        task
    }

    /// Creates an index with a primary key and waits for it.
    async fn create(&self, index: &Index, primary_key: &str) {
        let task = self
            .wait(
                self.client
                    .create_index(&index.uid, Some(primary_key))
                    .await
                    .expect("create index"),
            )
            .await;
        assert_eq!(task["status"], "succeeded", "{task}");
    }

    /// Adds documents (add or replace) and waits; the finished task.
    async fn add(&self, index: &Index, documents: &[Value]) -> Value {
        self.wait(
            index
                .add_documents(documents, None)
                .await
                .expect("enqueue addition"),
        )
        .await
    }

    async fn set_filterable(&self, index: &Index, attributes: &[&str]) {
        let settings = Settings::new().with_filterable_attributes(attributes);
        let task = self
            .wait(index.set_settings(&settings).await.expect("patch settings"))
            .await;
        assert_eq!(task["status"], "succeeded", "{task}");
    }

    async fn documents(&self, index: &Index) -> Vec<Value> {
        let mut query = DocumentsQuery::new(index);
        query.with_limit(1000);
        index
            .get_documents_with::<Value>(&query)
            .await
            .expect("get documents")
            .results
    }

    /// Deletes indexes at the end of a test (best effort).
    async fn drop_indexes(&self, uids: &[&str]) {
        for uid in uids {
            if let Ok(info) = self.client.index(*uid).delete().await {
                let _ = self
                    .client
                    .wait_for_task(info, None, Some(Duration::from_secs(60)))
                    .await;
            }
        }
    }
}

/// The error code of an SDK error from the server.
fn code(error: &Error) -> Option<ErrorCode> {
    match error {
        Error::Meilisearch(e) => Some(e.error_code.clone()),
        _ => None,
    }
}

fn ids(documents: &[Value], field: &str) -> Vec<String> {
    documents
        .iter()
        .map(|d| match &d[field] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// Seconds of an ISO 8601 `PT…S` duration as Meilisearch writes it.
fn duration_secs(iso: &Value) -> f64 {
    let text = iso.as_str().expect("duration string");
    let seconds = text
        .strip_prefix("PT")
        .and_then(|s| s.strip_suffix('S'))
        .expect("PT…S duration");
    match seconds.split_once('M') {
        Some((minutes, rest)) => {
            minutes.parse::<f64>().unwrap() * 60.0 + rest.parse::<f64>().unwrap()
        }
        None => seconds.parse().unwrap(),
    }
}

/// A Meilisearch version (`pkgVersion` of `GET /version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u64, u64, u64);

impl Version {
    /// v1.13 stabilized AI-powered search (every index's settings carry
    /// `embedders`, without the `vectorStore` experimental feature) and added
    /// the embedding counts to an index's stats, with the document database's
    /// sizes: `numberOfEmbeddings`, `numberOfEmbeddedDocuments`,
    /// `rawDocumentDbSize`, `avgDocumentSize`.
    const AI_SEARCH_STABLE: Version = Version(1, 13, 0);
}

impl Meili {
    /// The server's version, as `GET /version` reports it.
    async fn version(&self) -> Version {
        let (status, body) = self.get("/version").await;
        assert_eq!(status, 200, "GET /version: {body}");
        let text = body["pkgVersion"].as_str().expect("pkgVersion");
        let numbers: Vec<u64> = text
            .split(['.', '-'])
            .take(3)
            .map(|n| n.parse().unwrap_or_else(|_| panic!("pkgVersion {text}")))
            .collect();
        match numbers[..] {
            [major, minor, patch] => Version(major, minor, patch),
            _ => panic!("pkgVersion {text} is not MAJOR.MINOR.PATCH"),
        }
    }
}

// ---------------------------------------------------------------- server

#[tokio::test]
async fn health_and_version_answer() {
    let meili = Meili::shared();
    assert_eq!(
        meili.client.health().await.expect("health").status,
        "available"
    );
    let version = meili.client.get_version().await.expect("version");
    assert!(!version.pkg_version.is_empty());
}

#[tokio::test]
async fn missing_key_is_401_and_wrong_key_is_403() {
    let meili = Meili::shared();
    let http = reqwest::Client::new();

    let missing = http
        .get(format!("{}/indexes", meili.server.host))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 401);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["code"], "missing_authorization_header");
    assert_eq!(body["type"], "auth");
    assert!(body["message"].is_string() && body["link"].is_string());

    let wrong = http
        .get(format!("{}/indexes", meili.server.host))
        .bearer_auth("not-the-key")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 403);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["code"], "invalid_api_key");
    assert_eq!(body["type"], "auth");

    let sdk = Client::new(meili.server.host.as_str(), Some("not-the-key")).unwrap();
    let error = sdk.get_indexes().await.expect_err("wrong key is refused");
    assert_eq!(code(&error), Some(ErrorCode::InvalidApiKey));

    let open = http
        .get(format!("{}/health", meili.server.host))
        .send()
        .await
        .unwrap();
    assert_eq!(open.status().as_u16(), 200, "/health needs no key");
}

// ---------------------------------------------------------------- indexes

#[tokio::test]
async fn index_create_get_list_stats_delete() {
    let meili = Meili::shared();
    let index = meili.fresh_index("lifecycle");
    let info = meili
        .client
        .create_index(&index.uid, Some("messageId"))
        .await
        .unwrap();
    assert_eq!(info.status, "enqueued");
    let task = meili.wait(info).await;
    assert_eq!(task["type"], "indexCreation");
    assert_eq!(task["details"]["primaryKey"], "messageId");

    let fetched = meili.client.get_index(&index.uid).await.expect("get index");
    assert_eq!(fetched.primary_key.as_deref(), Some("messageId"));
    assert!(fetched.created_at.is_some() && fetched.updated_at.is_some());

    let mut query = IndexesQuery::new(&meili.client);
    query.with_limit(1000);
    let listed = meili
        .client
        .list_all_indexes_with(&query)
        .await
        .expect("list");
    assert!(listed.results.iter().any(|i| i.uid == index.uid));
    let (status, raw) = meili.get("/indexes?limit=1&offset=0").await;
    assert_eq!(status, 200);
    assert_eq!(raw["limit"], 1);
    assert_eq!(raw["offset"], 0);
    assert!(raw["total"].as_u64().unwrap() >= 1);

    meili
        .add(
            &index,
            &[
                json!({"messageId": "m1", "user": "u1"}),
                json!({"messageId": "m2"}),
            ],
        )
        .await;
    // What the service reads of an index's stats (`numberOfDocuments`, raw
    // JSON) is there on every version.
    let (status, raw) = meili.get(&format!("/indexes/{}/stats", index.uid)).await;
    assert_eq!(status, 200, "{raw}");
    assert_eq!(raw["numberOfDocuments"], 2, "{raw}");
    assert_eq!(raw["isIndexing"], false, "{raw}");
    assert_eq!(raw["fieldDistribution"], json!({"messageId": 2, "user": 1}));
    const SINCE_1_13: [&str; 4] = [
        "numberOfEmbeddings",
        "numberOfEmbeddedDocuments",
        "rawDocumentDbSize",
        "avgDocumentSize",
    ];
    let version = meili.version().await;
    if version >= Version::AI_SEARCH_STABLE {
        for field in SINCE_1_13 {
            assert!(raw[field].is_u64(), "{version:?} lacks {field}: {raw}");
        }
        let stats = index.get_stats().await.expect("stats");
        assert_eq!(stats.number_of_documents, 2);
        assert!(!stats.is_indexing);
        assert_eq!(stats.number_of_embedded_documents, 0);
        assert_eq!(stats.field_distribution.get("messageId"), Some(&2));
        assert_eq!(stats.field_distribution.get("user"), Some(&1));
    } else {
        for field in SINCE_1_13 {
            assert!(raw.get(field).is_none(), "{version:?} sends {field}: {raw}");
        }
        // The SDK's stats type requires those fields: on this version it
        // cannot parse the answer, which is why the service reads stats as
        // JSON (`Meili::document_count`).
        let error = index
            .get_stats()
            .await
            .expect_err("meilisearch-sdk 0.33 requires numberOfEmbeddedDocuments");
        assert!(matches!(error, Error::ParseError(_)), "{error:?}");
    }

    let uid = index.uid.clone();
    let task = meili.wait(index.delete().await.unwrap()).await;
    assert_eq!(task["type"], "indexDeletion");
    assert_eq!(task["details"]["deletedDocuments"], 2);
    let error = meili.client.get_index(&uid).await.expect_err("deleted");
    assert_eq!(code(&error), Some(ErrorCode::IndexNotFound));
    let (status, body) = meili.get(&format!("/indexes/{uid}")).await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "index_not_found");
}

#[tokio::test]
async fn creating_an_existing_index_fails_the_task() {
    let meili = Meili::shared();
    let index = meili.fresh_index("exists");
    meili.create(&index, "id").await;
    let info = meili
        .client
        .create_index(&index.uid, Some("id"))
        .await
        .unwrap();
    let outcome = meili
        .client
        .wait_for_task(info, None, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    match outcome {
        Task::Failed { content } => {
            assert_eq!(content.error.error_code, ErrorCode::IndexAlreadyExists)
        }
        other => panic!("expected a failed task, got {other:?}"),
    }
    let (status, body) = meili
        .raw(
            reqwest::Method::POST,
            "/indexes",
            Some(json!({"uid": "bad uid!"})),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "invalid_index_uid");
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn primary_key_cannot_change_once_documents_exist() {
    let meili = Meili::shared();
    let index = meili.fresh_index("pk");
    meili.create(&index, "messageId").await;
    meili
        .add(&index, &[json!({"messageId": "m1", "user": "u1"})])
        .await;

    let mut updater = meili.client.index(&index.uid);
    let task = meili
        .wait(updater.set_primary_key("user").await.unwrap())
        .await;
    assert_eq!(task["type"], "indexUpdate");
    assert_eq!(task["status"], "failed");
    assert_eq!(task["error"]["code"], "index_primary_key_already_exists");

    let info = index
        .add_documents(&[json!({"messageId": "m2", "user": "u2"})], Some("user"))
        .await
        .unwrap();
    let task = meili.wait(info).await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["error"]["code"], "index_primary_key_already_exists");
    assert_eq!(task["details"]["indexedDocuments"], 0);

    // An index without documents (and without a primary key) accepts one.
    let empty = meili.fresh_index("pk_empty");
    let created = meili
        .wait(
            meili
                .client
                .create_index(&empty.uid, None::<&str>)
                .await
                .unwrap(),
        )
        .await;
    assert_eq!(created["status"], "succeeded");
    let mut empty_updater = meili.client.index(&empty.uid);
    let task = meili
        .wait(
            empty_updater
                .set_primary_key("conversationId")
                .await
                .unwrap(),
        )
        .await;
    assert_eq!(task["status"], "succeeded", "{task}");
    let fetched = meili.client.get_index(&empty.uid).await.unwrap();
    assert_eq!(fetched.primary_key.as_deref(), Some("conversationId"));
    meili.drop_indexes(&[&index.uid, &empty.uid]).await;
}

#[tokio::test]
async fn document_addition_creates_the_index_and_infers_the_primary_key() {
    let meili = Meili::shared();
    let index = meili.fresh_index("implicit");
    let task = meili
        .add(&index, &[json!({"docId": "a", "text": "x"})])
        .await;
    assert_eq!(task["status"], "succeeded", "{task}");
    let fetched = meili
        .client
        .get_index(&index.uid)
        .await
        .expect("implicitly created");
    assert_eq!(fetched.primary_key.as_deref(), Some("docId"));

    let ambiguous = meili.fresh_index("ambiguous");
    let task = meili
        .add(&ambiguous, &[json!({"aid": "1", "bid": "2"})])
        .await;
    assert_eq!(task["status"], "failed");
    assert_eq!(
        task["error"]["code"],
        "index_primary_key_multiple_candidates_found"
    );
    let fetched = meili
        .client
        .get_index(&ambiguous.uid)
        .await
        .expect("created even though the task failed");
    assert_eq!(fetched.primary_key, None);

    let no_candidate = meili.fresh_index("nocandidate");
    let task = meili.add(&no_candidate, &[json!({"name": "x"})]).await;
    assert_eq!(task["status"], "failed");
    assert_eq!(
        task["error"]["code"],
        "index_primary_key_no_candidate_found"
    );
    meili
        .drop_indexes(&[&index.uid, &ambiguous.uid, &no_candidate.uid])
        .await;
}

// ---------------------------------------------------------------- documents

#[tokio::test]
async fn json_and_ndjson_additions_are_indexed() {
    let meili = Meili::shared();
    let index = meili.fresh_index("ndjson");
    meili.create(&index, "messageId").await;
    let task = meili
        .add(
            &index,
            &[
                json!({"messageId": "m1", "user": "u1"}),
                json!({"messageId": "m2", "user": "u2"}),
            ],
        )
        .await;
    assert_eq!(task["type"], "documentAdditionOrUpdate");
    assert_eq!(
        task["details"],
        json!({"receivedDocuments": 2, "indexedDocuments": 2})
    );

    let ndjson = "{\"messageId\":\"m3\",\"user\":\"u1\"}\n{\"messageId\":\"m4\",\"user\":\"u3\"}\n";
    let info = index
        .add_documents_ndjson(futures::io::Cursor::new(ndjson.as_bytes().to_vec()), None)
        .await
        .unwrap();
    let task = meili.wait(info).await;
    assert_eq!(task["status"], "succeeded", "{task}");
    assert_eq!(task["details"]["indexedDocuments"], 2);
    assert_eq!(
        ids(&meili.documents(&index).await, "messageId"),
        ["m1", "m2", "m3", "m4"]
    );

    let malformed = index
        .add_or_replace_unchecked_payload(
            futures::io::Cursor::new(b"[{\"messageId\": ".to_vec()),
            "application/json",
            None,
        )
        .await
        .expect_err("malformed JSON is refused");
    assert_eq!(code(&malformed), Some(ErrorCode::MalformedPayload));
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn replace_drops_fields_and_update_merges_them() {
    let meili = Meili::shared();
    let index = meili.fresh_index("replace");
    meili.create(&index, "id").await;
    meili
        .add(&index, &[json!({"id": 1, "a": "first", "b": "kept?"})])
        .await;
    meili.add(&index, &[json!({"id": 1, "a": "second"})]).await;
    let doc: Value = index.get_document("1").await.unwrap();
    assert_eq!(
        doc,
        json!({"id": 1, "a": "second"}),
        "POST replaces the whole document"
    );

    let task = meili
        .wait(
            index
                .add_or_update(&[json!({"id": 1, "c": "merged"})], None)
                .await
                .unwrap(),
        )
        .await;
    assert_eq!(task["status"], "succeeded");
    let doc: Value = index.get_document("1").await.unwrap();
    assert_eq!(doc["a"], "second", "PUT keeps fields it does not name");
    assert_eq!(doc["c"], "merged");

    let error = index
        .get_document::<Value>("nope")
        .await
        .expect_err("missing document");
    assert_eq!(code(&error), Some(ErrorCode::DocumentNotFound));
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn documents_are_paged_and_projected() {
    let meili = Meili::shared();
    let index = meili.fresh_index("paging");
    meili.create(&index, "id").await;
    let docs: Vec<Value> = (0..5)
        .map(|n| json!({"id": format!("d{n}"), "user": "u", "text": "t"}))
        .collect();
    meili.add(&index, &docs).await;

    let mut query = DocumentsQuery::new(&index);
    query
        .with_limit(2)
        .with_offset(1)
        .with_fields(["id", "user"]);
    let page = index.get_documents_with::<Value>(&query).await.unwrap();
    assert_eq!(page.total, 5);
    assert_eq!(page.limit, 2);
    assert_eq!(page.offset, 1);
    assert_eq!(
        page.results,
        vec![
            json!({"id": "d1", "user": "u"}),
            json!({"id": "d2", "user": "u"})
        ]
    );

    let (status, raw) = meili
        .get(&format!(
            "/indexes/{}/documents?limit=2&offset=4&fields=id",
            index.uid
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(raw["results"], json!([{"id": "d4"}]));
    assert_eq!(raw["total"], 5);
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn fetch_filters_on_a_filterable_user() {
    let meili = Meili::shared();
    let index = meili.fresh_index("fetch");
    meili.create(&index, "id").await;
    meili.set_filterable(&index, &["user"]).await;
    meili
        .add(
            &index,
            &[
                json!({"id": "a", "user": "u1"}),
                json!({"id": "b", "user": "u2"}),
                json!({"id": "c", "user": "u1"}),
            ],
        )
        .await;

    let mut query = DocumentsQuery::new(&index);
    query.with_filter("user = \"u1\"").with_limit(10);
    let found = index.get_documents_with::<Value>(&query).await.unwrap();
    assert_eq!(ids(&found.results, "id"), ["a", "c"]);
    assert_eq!(found.total, 2);

    let (status, raw) = meili
        .raw(
            reqwest::Method::POST,
            &format!("/indexes/{}/documents/fetch", index.uid),
            Some(json!({"filter": "user = u1 OR user = u2", "fields": ["id"], "limit": 10})),
        )
        .await;
    assert_eq!(status, 200, "{raw}");
    assert_eq!(
        raw["results"],
        json!([{"id": "a"}, {"id": "b"}, {"id": "c"}])
    );
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn filters_on_non_filterable_attributes_are_refused() {
    let meili = Meili::shared();
    let index = meili.fresh_index("nofilter");
    meili.create(&index, "id").await;
    meili.set_filterable(&index, &["user"]).await;
    meili
        .add(&index, &[json!({"id": "a", "user": "u1", "text": "x"})])
        .await;

    let mut query = DocumentsQuery::new(&index);
    query.with_filter("text = x");
    let error = index
        .get_documents_with::<Value>(&query)
        .await
        .expect_err("text is not filterable");
    assert_eq!(code(&error), Some(ErrorCode::InvalidDocumentFilter));

    let error = index
        .search()
        .with_filter("text = x")
        .execute::<Value>()
        .await
        .expect_err("text is not filterable");
    assert_eq!(code(&error), Some(ErrorCode::InvalidSearchFilter));

    let mut deletion = DocumentDeletionQuery::new(&index);
    deletion.with_filter("text = x");
    let task = meili
        .wait(index.delete_documents_with(&deletion).await.unwrap())
        .await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["error"]["code"], "invalid_document_filter");
    assert_eq!(meili.documents(&index).await.len(), 1);
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn deletions_by_id_batch_filter_and_all() {
    let meili = Meili::shared();
    let index = meili.fresh_index("deletions");
    meili.create(&index, "id").await;
    meili.set_filterable(&index, &["user"]).await;
    let docs: Vec<Value> = (1..=6)
        .map(|n| json!({"id": n.to_string(), "user": if n % 2 == 0 { "even" } else { "odd" }}))
        .collect();
    meili.add(&index, &docs).await;

    let task = meili.wait(index.delete_document("1").await.unwrap()).await;
    assert_eq!(task["type"], "documentDeletion");
    assert_eq!(task["details"]["providedIds"], 1);
    assert_eq!(task["details"]["deletedDocuments"], 1);

    let task = meili
        .wait(
            index
                .delete_documents(&["2", "does-not-exist"])
                .await
                .unwrap(),
        )
        .await;
    assert_eq!(task["details"]["providedIds"], 2);
    assert_eq!(task["details"]["deletedDocuments"], 1);

    let mut query = DocumentDeletionQuery::new(&index);
    query.with_filter("user = even");
    let task = meili
        .wait(index.delete_documents_with(&query).await.unwrap())
        .await;
    assert_eq!(task["status"], "succeeded", "{task}");
    assert_eq!(task["details"]["deletedDocuments"], 2, "documents 4 and 6");
    assert!(task["details"]["originalFilter"]
        .as_str()
        .unwrap()
        .contains("user = even"));
    assert_eq!(ids(&meili.documents(&index).await, "id"), ["3", "5"]);

    let task = meili
        .wait(index.delete_all_documents().await.unwrap())
        .await;
    assert_eq!(task["type"], "documentDeletion");
    assert_eq!(task["details"]["deletedDocuments"], 2);
    assert!(meili.documents(&index).await.is_empty());
    meili.drop_indexes(&[&index.uid]).await;
}

// ---------------------------------------------------------------- tasks

#[tokio::test]
async fn an_invalid_document_id_fails_the_whole_payload() {
    let meili = Meili::shared();
    let index = meili.fresh_index("badid");
    meili.create(&index, "messageId").await;
    let info = index
        .add_documents(
            &[
                json!({"messageId": "ok-1", "user": "u"}),
                json!({"messageId": "bad|id", "user": "u"}),
            ],
            None,
        )
        .await
        .unwrap();
    assert_eq!(info.status, "enqueued");
    let task = meili.wait(info).await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["type"], "documentAdditionOrUpdate");
    assert_eq!(
        task["details"],
        json!({"receivedDocuments": 2, "indexedDocuments": 0})
    );
    let error = &task["error"];
    assert_eq!(error["code"], "invalid_document_id");
    assert_eq!(error["type"], "invalid_request");
    assert!(error["message"].as_str().unwrap().contains("bad|id"));
    assert!(error["link"]
        .as_str()
        .unwrap()
        .ends_with("invalid_document_id"));
    for field in ["enqueuedAt", "startedAt", "finishedAt", "duration"] {
        assert!(task[field].is_string(), "{field} in {task}");
    }
    assert!(task["canceledBy"].is_null());
    assert!(
        meili.documents(&index).await.is_empty(),
        "no document of the payload is indexed"
    );

    let too_long = "a".repeat(512);
    let task = meili.add(&index, &[json!({"messageId": too_long})]).await;
    assert_eq!(task["error"]["code"], "invalid_document_id");

    let task = meili
        .add(&index, &[json!({"user": "u", "text": "no id"})])
        .await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["error"]["code"], "missing_document_id");
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn tasks_are_listed_newest_first_with_filters() {
    let meili = Meili::shared();
    let index = meili.fresh_index("tasklist");
    let created = meili
        .wait(
            meili
                .client
                .create_index(&index.uid, Some("id"))
                .await
                .unwrap(),
        )
        .await;
    let failed = meili.add(&index, &[json!({"id": "bad id"})]).await;
    let added = meili.add(&index, &[json!({"id": "good"})]).await;
    let uid = |task: &Value| task["uid"].as_u64().unwrap() as u32;
    let (created, failed, added) = (uid(&created), uid(&failed), uid(&added));

    let mut query = TasksSearchQuery::new(&meili.client);
    query
        .with_index_uids([index.uid.as_str()])
        .with_statuses(["failed"]);
    let found = meili.client.get_tasks_with(&query).await.unwrap();
    assert_eq!(
        found.results.iter().map(Task::get_uid).collect::<Vec<_>>(),
        [failed]
    );
    assert_eq!(found.total, 1);

    let mut query = TasksSearchQuery::new(&meili.client);
    query
        .with_index_uids([index.uid.as_str()])
        .with_types(["documentAdditionOrUpdate"]);
    let found = meili.client.get_tasks_with(&query).await.unwrap();
    assert_eq!(
        found.results.iter().map(Task::get_uid).collect::<Vec<_>>(),
        [added, failed]
    );

    let mut query = TasksSearchQuery::new(&meili.client);
    query.with_index_uids([index.uid.as_str()]).with_limit(1);
    let page = meili.client.get_tasks_with(&query).await.unwrap();
    assert_eq!(
        page.results.iter().map(Task::get_uid).collect::<Vec<_>>(),
        [added]
    );
    assert_eq!(page.total, 3);
    assert_eq!(page.limit, 1);
    assert_eq!(page.next, Some(failed));

    let mut query = TasksSearchQuery::new(&meili.client);
    query
        .with_index_uids([index.uid.as_str()])
        .with_from(failed)
        .with_limit(5);
    let page = meili.client.get_tasks_with(&query).await.unwrap();
    assert_eq!(
        page.results.iter().map(Task::get_uid).collect::<Vec<_>>(),
        [failed, created]
    );
    assert_eq!(page.from, Some(failed));
    assert_eq!(page.next, None);

    let (status, body) = meili.get(&format!("/tasks?uids={added}")).await;
    assert_eq!(status, 200);
    assert_eq!(body["results"][0]["uid"], added);

    let (status, body) = meili.get("/tasks?statuses=done").await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "invalid_task_statuses");
    let (status, body) = meili.get("/tasks/4294967295").await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "task_not_found");
    meili.drop_indexes(&[&index.uid]).await;
}

// ---------------------------------------------------------------- settings

/// The keys of a whole settings object on every supported version;
/// `embedders` joins them from v1.13 ([`Version::AI_SEARCH_STABLE`]).
const SETTINGS_KEYS: [&str; 19] = [
    "displayedAttributes",
    "searchableAttributes",
    "filterableAttributes",
    "sortableAttributes",
    "rankingRules",
    "stopWords",
    "nonSeparatorTokens",
    "separatorTokens",
    "dictionary",
    "synonyms",
    "distinctAttribute",
    "proximityPrecision",
    "typoTolerance",
    "faceting",
    "pagination",
    "searchCutoffMs",
    "localizedAttributes",
    "facetSearch",
    "prefixSearch",
];

#[tokio::test]
async fn settings_are_read_whole_and_patched() {
    let meili = Meili::shared();
    let index = meili.fresh_index("settings");
    meili.create(&index, "id").await;

    let (status, settings) = meili.get(&format!("/indexes/{}/settings", index.uid)).await;
    assert_eq!(status, 200);
    for key in SETTINGS_KEYS {
        assert!(
            settings.get(key).is_some(),
            "settings lack {key}: {settings}"
        );
    }
    // Before v1.13 `embedders` is there only with the `vectorStore`
    // experimental feature on (off unless an operator turns it on).
    let version = meili.version().await;
    if version >= Version::AI_SEARCH_STABLE {
        assert_eq!(settings["embedders"], json!({}), "{version:?}: {settings}");
    } else {
        let (status, features) = meili.get("/experimental-features").await;
        assert_eq!(status, 200, "{features}");
        let vector_store = features["vectorStore"].as_bool().expect("vectorStore");
        assert_eq!(
            settings.get("embedders").is_some(),
            vector_store,
            "{version:?} with vectorStore {vector_store}: {settings}"
        );
    }
    assert_eq!(settings["filterableAttributes"], json!([]));
    assert_eq!(settings["displayedAttributes"], json!(["*"]));
    assert_eq!(settings["pagination"]["maxTotalHits"], 1000);
    index
        .get_settings()
        .await
        .expect("the SDK parses the whole object");

    let patch = Settings::new().with_filterable_attributes(["user"]);
    let task = meili.wait(index.set_settings(&patch).await.unwrap()).await;
    assert_eq!(task["type"], "settingsUpdate");
    assert_eq!(task["details"], json!({"filterableAttributes": ["user"]}));
    assert_eq!(index.get_filterable_attributes().await.unwrap(), ["user"]);

    // Changing nothing still enqueues a task, which succeeds.
    let info = index
        .set_settings(&patch)
        .await
        .expect("a no-op patch is accepted");
    assert_eq!(info.status, "enqueued");
    let task = meili.wait(info).await;
    assert_eq!(task["status"], "succeeded");

    let task = meili
        .wait(
            index
                .set_filterable_attributes(["user", "conversationId"])
                .await
                .unwrap(),
        )
        .await;
    // A set, as the service compares it (`reconcile::settings`): 1.12 lists
    // it sorted, later versions in the order given.
    let mut listed: Vec<&str> = task["details"]["filterableAttributes"]
        .as_array()
        .unwrap_or_else(|| panic!("{task}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, ["conversationId", "user"], "{task}");
    let task = meili
        .wait(index.reset_filterable_attributes().await.unwrap())
        .await;
    assert!(task["details"]["filterableAttributes"].is_null());
    assert!(index.get_filterable_attributes().await.unwrap().is_empty());

    let task = meili
        .wait(index.set_sortable_attributes(["createdAt"]).await.unwrap())
        .await;
    assert_eq!(task["status"], "succeeded");
    assert_eq!(
        index.get_sortable_attributes().await.unwrap(),
        ["createdAt"]
    );

    let (status, body) = meili
        .raw(
            reqwest::Method::PATCH,
            &format!("/indexes/{}/settings", index.uid),
            Some(json!({"filterableAttribute": ["user"]})),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "bad_request");
    meili.drop_indexes(&[&index.uid]).await;
}

#[tokio::test]
async fn a_settings_patch_creates_a_missing_index() {
    let meili = Meili::shared();
    let index = meili.fresh_index("settings_create");
    let settings = Settings::new().with_filterable_attributes(["user"]);
    let task = meili
        .wait(index.set_settings(&settings).await.unwrap())
        .await;
    assert_eq!(task["status"], "succeeded", "{task}");
    let fetched = meili
        .client
        .get_index(&index.uid)
        .await
        .expect("created by the settings task");
    assert_eq!(fetched.primary_key, None);
    assert_eq!(index.get_filterable_attributes().await.unwrap(), ["user"]);
    meili.drop_indexes(&[&index.uid]).await;
}

// ---------------------------------------------------------------- swaps

#[tokio::test]
async fn swapping_indexes_exchanges_their_documents() {
    let meili = Meili::shared();
    let live = meili.fresh_index("swap_live");
    let rebuilt = meili.fresh_index("swap_new");
    meili.create(&live, "id").await;
    meili.create(&rebuilt, "id").await;
    meili.add(&live, &[json!({"id": "old"})]).await;
    meili.add(&rebuilt, &[json!({"id": "new"})]).await;

    let swap = SwapIndexes {
        indexes: (live.uid.clone(), rebuilt.uid.clone()),
        rename: None,
    };
    let info = meili.client.swap_indexes([&swap]).await.unwrap();
    assert_eq!(info.index_uid, None);
    let task = meili.wait(info).await;
    assert_eq!(task["type"], "indexSwap");
    assert_eq!(task["status"], "succeeded", "{task}");
    assert_eq!(
        task["details"]["swaps"][0]["indexes"],
        json!([live.uid, rebuilt.uid])
    );
    assert_eq!(ids(&meili.documents(&live).await, "id"), ["new"]);
    assert_eq!(ids(&meili.documents(&rebuilt).await, "id"), ["old"]);

    let missing = support::unique_name("swap_missing");
    let swap = SwapIndexes {
        indexes: (live.uid.clone(), missing.clone()),
        rename: None,
    };
    let task = meili
        .wait(meili.client.swap_indexes([&swap]).await.unwrap())
        .await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["error"]["code"], "index_not_found");
    assert_eq!(
        ids(&meili.documents(&live).await, "id"),
        ["new"],
        "a failed swap changes nothing"
    );
    meili.drop_indexes(&[&live.uid, &rebuilt.uid]).await;
}

// ---------------------------------------------------------------- search

#[tokio::test]
async fn search_matches_words_filters_and_pages() {
    let meili = Meili::shared();
    let index = meili.fresh_index("search");
    meili.create(&index, "id").await;
    meili.set_filterable(&index, &["user"]).await;
    meili
        .add(
            &index,
            &[
                json!({"id": "1", "user": "u1", "text": "hello world"}),
                json!({"id": "2", "user": "u2", "text": "hello there"}),
                json!({"id": "3", "user": "u1", "text": "goodbye"}),
            ],
        )
        .await;

    let found = index
        .search()
        .with_query("hello")
        .execute::<Value>()
        .await
        .unwrap();
    let mut hit_ids: Vec<String> = found
        .hits
        .iter()
        .map(|h| h.result["id"].as_str().unwrap().to_string())
        .collect();
    hit_ids.sort();
    assert_eq!(hit_ids, ["1", "2"]);
    assert_eq!(found.estimated_total_hits, Some(2));
    assert_eq!(found.query, "hello");

    let found = index
        .search()
        .with_query("hello")
        .with_filter("user = u1")
        .execute::<Value>()
        .await
        .unwrap();
    assert_eq!(found.hits.len(), 1);
    assert_eq!(found.hits[0].result["id"], "1");

    let found = index
        .search()
        .with_query("")
        .with_filter("user = u1 OR user = u2")
        .with_limit(1)
        .with_offset(1)
        .execute::<Value>()
        .await
        .unwrap();
    assert_eq!(found.hits.len(), 1);
    assert_eq!(found.estimated_total_hits, Some(3));
    assert_eq!(found.limit, Some(1));
    assert_eq!(found.offset, Some(1));

    let (status, raw) = meili
        .get(&format!("/indexes/{}/search?q=goodbye", index.uid))
        .await;
    assert_eq!(status, 200);
    assert_eq!(raw["hits"][0]["id"], "3");
    assert!(raw["processingTimeMs"].is_u64());

    let (status, body) = meili
        .raw(
            reqwest::Method::POST,
            &format!("/indexes/{}/search", index.uid),
            Some(json!({"q": "", "filter": "user = "})),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "invalid_search_filter");
    meili.drop_indexes(&[&index.uid]).await;
}

// ---------------------------------------------------------------- stand-in knobs

#[tokio::test]
async fn payloads_over_the_limit_are_refused_with_413() {
    let Some(standin) = private_standin_with(&["--payload-limit-bytes", "1024"]) else {
        return;
    };
    let meili = Meili::private(&standin);
    let index = meili.fresh_index("payload");
    let small = meili.add(&index, &[json!({"id": "small"})]).await;
    assert_eq!(small["status"], "succeeded");

    let big = [json!({"id": "big", "text": "x".repeat(2000)})];
    let error = index
        .add_documents(&big, None)
        .await
        .expect_err("over the limit");
    assert_eq!(code(&error), Some(ErrorCode::PayloadTooLarge));
    let (status, body) = meili
        .raw(
            reqwest::Method::POST,
            &format!("/indexes/{}/documents", index.uid),
            Some(json!(big)),
        )
        .await;
    assert_eq!(status, 413);
    assert_eq!(body["code"], "payload_too_large");

    // A streamed (chunked) body has no length header and is cut off while read.
    let ndjson = format!(
        "{{\"id\":\"streamed\",\"text\":\"{}\"}}\n",
        "y".repeat(2000)
    );
    let error = index
        .add_documents_ndjson(futures::io::Cursor::new(ndjson.into_bytes()), None)
        .await
        .expect_err("over the limit");
    assert_eq!(code(&error), Some(ErrorCode::PayloadTooLarge));
}

#[tokio::test]
async fn latency_knob_keeps_tasks_processing() {
    let Some(standin) = private_standin() else {
        return;
    };
    let meili = Meili::private(&standin);
    standin.knobs().set_latency(800).await;
    let index = meili.fresh_index("latency");
    let info = index
        .add_documents(&[json!({"id": "a"})], None)
        .await
        .unwrap();
    let uid = info.task_uid;

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, task) = meili.get(&format!("/tasks/{uid}")).await;
        match task["status"].as_str().unwrap() {
            "processing" => {
                assert!(task["startedAt"].is_string());
                assert!(task["finishedAt"].is_null());
                break;
            }
            "enqueued" => {}
            other => panic!("task reached {other} without being seen processing"),
        }
        assert!(Instant::now() < deadline, "task never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let task = meili.wait(info).await;
    assert_eq!(task["status"], "succeeded");
    assert!(duration_secs(&task["duration"]) >= 0.8, "{task}");
}

#[tokio::test]
async fn fail_next_tasks_knob_fails_tasks_without_touching_documents() {
    let Some(standin) = private_standin() else {
        return;
    };
    let meili = Meili::private(&standin);
    let index = meili.fresh_index("failing");
    meili.create(&index, "id").await;
    standin
        .knobs()
        .fail_next_tasks(1, "internal", "injected by the test", "internal")
        .await;

    let task = meili.add(&index, &[json!({"id": "lost"})]).await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["error"]["code"], "internal");
    assert_eq!(task["error"]["message"], "injected by the test");
    assert_eq!(task["error"]["type"], "internal");

    let task = meili.add(&index, &[json!({"id": "kept"})]).await;
    assert_eq!(task["status"], "succeeded", "only one task was to fail");
    assert_eq!(ids(&meili.documents(&index).await, "id"), ["kept"]);
}

#[tokio::test]
async fn refuse_outage_refuses_connections_then_recovers() {
    let Some(standin) = private_standin() else {
        return;
    };
    let meili = Meili::private(&standin);
    assert!(meili.client.is_healthy().await);
    standin.knobs().outage("refuse", 1500).await;

    let during = reqwest::Client::new()
        .get(format!("{}/health", standin.host))
        .send()
        .await;
    let error = during.expect_err("connections are refused during the outage");
    assert!(
        error.is_connect(),
        "expected a connection error, got {error:?}"
    );
    assert!(!meili.client.is_healthy().await);

    let deadline = Instant::now() + Duration::from_secs(10);
    while !meili.client.is_healthy().await {
        assert!(Instant::now() < deadline, "stand-in did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let index = meili.fresh_index("after_outage");
    let task = meili.add(&index, &[json!({"id": "a"})]).await;
    assert_eq!(task["status"], "succeeded");
}

#[tokio::test]
async fn unavailable_outage_answers_503_then_recovers() {
    let Some(standin) = private_standin() else {
        return;
    };
    let meili = Meili::private(&standin);
    standin.knobs().outage("unavailable", 1500).await;

    let (status, body) = meili.get("/indexes").await;
    assert_eq!(status, 503);
    for field in ["message", "code", "type", "link"] {
        assert!(body[field].is_string(), "{field} in {body}");
    }
    assert!(meili.client.get_indexes().await.is_err());

    let deadline = Instant::now() + Duration::from_secs(10);
    while meili.get("/indexes").await.0 != 200 {
        assert!(Instant::now() < deadline, "stand-in stayed unavailable");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn request_log_records_what_clients_sent() {
    let Some(standin) = private_standin() else {
        return;
    };
    let meili = Meili::private(&standin);
    let knobs = standin.knobs();
    let index = meili.fresh_index("requests");
    meili.create(&index, "id").await;
    knobs.clear_requests().await;

    let docs = [json!({"id": "a", "text": "hello"}), json!({"id": "b"})];
    meili.add(&index, &docs).await;
    let log = knobs.requests().await;
    let path = format!("/indexes/{}/documents", index.uid);
    let addition = log
        .iter()
        .find(|entry| entry["method"] == "POST" && entry["path"] == path.as_str())
        .unwrap_or_else(|| panic!("no addition in {log:?}"));
    assert_eq!(addition["status"], 202);
    assert_eq!(
        addition["bodyBytes"],
        serde_json::to_vec(&docs).unwrap().len()
    );
    for field in ["startedAt", "finishedAt"] {
        let text = addition[field].as_str().unwrap();
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("{field} {text}: {e}"));
    }
    assert!(log.iter().any(|entry| entry["method"] == "GET"
        && entry["path"].as_str().unwrap().starts_with("/tasks/")
        && entry["status"] == 200));
    assert!(!log
        .iter()
        .any(|entry| entry["path"].as_str().unwrap().starts_with("/_standin/")));

    knobs.clear_requests().await;
    assert!(knobs.requests().await.is_empty());
}
