//! Chat data for the engine's integration tests (`reconcile_*`,
//! `reindex_*`): a namespaced environment (own database, own index prefix),
//! LibreChat-shaped documents covering every indexability and shaping edge
//! case, the expected Meilisearch projection written independently of the
//! engine, and the "both sides are in step" assertion.

use std::collections::BTreeMap;
use std::time::Duration;

use meili_reconciler::lease::Guard;
use meili_reconciler::meili::Meili;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::reindex::build_uid;
use meili_reconciler::reconcile::{
    reconcile, reindex, ReconcileError, ReindexOptions, RunSummary, SyncOptions,
};
use mongodb::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use mongodb::{Client, Database};
use serde_json::{json, Value};

use super::standin::PrivateStandin;

/// One test's namespace on the servers.
pub struct Env {
    pub db: Database,
    pub meili: Meili,
    pub opts: SyncOptions,
}

impl Env {
    /// A fresh namespace on the shared test servers.
    pub async fn new(tag: &str) -> Env {
        let meili = super::meili();
        Env::on(super::mongo_uri(), &meili.host, &meili.key, tag).await
    }

    /// A fresh namespace on the shared MongoDB and a private stand-in.
    pub async fn on_standin(standin: &PrivateStandin, tag: &str) -> Env {
        Env::on(super::mongo_uri(), &standin.host, &standin.key, tag).await
    }

    /// A fresh namespace on the given servers.
    pub async fn on(mongo_uri: &str, meili_host: &str, meili_key: &str, tag: &str) -> Env {
        let name = super::unique_name(tag);
        let client = Client::with_uri_str(mongo_uri).await.expect("mongo client");
        let db = client.database(&name);
        let meili = Meili::new(meili_host, Some(meili_key))
            .expect("meili client")
            .with_retry_for(Duration::from_secs(30));
        let opts = SyncOptions {
            index_prefix: format!("{name}_"),
            ..SyncOptions::default()
        };
        Env { db, meili, opts }
    }

    /// The namespace a CLI [`Target`](super::cli::Target) points its
    /// replicas at (same database, index prefix and Meilisearch), to inspect
    /// what real processes did.
    pub async fn for_target(target: &super::cli::Target) -> Env {
        let meili = Meili::new(&target.meili_host, Some(&target.meili_key))
            .expect("meili client")
            .with_retry_for(Duration::from_secs(30));
        let opts = SyncOptions {
            index_prefix: target.prefix.clone(),
            ..SyncOptions::default()
        };
        Env {
            db: target.db().await,
            meili,
            opts,
        }
    }

    pub fn uid(&self, collection: Collection) -> String {
        collection.index_uid(&self.opts.index_prefix)
    }

    pub async fn run(&self) -> Result<RunSummary, ReconcileError> {
        self.run_with(&self.opts).await
    }

    pub async fn run_with(&self, opts: &SyncOptions) -> Result<RunSummary, ReconcileError> {
        reconcile(
            &self.db,
            &self.meili,
            opts,
            &Guard::unfenced(),
            &Progress::new(),
        )
        .await
    }

    /// A forced reindex with the test's options.
    pub async fn reindex(&self, what: &ReindexOptions) -> Result<RunSummary, ReconcileError> {
        reindex(
            &self.db,
            &self.meili,
            &self.opts,
            what,
            &Guard::unfenced(),
            &Progress::new(),
        )
        .await
    }

    /// The uid of the index a zero-downtime reindex of `collection` builds.
    pub fn build_uid(&self, collection: Collection) -> String {
        build_uid(&self.uid(collection))
    }

    /// Creates an index with `pk` (waiting for it).
    pub async fn create_index(&self, uid: &str, pk: &str) {
        let guard = Guard::unfenced();
        let task = self.meili.create_index(uid, pk, &guard).await.unwrap();
        self.meili.wait_ok(task, "create", &guard).await.unwrap();
    }

    /// Puts documents straight into Meilisearch (waiting for the task).
    pub async fn put_docs(&self, uid: &str, docs: &[Value]) {
        let guard = Guard::unfenced();
        let mut ndjson = Vec::new();
        for d in docs {
            ndjson.extend(serde_json::to_vec(d).unwrap());
            ndjson.push(b'\n');
        }
        let task = self
            .meili
            .add_documents_ndjson(uid, ndjson.into(), &guard)
            .await
            .unwrap();
        self.meili.wait_ok(task, "put docs", &guard).await.unwrap();
    }

