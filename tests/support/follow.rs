//! Helpers for the follow-mode tests: a replica's `/status`, waiting for it
//! to follow, a LibreChat-shaped writer (inserts, edits, deletes, documents
//! turned temporary or expired, each saved with `_meiliIndex: false` and a
//! new `updatedAt`, as LibreChat saves), awaiting one document's state in
//! Meilisearch, and "both sides in step" as a value to poll for.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use mongodb::Database;
use serde_json::Value;

use super::chat_data::{expected, is_marked_indexed, Env};
use super::cli::{eventually, Target};

/// `GET {base}/status` as JSON (`Null` when it does not answer).
pub async fn status(base: &str) -> Value {
    match reqwest::get(format!("{base}/status")).await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Waits until the replica at `base` reports `follow.state == state`.
pub async fn await_follow_state(base: &str, state: &str, limit: Duration) -> Value {
    eventually(
        limit,
        &format!("follow state {state} at {base}"),
        || async {
            let s = status(base).await;
            (s["follow"]["state"] == state).then_some(s)
        },
    )
    .await
}

/// How many documents the replica at `base` applied of kind `op`.
pub async fn applied(base: &str, op: &str) -> u64 {
    status(base).await["follow"]["applied"][op]
        .as_u64()
        .unwrap_or(0)
}

/// A plain indexable LibreChat message, as LibreChat saves it.
pub fn new_message(tag: &str, n: usize, now: DateTime) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "messageId": format!("{tag}-{n}"),
        "conversationId": format!("{tag}-conv-{}", n / 5),
        "user": format!("user-{}", n % 3),
        "sender": "User",
        "text": format!("{tag} message {n}"),
        "isCreatedByUser": true,
        "createdAt": now,
        "updatedAt": now,
        "_meiliIndex": false,
    }
}

/// LibreChat's save of an edit: new fields, a new `updatedAt` (from the
/// app's clock), the flag reset.
pub async fn save(db: &Database, collection: Collection, id: &Bson, set: Document) {
    let mut set = set;
    set.insert("updatedAt", DateTime::now());
    set.insert("_meiliIndex", false);
    db.collection::<Document>(collection.name())
        .update_one(doc! { "_id": id.clone() }, doc! { "$set": set })
        .await
        .unwrap();
}

/// One document of an index by its Meilisearch id (`None`: not there).
pub async fn meili_doc(target: &Target, collection: Collection, id: &str) -> Option<Value> {
    let doc = target
        .meili_get(&format!(
            "/indexes/{}{}/documents/{id}",
            target.prefix,
            collection.index_name()
        ))
        .await;
    doc.get("code").is_none().then_some(doc)
}

/// Waits until Meilisearch holds `want` (the exact document) under `id`,
/// or nothing when `want` is `None`.
pub async fn await_meili_doc(
    target: &Target,
    collection: Collection,
    id: &str,
    want: Option<Value>,
    limit: Duration,
) {
    let what = format!(
        "{} {id} to be {}",
        collection.name(),
        want.as_ref()
            .map(|w| w.to_string())
            .unwrap_or_else(|| "gone".into())
    );
    eventually(limit, &what, || async {
        (meili_doc(target, collection, id).await == want).then_some(())
    })
    .await;
}

/// Inserts a fresh message tagged `tag` (one of [`new_message`], with
/// MongoDB's time) and waits until Meilisearch returns exactly it.
pub async fn insert_and_await_searchable(env: &Env, target: &Target, tag: &str, limit: Duration) {
    let now = super::chat_data::server_now(&env.db).await;
    let fresh = new_message(tag, 1, now);
    env.db
        .collection::<Document>("messages")
        .insert_one(fresh.clone())
        .await
        .unwrap();
    let m = Collection::Messages;
    let want = expected(m, &fresh, now).unwrap().1;
    await_meili_doc(target, m, &format!("{tag}-1"), Some(want), limit).await;
}

/// What differs between MongoDB and Meilisearch (documents, and flags:
/// exactly the documents in Meilisearch are flagged), at most a few lines;
/// empty when both sides are in step.
pub async fn differences(env: &Env, now: DateTime) -> Vec<String> {
    let mut found = Vec::new();
    for collection in Collection::ALL {
        let docs = env.mongo_docs(collection).await;
        let in_meili = env.meili_docs(collection).await;
        let mut want = BTreeMap::new();
        for d in &docs {
            let flagged = d.get_bool("_meiliIndex").unwrap_or(false);
            match expected(collection, d, now) {
                Some((id, shape)) => {
                    if !is_marked_indexed(d) {
                        found.push(format!(
                            "{} {id}: indexable, not marked indexed",
                            collection.name()
                        ));
                    }
                    want.insert(id, shape);
                }
                None if flagged => found.push(format!(
                    "{} {:?}: not indexable, flagged",
                    collection.name(),
                    d.get("_id")
                )),
                None => {}
            }
        }
        for (id, shape) in &want {
            match in_meili.get(id) {
                None => found.push(format!(
                    "{} {id}: missing from Meilisearch",
                    collection.name()
                )),
                Some(got) if got != shape => found.push(format!(
                    "{} {id}: Meilisearch has {got}, MongoDB says {shape}",
                    collection.name()
                )),
                Some(_) => {}
            }
        }
        for id in in_meili.keys().filter(|id| !want.contains_key(*id)) {
            found.push(format!(
                "{} {id}: in Meilisearch, should not be",
                collection.name()
            ));
        }
    }
    found.truncate(10);
    found
}

