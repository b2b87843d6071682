//! Exactness whatever the application clocks: a writer whose clock runs 30 s
//! behind MongoDB's (and, in other tests, 30 s ahead) edits, inserts, deletes
//! and turns documents temporary or expired the way LibreChat does (new
//! text, `updatedAt` from its own clock, `_meiliIndex: false`) while a real
//! `once --force` process is syncing (Meilisearch slowed per document, so
//! batches are in flight while it writes). After the writer stops, one more
//! `once --force`; then every document is compared with MongoDB and
//! `verify` reports no difference.
//!
//! The `_with_save_hook` variants also behave like LibreChat's own save
//! hook (`mongoMeili`): after each MongoDB write the writer enqueues the new
//! version in Meilisearch (or the removal of a deleted or unindexable
//! document) without waiting for the task, and sets `_meiliIndex: true` —
//! so its newer version can be enqueued before an older batch of ours. With
//! the hook the index must already be exact right after the run the writes
//! happened in.

use crate::support;

use std::time::Duration;

use meili_reconciler::lease::Guard;
use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use support::chat_data::{expected, message, seed, server_now, Env};
use support::cli::{eventually, output_of, Target};

/// What the writer did.
#[derive(Debug, Default)]
struct Stats {
    edits: u32,
    inserts: u32,
    deletes: u32,
    temporary: u32,
    expired: u32,
}

impl Stats {
    fn total(&self) -> u32 {
        self.edits + self.inserts + self.deletes + self.temporary + self.expired
    }
}

/// An application writing with a skewed clock, optionally with LibreChat's
/// save hook.
struct Writer<'e> {
    env: &'e Env,
    skew_ms: i64,
    hook: bool,
    rng: StdRng,
    pool: Vec<(Collection, Bson)>,
    stats: Stats,
    /// The hook's last Meilisearch task.
    last_hook_task: Option<u64>,
}

impl<'e> Writer<'e> {
    async fn new(env: &'e Env, skew_ms: i64, hook: bool) -> Writer<'e> {
        let mut pool = Vec::new();
        for collection in Collection::ALL {
            for d in env.mongo_docs(collection).await {
                pool.push((collection, d.get("_id").unwrap().clone()));
            }
        }
        Writer {
            env,
            skew_ms,
            hook,
            rng: StdRng::seed_from_u64(7),
            pool,
            stats: Stats::default(),
            last_hook_task: None,
        }
    }

    /// One write, stamped with the writer's clock (MongoDB's ± the skew).
    async fn step(&mut self) {
        let now = server_now(&self.env.db).await;
        let stamp = DateTime::from_millis(now.timestamp_millis() + self.skew_ms);
        let slot = self.rng.random_range(0..self.pool.len());
        let (collection, id) = self.pool[slot].clone();
        let handle = self.env.db.collection::<Document>(collection.name());
        let roll = self.rng.random_range(0..100);
        let before = match self.hook {
            true => handle.find_one(doc! { "_id": &id }).await.unwrap(),
            false => None,
        };
        let (filter, update) = match (collection, roll) {
            (Collection::Messages, 0..15) => {
                let n = 100_000 + self.stats.inserts as usize;
                let mut d = message(n, now);
                let new_id = ObjectId::new();
                d.insert("_id", new_id);
                d.insert("updatedAt", stamp);
                d.insert("_meiliIndex", false);
                handle.insert_one(d).await.unwrap();
                self.pool.push((collection, Bson::ObjectId(new_id)));
                self.stats.inserts += 1;
                self.after_write(collection, &Bson::ObjectId(new_id), None)
                    .await;
                return;
            }
            (Collection::Messages, 15..30) => {
                handle.delete_one(doc! { "_id": &id }).await.unwrap();
                self.pool.swap_remove(slot);
                self.stats.deletes += 1;
                self.after_write(collection, &id, before).await;
                return;
            }
            (_, 30..42) => {
                self.stats.temporary += 1;
                (
                    doc! { "_id": &id },
                    doc! { "$set": { "isTemporary": true, "updatedAt": stamp, "_meiliIndex": false } },
                )
            }
            (_, 42..55) => {
                self.stats.expired += 1;
                let gone = DateTime::from_millis(now.timestamp_millis() - 1_000);
                (
                    doc! { "_id": &id },
                    doc! { "$set": { "expiredAt": gone, "updatedAt": stamp, "_meiliIndex": false } },
                )
            }
            (Collection::Messages, _) => {
                self.stats.edits += 1;
                let text = format!("edited {} at {stamp}", self.stats.edits);
                (
                    doc! { "_id": &id },
                    doc! { "$set": { "text": text, "updatedAt": stamp, "_meiliIndex": false },
                    "$unset": { "content": "" } },
                )
            }
            (Collection::Conversations, _) => {
                self.stats.edits += 1;
                let title = format!("retitled {} at {stamp}", self.stats.edits);
                (
                    doc! { "_id": &id },
                    doc! { "$set": { "title": title, "updatedAt": stamp, "_meiliIndex": false } },
                )
            }
        };
        handle.update_one(filter, update).await.unwrap();
        self.after_write(collection, &id, before).await;
    }

    /// LibreChat's save hook, when enabled: the document's new state is
    /// enqueued in Meilisearch (added, or removed when deleted or
    /// unindexable; the task is not awaited), then its flag is set.
    async fn after_write(&mut self, collection: Collection, id: &Bson, before: Option<Document>) {
        if !self.hook {
            return;
        }
        let guard = Guard::unfenced();
        let uid = self.env.uid(collection);
        let handle = self.env.db.collection::<Document>(collection.name());
        let now = server_now(&self.env.db).await;
        let current = handle.find_one(doc! { "_id": id }).await.unwrap();
        match current.as_ref().and_then(|d| expected(collection, d, now)) {
            Some((_, shape)) => {
                let ndjson = format!("{shape}\n").into_bytes();
                let task = self
                    .env
                    .meili
                    .add_documents_ndjson(&uid, ndjson.into(), &guard)
                    .await
                    .unwrap();
                self.last_hook_task = Some(task);
                handle
                    .update_one(doc! { "_id": id }, doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } })
                    .await
                    .unwrap();
            }
            None => {
                let Some(known) = current.or(before) else {
                    return;
                };
                let meili_id = known
                    .get_str(collection.primary_key())
                    .unwrap()
                    .replace('|', "--");
                let task = self
                    .env
                    .meili
                    .delete_documents(&uid, &[meili_id], &guard)
                    .await
                    .unwrap();
                self.last_hook_task = Some(task);
            }
        }
    }
}