    /// Deletes documents from an index by id, waiting for the task.
    pub async fn delete_docs(&self, uid: &str, ids: &[String]) {
        let guard = Guard::unfenced();
        let task = self.meili.delete_documents(uid, ids, &guard).await.unwrap();
        self.meili
            .wait_ok(task, "delete docs", &guard)
            .await
            .unwrap();
    }

    /// Every document of an index, by id.
    pub async fn meili_docs(&self, collection: Collection) -> BTreeMap<String, Value> {
        let uid = self.uid(collection);
        let pk = collection.primary_key();
        let mut out = BTreeMap::new();
        let mut offset = 0;
        loop {
            let page = self.meili.documents_page(&uid, offset, 5000).await.unwrap();
            if page.is_empty() {
                return out;
            }
            offset += page.len() as u64;
            for d in page {
                let id = match &d[pk] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.insert(id, d);
            }
        }
    }

    pub async fn mongo_docs(&self, collection: Collection) -> Vec<Document> {
        use futures::TryStreamExt;
        self.db
            .collection::<Document>(collection.name())
            .find(doc! {})
            .sort(doc! { "_id": 1 })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    }

    pub async fn insert(&self, collection: Collection, docs: Vec<Document>) {
        let handle = self.db.collection::<Document>(collection.name());
        for chunk in docs.chunks(5000) {
            handle.insert_many(chunk.to_vec()).await.unwrap();
        }
    }

    /// Asserts Meilisearch holds exactly the expected projection of the
    /// indexable documents (except `rejected` ids, which must be absent), and
    /// that exactly the documents in Meilisearch are flagged.
    pub async fn assert_in_step(&self, now: DateTime, rejected: &[&str]) {
        for collection in Collection::ALL {
            let docs = self.mongo_docs(collection).await;
            let in_meili = self.meili_docs(collection).await;
            let mut expected_docs = BTreeMap::new();
            for d in &docs {
                let flagged = d.get_bool("_meiliIndex").unwrap_or(false);
                match expected(collection, d, now) {
                    Some((id, _)) if rejected.contains(&id.as_str()) => {
                        assert!(!flagged, "rejected {id} must stay unflagged");
                    }
                    Some((id, shape)) => {
                        assert!(
                            is_marked_indexed(d),
                            "{} {id} indexable but not marked indexed: {d}",
                            collection.name()
                        );
                        expected_docs.insert(id, shape);
                    }
                    None => assert!(
                        !flagged,
                        "{} {:?} not indexable but flagged",
                        collection.name(),
                        d.get("_id")
                    ),
                }
            }
            let missing: Vec<_> = expected_docs
                .keys()
                .filter(|k| !in_meili.contains_key(*k))
                .take(5)
                .collect();
            let extra: Vec<_> = in_meili
                .keys()
                .filter(|k| !expected_docs.contains_key(*k))
                .take(5)
                .collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{}: missing from Meilisearch {missing:?}, not expected there {extra:?}",
                collection.name()
            );
            for (id, want) in &expected_docs {
                assert_eq!(&in_meili[id], want, "{} document {id}", collection.name());
            }
            assert_eq!(in_meili.len(), expected_docs.len());
        }
    }

    /// Deletes the test's indexes and database (best effort).
    pub async fn cleanup(&self) {
        let guard = Guard::unfenced();
        for collection in Collection::ALL {
            let _ = self.meili.delete_index(&self.uid(collection), &guard).await;
            let _ = self
                .meili
                .delete_index(&self.build_uid(collection), &guard)
                .await;
        }
        let _ = self.db.drop().await;
    }
}

