//! What a forced run leaves searchable after deletes made during the run
//! before it (docs/design.md §4.4), and what counts as deleted.
//!
//! A delete counts when the server says it deleted something. On DocumentDB
//! (0.106) a `deleteOne` — or `findOneAndDelete` — that has to wait for
//! another write of the same document to commit answers `deletedCount: 0`
//! and leaves the document where it was: its one-row `DELETE` finds the row
//! by the `ctid` a `SELECT … FOR UPDATE` returned after the wait, which is
//! the new row version's, and the statement's snapshot, taken before the
//! wait, cannot see that version. `deleteMany` deletes it (PostgreSQL
//! re-checks the newer version), and so does secantusdb's `deleteOne`.
//! The reconciler's acknowledgement is such a write: one `update` command
//! of up to 1,000 statements runs as one transaction there, so each
//! document it flags stays locked until the whole command commits, and a
//! `deleteOne` of one of them in that time deletes nothing (how often:
//! docs/benchmarks.md, `scripts/bench-forced-deletes`). The message is still in
//! MongoDB, so it rightly stays searchable — but a check that counts every
//! delete the writer sent as done reports it as a deleted message left
//! searchable.
//!
//! - `messages_mongodb_deleted_during_a_run_are_not_searchable_after_a_forced_run`:
//!   seeded messages (`support::seeder`), a real `once` with
//!   `sync.batch_docs = 500` while a writer whose clock runs 30 s behind
//!   MongoDB's edits, deletes (`deleteOne`) and inserts messages, then — the
//!   writer stopped — `once --force` on the quiet database. Asserts that the
//!   index holds exactly the ids of MongoDB's searchable messages, that no
//!   message the server deleted is searchable, and that every delete the
//!   server answered with `deletedCount: 0` left its message in MongoDB.
//!   Sized by `FORCED_DELETES_MESSAGES` (1,000; `scripts/bench-forced-deletes`
//!   runs it at 20,000 in a loop), `FORCED_DELETES_ROUNDS` (1),
//!   `FORCED_DELETES_FIRST_ROUND` (0: the rounds' seeds) and
//!   `FORCED_DELETES_PAUSE_MS` (2: the writer's pause between writes). The
//!   forced run logs every id it compares (`reconcile::orphans` at `trace`);
//!   a failed round keeps both runs' logs in `FORCED_DELETES_KEEP` (a
//!   temporary directory by default, named in the failure), every round's
//!   when it is set.
//! - `a_delete_one_behind_a_flag_write_is_counted_by_what_the_server_deleted`:
//!   the same race made deterministic on a small index.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::chat_data::{expected, is_marked_indexed, message, server_now, Env};
use support::cli::{output_of, Target};
use support::seeder::{seed, SeedSpec};

/// The forced run's log filter: every id the drift repair compares.
const LOG: &str = "info,meili_reconciler::reconcile::orphans=trace";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the writer did.
#[derive(Debug, Default)]
struct Stats {
    edits: u32,
    inserts: u32,
    /// `deleteOne`s sent.
    deletes: u32,
}

/// An application editing, deleting and inserting messages with a clock
/// `skew_ms` off MongoDB's (LibreChat's way: new text, `updatedAt` from its
/// own clock, `_meiliIndex: false`), one write at a time.
struct Writer<'e> {
    env: &'e Env,
    rng: StdRng,
    /// `_id` and `messageId` of every message it may still write to.
    pool: Vec<(Bson, String)>,
    /// Its clock minus the local one.
    offset_ms: i64,
    stats: Stats,
    /// `messageId`s the server deleted (`deletedCount: 1`).
    deleted: Vec<String>,
    /// `messageId`s whose `deleteOne` deleted nothing (`deletedCount: 0`).
    refused: Vec<String>,
}