async fn writes_during_a_sync_end_exact(tag: &str, skew_ms: i64, hook: bool) {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let target = Target::new(tag)
        .with_meili(&standin.host, &standin.key)
        .set("RECONCILER__SYNC__BATCH_DOCS", "100");
    let env = Env::for_target(&target).await;
    seed(&env, 1_500, 150).await;
    let mut writer = Writer::new(&env, skew_ms, hook).await;

    // Each document costs Meilisearch 12 ms, so a batch of 100 stays in
    // flight 1.2 s while the writer writes (about 17 batches: the sync
    // takes 20 s or more, time for well over 30 writes on a loaded
    // machine), while the save hook's one-document tasks stay cheap, as
    // they are for a real Meilisearch.
    knobs.set_per_document_cost(12_000).await;
    let mut sync = target.spawn("sync", &["once", "--force"]);
    let documents_path = format!("/indexes/{}messages/documents", target.prefix);
    eventually(
        Duration::from_secs(60),
        "the sync's first batch",
        || async {
            knobs
                .requests()
                .await
                .iter()
                .any(|r| r["method"] == "POST" && r["path"] == documents_path.as_str())
                .then_some(())
        },
    )
    .await;
    let status = loop {
        if let Some(status) = sync.child.try_wait().unwrap() {
            break status;
        }
        writer.step().await;
        // A write every 50 ms is hundreds while the sync runs; faster, the
        // writer would only crowd a stand-in MongoDB that answers one
        // request at a time.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if let Some(task) = writer.last_hook_task {
        let guard = Guard::unfenced();
        env.meili
            .wait_ok(task, "the hook's last task", &guard)
            .await
            .unwrap();
    }
    let stats = writer.stats;
    let (out, err) = output_of(sync);
    assert_eq!(status.code(), Some(0), "the sync under writes: {out}{err}");
    println!("writer (skew {skew_ms} ms, hook {hook}) during the sync: {stats:?}");
    assert!(
        stats.total() >= 30 && stats.edits > 0 && stats.deletes > 0,
        "the writer must write while the sync runs: {stats:?}"
    );
    knobs.set_per_document_cost(0).await;

    if hook {
        // The save hook kept Meilisearch current for what the sync had
        // passed; the sync must not have left anything older behind.
        env.assert_in_step(server_now(&env.db).await, &[]).await;
    }

    let out = target.run("sync", &["once", "--force"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;

    let out = target.run("op", &["verify", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify --json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["clean"], true, "{report}");
    for index in report["indexes"].as_array().unwrap() {
        for kind in ["missing", "unexpected", "stale"] {
            assert_eq!(index[kind]["count"], 0, "{kind}: {report}");
        }
    }
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_30s_behind_mongodb() {
    writes_during_a_sync_end_exact("skew_behind", -30_000, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_30s_ahead_of_mongodb() {
    writes_during_a_sync_end_exact("skew_ahead", 30_000, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_30s_behind_mongodb_with_save_hook() {
    writes_during_a_sync_end_exact("skew_behind_hook", -30_000, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_30s_ahead_of_mongodb_with_save_hook() {
    writes_during_a_sync_end_exact("skew_ahead_hook", 30_000, true).await;
}