/// The expected Meilisearch id and document of a MongoDB document, or `None`
/// when it must not be in Meilisearch. Written from docs/design.md §3 (and
/// LibreChat's rules it states), apart from the engine's own code, for the
/// plain values the test data holds.
pub fn expected(collection: Collection, d: &Document, now: DateTime) -> Option<(String, Value)> {
    let user_ok = matches!(d.get("user"), Some(Bson::String(u)) if !u.is_empty());
    let no_expiry = matches!(d.get("expiredAt"), None | Some(Bson::Null));
    let later = matches!(d.get("expiredAt"), Some(Bson::DateTime(t)) if *t > now);
    // LibreChat's retention: explicitly not temporary and not expired, or a
    // legacy record (no `isTemporary`) without any expiry.
    let retained = match d.get("isTemporary") {
        Some(Bson::Boolean(false)) => no_expiry || later,
        None | Some(Bson::Null) => no_expiry,
        _ => false,
    };
    let excluded = d.contains_key(match collection {
        Collection::Messages => "subagentTask",
        Collection::Conversations => "subagentThread",
    });
    let unfinished =
        collection == Collection::Messages && d.get_bool("unfinished").unwrap_or(false);
    if !user_ok || !retained || excluded || unfinished {
        return None;
    }
    let mut out = serde_json::Map::new();
    let fields: &[&str] = match collection {
        Collection::Messages => &["messageId", "conversationId", "user", "sender", "text"],
        Collection::Conversations => &["conversationId", "title", "user", "tags"],
    };
    for f in fields {
        match d.get(*f) {
            Some(Bson::String(s)) => {
                out.insert(f.to_string(), json!(s));
            }
            Some(Bson::Array(items)) => {
                out.insert(
                    f.to_string(),
                    Value::Array(items.iter().map(|i| json!(i.as_str().unwrap())).collect()),
                );
            }
            Some(other) => panic!("unexpected field value in test data: {other:?}"),
            None => {}
        }
    }
    // LibreChat's schema defaults, as its models load a document.
    if collection == Collection::Conversations {
        out.entry("title").or_insert(json!("New Chat"));
        out.entry("tags").or_insert(json!([]));
    }
    if let Some(Bson::Array(parts)) = d.get("content") {
        out.insert("text".into(), json!(text_of(parts)));
    }
    if let Some(Value::String(c)) = out.get_mut("conversationId") {
        *c = c.replace('|', "--");
    }
    let id = out[collection.primary_key()].as_str()?.to_string();
    Some((id, Value::Object(out)))
}

/// A message's text from its parts, as LibreChat's `parseTextParts(content,
/// false, { includeSteer: true })` joins them, for string-valued parts:
/// `text` (a string or `{ value }`), `think` and `steer` in order, one space
/// between two non-empty pieces unless one side already has it.
fn text_of(parts: &[Bson]) -> String {
    let mut text = String::new();
    for part in parts.iter().filter_map(Bson::as_document) {
        let piece = match part.get_str("type") {
            Ok("text") => part
                .get_str("text")
                .ok()
                .or_else(|| part.get_document("text").ok()?.get_str("value").ok()),
            Ok("think") => part.get_str("think").ok(),
            Ok("steer") => part.get_str("steer").ok(),
            _ => None,
        }
        .unwrap_or("");
        if !text.is_empty() && !piece.is_empty() && !text.ends_with(' ') && !piece.starts_with(' ')
        {
            text.push(' ');
        }
        text.push_str(piece);
    }
    text
}

/// Whether `d` carries LibreChat's markers of an indexed document at schema
/// version 1.
pub fn is_marked_indexed(d: &Document) -> bool {
    d.get_bool("_meiliIndex").unwrap_or(false)
        && matches!(d.get("_meiliIndexSchemaVersion"), Some(Bson::Int32(1)))
}

/// Documents a run sent to Meilisearch, over all collections.
pub fn indexed(summary: &RunSummary) -> u64 {
    summary.collections.iter().map(|c| c.indexed).sum()
}

/// MongoDB's clock (what the engine compares `expiredAt` with).
pub async fn server_now(db: &Database) -> DateTime {
    meili_reconciler::mongo::server_time(db).await.unwrap()
}

fn hours(h: i64) -> i64 {
    h * 3_600_000
}