/// Waits until both sides are in step (then the caller asserts it with
/// `Env::assert_in_step`); panics with the differences after `limit`.
pub async fn await_in_step(env: &Env, limit: Duration) {
    let started = std::time::Instant::now();
    loop {
        let now = super::chat_data::server_now(&env.db).await;
        let differences = differences(env, now).await;
        if differences.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "not in step after {limit:?}: {differences:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Turns on pre-images for both chat collections (creating them if needed).
pub async fn enable_pre_images(db: &Database) {
    for collection in Collection::ALL {
        let _ = db.create_collection(collection.name()).await;
        db.run_command(doc! {
            "collMod": collection.name(),
            "changeStreamPreAndPostImages": { "enabled": true },
        })
        .await
        .expect("collMod changeStreamPreAndPostImages");
    }
}

/// A LibreChat-like application writing messages while a test runs:
/// inserts, edits, deletes, and messages turned temporary and back, every
/// save with `_meiliIndex: false` and a new `updatedAt`.
pub struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
    written: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Writer {
    /// Starts writing into `db`, one change every `pause`.
    pub fn start(db: Database, tag: &str, pause: Duration) -> Writer {
        use rand::Rng;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let written = std::sync::Arc::new(AtomicUsize::new(0));
        let (stop_in, written_in, tag) = (stop.clone(), written.clone(), tag.to_string());
        let task = tokio::spawn(async move {
            let messages = db.collection::<Document>("messages");
            let mut live: Vec<Bson> = Vec::new();
            let mut n = 0;
            while !stop_in.load(Ordering::SeqCst) {
                let pick = |live: &Vec<Bson>| live[rand::rng().random_range(0..live.len())].clone();
                match n % 10 {
                    _ if live.len() < 5 || n % 10 < 5 => {
                        let doc = new_message(&tag, n, DateTime::now());
                        live.push(doc.get("_id").unwrap().clone());
                        messages.insert_one(doc).await.unwrap();
                    }
                    5 | 6 => {
                        let id = pick(&live);
                        save(
                            &db,
                            Collection::Messages,
                            &id,
                            doc! { "text": format!("{tag} edit {n}") },
                        )
                        .await;
                    }
                    7 => {
                        let at = rand::rng().random_range(0..live.len());
                        let id = live.swap_remove(at);
                        messages.delete_one(doc! { "_id": id }).await.unwrap();
                    }
                    8 => {
                        save(
                            &db,
                            Collection::Messages,
                            &pick(&live),
                            doc! { "isTemporary": true },
                        )
                        .await
                    }
                    _ => {
                        save(
                            &db,
                            Collection::Messages,
                            &pick(&live),
                            doc! { "isTemporary": false },
                        )
                        .await
                    }
                }
                n += 1;
                written_in.store(n, Ordering::SeqCst);
                tokio::time::sleep(pause).await;
            }
            n
        });
        Writer {
            stop,
            task,
            written,
        }
    }

    /// Changes written so far.
    pub fn written(&self) -> usize {
        self.written.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops writing; returns how many changes were written.
    pub async fn stop(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// Whether the test MongoDB serves change streams (opens one on `db` and
/// drops it). When it does not (DocumentDB, a standalone server), prints
/// `SKIPPED <test>: …` to stderr and returns `false`: follow-mode tests
/// cannot run there.
pub async fn serves_change_streams(_db: &Database, _test: &str) -> bool {
    // Says (and counts) the skip the way every test does (`support::skip`).
    !super::server::skip_without_change_streams().await
}

/// Deletes `ids` (messages, by `messageId`) with plain driver calls, as a
/// TTL monitor or an admin script does, and returns when each was deleted.
pub async fn delete_messages(db: &Database, ids: &[String]) -> Vec<std::time::Instant> {
    let messages = db.collection::<Document>("messages");
    let mut at = Vec::new();
    for id in ids {
        let gone = messages.delete_one(doc! { "messageId": id }).await.unwrap();
        assert_eq!(gone.deleted_count, 1, "{id} was there");
        at.push(std::time::Instant::now());
    }
    at
}

/// Waits until none of `ids` is in the messages index (polling every
/// 100 ms), at most `limit`; returns, per id, how long after `since[i]` it
/// was first seen absent. Panics naming those still there after `limit`.
pub async fn await_gone(
    target: &Target,
    ids: &[String],
    since: &[std::time::Instant],
    limit: Duration,
) -> Vec<Duration> {
    let started = std::time::Instant::now();
    let mut gone: Vec<Option<Duration>> = vec![None; ids.len()];
    let path = format!(
        "/indexes/{}messages/documents?fields=messageId&limit=100000",
        target.prefix
    );
    loop {
        // One listing a round, so the delay is measured to ~0.1 s.
        let listed = target.meili_get(&path).await;
        let present: std::collections::HashSet<&str> = listed["results"]
            .as_array()
            .expect("a document listing")
            .iter()
            .filter_map(|d| d["messageId"].as_str())
            .collect();
        for (i, id) in ids.iter().enumerate() {
            if gone[i].is_none() && !present.contains(id.as_str()) {
                gone[i] = Some(since[i].elapsed());
            }
        }
        if gone.iter().all(Option::is_some) {
            return gone.into_iter().flatten().collect();
        }
        let left: Vec<&String> = ids
            .iter()
            .zip(&gone)
            .filter(|(_, g)| g.is_none())
            .map(|(id, _)| id)
            .collect();
        assert!(
            started.elapsed() < limit,
            "{} of {} deleted messages still searchable after {limit:?}: {left:?}",
            left.len(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The median and the largest of some delays, in seconds.
pub fn p50_max(delays: &[Duration]) -> (f64, f64) {
    let mut secs: Vec<f64> = delays.iter().map(Duration::as_secs_f64).collect();
    secs.sort_by(f64::total_cmp);
    (secs[secs.len() / 2], *secs.last().unwrap())
}