impl<'e> Writer<'e> {
    async fn new(env: &'e Env, seed: u64, skew_ms: i64) -> Writer<'e> {
        let pool = env
            .mongo_docs(Collection::Messages)
            .await
            .iter()
            .map(|d| {
                (
                    d.get("_id").unwrap().clone(),
                    d.get_str("messageId").unwrap().to_string(),
                )
            })
            .collect();
        let server = server_now(&env.db).await.timestamp_millis();
        let local = DateTime::now().timestamp_millis();
        Writer {
            env,
            rng: StdRng::seed_from_u64(seed),
            pool,
            offset_ms: server - local + skew_ms,
            stats: Stats::default(),
            deleted: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// One write: 21% inserts, 17% deletes, the rest edits.
    async fn step(&mut self) {
        let stamp = DateTime::from_millis(DateTime::now().timestamp_millis() + self.offset_ms);
        let handle = self.env.db.collection::<Document>("messages");
        let roll = self.rng.random_range(0..100);
        let slot = self.rng.random_range(0..self.pool.len());
        match roll {
            0..21 => {
                // A plain searchable message (`message` makes every 20th so).
                let n = 1_000_000 + 20 * self.stats.inserts as usize;
                let mut d = message(n, stamp);
                let id = ObjectId::new();
                d.insert("_id", id);
                d.insert("updatedAt", stamp);
                d.insert("_meiliIndex", false);
                handle.insert_one(d).await.unwrap();
                self.pool.push((Bson::ObjectId(id), format!("msg-{n}")));
                self.stats.inserts += 1;
            }
            21..38 => {
                let (id, message_id) = self.pool.swap_remove(slot);
                let answer = handle.delete_one(doc! { "_id": &id }).await.unwrap();
                self.stats.deletes += 1;
                match answer.deleted_count {
                    0 => self.refused.push(message_id),
                    _ => self.deleted.push(message_id),
                }
            }
            _ => {
                let id = &self.pool[slot].0;
                self.stats.edits += 1;
                let text = format!("edited {} at {stamp}", self.stats.edits);
                handle
                    .update_one(
                        doc! { "_id": id },
                        doc! { "$set": { "text": text, "updatedAt": stamp, "_meiliIndex": false },
                        "$unset": { "content": "" } },
                    )
                    .await
                    .unwrap();
            }
        }
    }
}

/// Every id in the messages index.
async fn meili_ids(env: &Env) -> BTreeSet<String> {
    let uid = env.uid(Collection::Messages);
    let mut out = BTreeSet::new();
    let mut offset = 0;
    loop {
        let (ids, _) = env
            .meili
            .document_ids(&uid, "messageId", offset, 10_000)
            .await
            .unwrap();
        if ids.is_empty() {
            return out;
        }
        offset += ids.len() as u64;
        out.extend(ids);
    }
}

/// The ids of MongoDB's searchable messages now (the tests' own reading of
/// LibreChat's rules, `chat_data::expected`).
async fn searchable_ids(env: &Env) -> BTreeMap<String, Bson> {
    let now = server_now(&env.db).await;
    env.mongo_docs(Collection::Messages)
        .await
        .iter()
        .filter_map(|d| {
            let (id, _) = expected(Collection::Messages, d, now)?;
            Some((id, d.get("_id").cloned().unwrap_or(Bson::Null)))
        })
        .collect()
}

/// What one round found wrong, with where its logs are.
struct Failure(String);

/// One round of the scenario (see the module documentation).
async fn round(round: u64, messages: usize, pause: Duration, keep: &Path) -> Result<(), Failure> {
    let target = Target::new(&format!("forced_del{round}"))
        .set("RECONCILER__SYNC__BATCH_DOCS", "500")
        .set("RUST_LOG", LOG);
    let env = Env::for_target(&target).await;
    let spec = SeedSpec {
        messages,
        conversations: messages / 10,
        seed: 11 + round,
        now: server_now(&env.db).await,
        ..SeedSpec::default()
    };
    seed(&env.db, &spec).await.unwrap();
    let mut writer = Writer::new(&env, 7 + round, -30_000).await;

    let started = Instant::now();
    let mut first = target.spawn("first", &["once"]);
    let status = loop {
        if let Some(status) = first.child.try_wait().unwrap() {
            break status;
        }
        writer.step().await;
        tokio::time::sleep(pause).await;
    };
    let first_secs = started.elapsed().as_secs_f64();
    let (_, first_log) = output_of(first);
    let forced = target.run("forced", &["once", "--force"]);
    let forced_log = String::from_utf8_lossy(&forced.stderr).to_string();

    let in_meili = meili_ids(&env).await;
    let wanted = searchable_ids(&env).await;
    let orphans: Vec<&String> = in_meili
        .iter()
        .filter(|id| !wanted.contains_key(*id))
        .collect();
    let missing: Vec<&String> = wanted.keys().filter(|id| !in_meili.contains(*id)).collect();
    let deleted_searchable: Vec<&String> = writer
        .deleted
        .iter()
        .filter(|id| in_meili.contains(*id))
        .collect();
    let handle = env.db.collection::<Document>("messages");
    let mut refused_gone = Vec::new();
    for id in &writer.refused {
        let there = handle
            .find_one(doc! { "messageId": id.as_str() })
            .await
            .unwrap();
        if there.is_none() {
            refused_gone.push(id);
        }
    }
    let refused_searchable = writer
        .refused
        .iter()
        .filter(|id| in_meili.contains(*id))
        .count();
    let stats = &writer.stats;
    eprintln!(
        "forced-deletes round {round}: {messages} messages, first run {first_secs:.0} s; writer \
         {} edits, {} inserts, {} deletes of which {} deleted nothing (deletedCount 0); after the \
         forced run: {refused_searchable} of the deletes sent still searchable (in MongoDB), \
         {} deleted messages searchable, {} orphans, {} missing",
        stats.edits,
        stats.inserts,
        stats.deletes,
        writer.refused.len(),
        deleted_searchable.len(),
        orphans.len(),
        missing.len(),
    );

    let mut wrong = Vec::new();
    if !status.success() || !forced.status.success() {
        wrong.push(format!(
            "exit codes: first {status}, forced {}",
            forced.status
        ));
    }
    if !deleted_searchable.is_empty() {
        wrong.push(format!(
            "messages MongoDB deleted are searchable: {deleted_searchable:?}"
        ));
    }
    if !orphans.is_empty() || !missing.is_empty() {
        wrong.push(format!(
            "the index is not MongoDB's searchable messages: not expected {orphans:?}, \
             missing {missing:?}"
        ));
    }
    if !refused_gone.is_empty() {
        wrong.push(format!(
            "deletes answered deletedCount 0 whose message is gone from MongoDB: {refused_gone:?}"
        ));
    }
    if wrong.is_empty() && std::env::var_os("FORCED_DELETES_KEEP").is_none() {
        env.cleanup().await;
        return Ok(());
    }
    let dir = keep.join(format!("round-{round}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("first.log"), &first_log).unwrap();
    std::fs::write(dir.join("forced.log"), &forced_log).unwrap();
    env.cleanup().await;
    if wrong.is_empty() {
        return Ok(());
    }
    Err(Failure(format!(
        "round {round}: {} (logs, the forced run's compared ids included: {})",
        wrong.join("; "),
        dir.display()
    )))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_mongodb_deleted_during_a_run_are_not_searchable_after_a_forced_run() {
    let rounds = setting("FORCED_DELETES_ROUNDS", 1);
    let first_round = setting("FORCED_DELETES_FIRST_ROUND", 0);
    let messages = setting("FORCED_DELETES_MESSAGES", 1_000) as usize;
    let pause = Duration::from_millis(setting("FORCED_DELETES_PAUSE_MS", 2));
    let temp = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("FORCED_DELETES_KEEP")
        .map(PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());
    let mut failures = Vec::new();
    for r in first_round..first_round + rounds {
        if let Err(Failure(e)) = round(r, messages, pause, &keep).await {
            eprintln!("{e}");
            failures.push(e);
        }
    }
    if !failures.is_empty() {
        // Keep the logs the failures name.
        let _ = temp.keep();
    }
    assert!(
        failures.is_empty(),
        "{} of {rounds} rounds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A write in progress on `ids` (the first one first) for about as long as
/// the server takes for `statements` statements in one `update` command, as
/// the acknowledgement writes flags: a field no projection reads is
/// incremented.
async fn long_update(env: &Env, ids: Vec<Bson>, statements: usize) {
    let updates: Vec<Document> = ids
        .iter()
        .cycle()
        .take(statements)
        .map(|id| doc! { "q": { "_id": id }, "u": { "$inc": { "probeWrites": 1 } } })
        .collect();
    env.db
        .run_command(doc! { "update": "messages", "updates": updates, "ordered": true })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_one_behind_a_flag_write_is_counted_by_what_the_server_deleted() {
    let target = Target::new("delete_behind_write");
    let env = Env::for_target(&target).await;
    support::chat_data::seed(&env, 300, 30).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let indexed: Vec<Document> = env
        .mongo_docs(Collection::Messages)
        .await
        .into_iter()
        .filter(is_marked_indexed)
        .collect();
    let id_of = |d: &Document| d.get("_id").cloned().unwrap();
    let message_id = |d: &Document| d.get_str("messageId").unwrap().to_string();
    let (behind, free) = (&indexed[0], &indexed[indexed.len() - 1]);

    // `behind` is written to by one long command (first, so it is locked
    // for the whole command where the server locks rows) while it and
    // `free` are deleted one by one with `deleteOne`.
    let writes: Vec<Bson> = indexed.iter().take(100).map(id_of).collect();
    let writing = long_update(&env, writes, 3_000);
    let deleting = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let handle = env.db.collection::<Document>("messages");
        let behind = handle
            .delete_one(doc! { "_id": id_of(behind) })
            .await
            .unwrap();
        let free = handle
            .delete_one(doc! { "_id": id_of(free) })
            .await
            .unwrap();
        (behind.deleted_count, free.deleted_count)
    };
    let ((), (behind_count, free_count)) = tokio::join!(writing, deleting);
    assert_eq!(free_count, 1, "a delete no write waits for deletes");
    let behind_still = env
        .db
        .collection::<Document>("messages")
        .find_one(doc! { "_id": id_of(behind) })
        .await
        .unwrap()
        .is_some();
    assert_eq!(
        behind_still,
        behind_count == 0,
        "deletedCount says whether the message is gone"
    );
    eprintln!(
        "the deleteOne that waited behind the update command answered deletedCount \
         {behind_count}: the message is {} MongoDB",
        if behind_still {
            "still in"
        } else {
            "gone from"
        }
    );

    let out = target.run("forced", &["once", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let in_meili = meili_ids(&env).await;
    assert!(
        !in_meili.contains(&message_id(free)),
        "a message MongoDB deleted is not searchable"
    );
    assert_eq!(
        in_meili.contains(&message_id(behind)),
        behind_still,
        "a message is searchable exactly when MongoDB still has it"
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    target.cleanup().await;
}