/// A LibreChat message; `i` picks the edge case it exercises.
pub fn message(i: usize, now: DateTime) -> Document {
    let conv = i / 10;
    let mut d = doc! {
        "_id": ObjectId::new(),
        "messageId": format!("msg-{i}"),
        "conversationId": format!("conv-{conv}"),
        "user": format!("user-{}", i % 7),
        "sender": if i.is_multiple_of(2) { "User" } else { "GPT-4" },
        "text": format!("message number {i} about topic {}", i % 13),
        "isCreatedByUser": i.is_multiple_of(2),
        "model": "gpt-4o",
        "createdAt": DateTime::from_millis(now.timestamp_millis() - hours(2)),
        "updatedAt": DateTime::from_millis(now.timestamp_millis() - hours(1)),
    };
    match i % 20 {
        1 => {
            d.insert(
                "content",
                vec![
                    Bson::Document(doc! { "type": "text", "text": format!("part one of {i}") }),
                    Bson::Document(
                        doc! { "type": "image_url", "image_url": { "url": "data:xyz" } },
                    ),
                    Bson::Document(doc! { "type": "text", "text": "part two" }),
                ],
            );
        }
        2 => {
            d.insert(
                "content",
                vec![Bson::Document(
                    doc! { "type": "tool_call", "tool_call": { "name": "x" } },
                )],
            );
        }
        3 => {
            d.insert("isTemporary", true);
        }
        4 => {
            d.insert("isTemporary", false);
        }
        5 => {
            d.insert(
                "expiredAt",
                DateTime::from_millis(now.timestamp_millis() - hours(1)),
            );
        }
        6 => {
            d.insert(
                "expiredAt",
                DateTime::from_millis(now.timestamp_millis() + hours(240)),
            );
        }
        7 => {
            d.insert("expiredAt", Bson::Null);
        }
        8 => {
            d.insert("unfinished", true);
        }
        9 => {
            d.remove("user");
        }
        10 => {
            d.insert("conversationId", format!("conv|{conv}|x"));
        }
        11 => {
            // LibreChat thinks it is indexed (Meilisearch does not have it).
            d.insert("_meiliIndex", true);
            d.insert("_meiliIndexSchemaVersion", 1);
        }
        15 => {
            // A subagent transcript: never searchable.
            d.insert(
                "subagentTask",
                doc! { "attemptKey": format!("a{i}"), "status": "completed" },
            );
            d.insert("_meiliIndex", false);
        }
        16 => {
            d.insert(
                "content",
                vec![
                    Bson::Document(doc! { "type": "think", "think": format!("reasoning {i} ") }),
                    Bson::Document(doc! { "type": "text", "text": { "value": "the answer" } }),
                    Bson::Document(doc! { "type": "steer", "steer": " shorter" }),
                ],
            );
        }
        12 => {
            d.insert("_meiliIndex", false);
        }
        13 => {
            d.remove("sender");
            d.remove("updatedAt");
        }
        14 => {
            d.insert("unfinished", false);
        }
        _ => {}
    }
    d
}

/// A LibreChat conversation; `i` picks the edge case it exercises.
pub fn conversation(i: usize, now: DateTime) -> Document {
    let mut d = doc! {
        "_id": ObjectId::new(),
        "conversationId": format!("conv-{i}"),
        "user": format!("user-{}", i % 7),
        "title": format!("Conversation {i}"),
        "endpoint": "openAI",
        "createdAt": DateTime::from_millis(now.timestamp_millis() - hours(2)),
        "updatedAt": DateTime::from_millis(now.timestamp_millis() - hours(1)),
    };
    match i % 10 {
        1 => {
            d.insert("tags", vec!["work", "urgent"]);
        }
        2 => {
            d.remove("title");
        }
        3 => {
            d.insert("conversationId", format!("conv|{i}"));
        }
        4 => {
            d.insert("isTemporary", true);
        }
        5 => {
            d.insert(
                "expiredAt",
                DateTime::from_millis(now.timestamp_millis() - hours(1)),
            );
        }
        6 => {
            d.remove("user");
        }
        7 => {
            d.insert("_meiliIndex", true);
            d.insert("_meiliIndexSchemaVersion", 1);
        }
        9 => {
            d.insert("subagentThread", doc! { "parentConversationId": "conv-0" });
        }
        8 => {
            d.insert("tags", Vec::<String>::new());
            d.insert(
                "expiredAt",
                DateTime::from_millis(now.timestamp_millis() + hours(240)),
            );
        }
        _ => {}
    }
    d
}

/// Seeds `messages` messages and `conversations` conversations.
pub async fn seed(env: &Env, messages: usize, conversations: usize) -> DateTime {
    let now = server_now(&env.db).await;
    env.insert(
        Collection::Messages,
        (0..messages).map(|i| message(i, now)).collect(),
    )
    .await;
    env.insert(
        Collection::Conversations,
        (0..conversations).map(|i| conversation(i, now)).collect(),
    )
    .await;
    now
}
