//! A scoped Meilisearch API key in place of the master key: a key made (with
//! the master key, `POST /keys`) with exactly [`SERVICE_ACTIONS`] on every
//! index runs every command the service has — `once`, `plan`, `verify`,
//! `reindex` (the zero-downtime swap), `run` and `status` — and a key lacking
//! any one of those actions makes a command fail ([`FIRST_NEEDED_BY`]),
//! naming the operation Meilisearch refused and its code: the list is the
//! smallest that works.
//! docs/compatibility.md lists the same actions (checked here too).
//!
//! The key goes where the master key goes (`MEILI_MASTER_KEY`, or
//! `RECONCILER__MEILI__MASTER_KEY`). A Meilisearch without API keys (the
//! repository's stand-in models only the master key) skips the server tests,
//! saying so.

use crate::support;

use std::collections::BTreeSet;
use std::process::Output;
use std::time::Duration;

use meili_reconciler::mongo::Collection;
use mongodb::bson::Document;
use serde_json::{json, Value};
use support::chat_data::{message, seed, server_now, Env};
use support::cli::{eventually, free_port, terminate, wait_exit, Target};
use support::skip::skip;

/// Every key action the service needs, and nothing more: each endpoint of
/// `src/meili.rs` needs one of them (`GET /health` needs none).
const SERVICE_ACTIONS: [&str; 11] = [
    "documents.add",    // POST /indexes/{uid}/documents
    "documents.get",    // GET /indexes/{uid}/documents (ids, digests, verify)
    "documents.delete", // POST /indexes/{uid}/documents/delete-batch
    "indexes.create",   // POST /indexes
    "indexes.get",      // GET /indexes/{uid}
    "indexes.delete",   // DELETE /indexes/{uid} (reindex drops the old index)
    "indexes.swap",     // POST /swap-indexes (reindex)
    "settings.get",     // GET /indexes/{uid}/settings
    "settings.update",  // PATCH /indexes/{uid}/settings
    "stats.get",        // GET /indexes/{uid}/stats
    "tasks.get",        // GET /tasks, GET /tasks/{uid} (also the start-up probe)
];

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The shared Meilisearch, spoken to with its master key.
struct Master {
    server: support::MeiliServer,
    http: reqwest::Client,
}

impl Master {
    fn shared() -> Master {
        Master {
            server: support::meili().clone(),
            http: reqwest::Client::new(),
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.server.request(&self.http, method, path, body).await
    }

    /// A key with `actions` on every index: `Some((uid, key))`, or `None`
    /// when this Meilisearch has no `/keys` route (the stand-in).
    async fn create_key(&self, actions: &[&str]) -> Option<(String, String)> {
        let (status, body) = self
            .send(
                reqwest::Method::POST,
                "/keys",
                Some(json!({
                    "description": "meili-reconciler scoped key test",
                    "actions": actions,
                    "indexes": ["*"],
                    "expiresAt": null,
                })),
            )
            .await;
        if status == 404 {
            return None;
        }
        assert_eq!(status, 201, "POST /keys: {body}");
        Some((
            body["uid"].as_str().expect("key uid").to_string(),
            body["key"].as_str().expect("key").to_string(),
        ))
    }

    async fn delete_key(&self, uid: &str) {
        let (status, body) = self
            .send(reqwest::Method::DELETE, &format!("/keys/{uid}"), None)
            .await;
        assert_eq!(status, 204, "DELETE /keys/{uid}: {body}");
    }

    /// The succeeded swaps of `uid` with another index, as `[a, b]` pairs
    /// (a swap task has no `indexUid`: `indexUids=` does not find it).
    async fn swaps_of(&self, uid: &str) -> Vec<Value> {
        let (status, body) = self
            .send(
                reqwest::Method::GET,
                "/tasks?types=indexSwap&statuses=succeeded&limit=1000",
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|task| task["details"]["swaps"].as_array().unwrap().clone())
            .map(|swap| swap["indexes"].clone())
            .filter(|pair| pair[0] == uid || pair[1] == uid)
            .collect()
    }
}

/// `Some(master)` when the shared Meilisearch has API keys; else the test
/// is skipped, saying so.
async fn with_api_keys() -> Option<Master> {
    let master = Master::shared();
    let (status, _) = master.send(reqwest::Method::GET, "/keys", None).await;
    if status == 404 {
        skip(format!(
            "the configured Meilisearch ({}) has no API keys (GET /keys is 404): \
             the stand-in models only the master key",
            master.server.host
        ));
        return None;
    }
    Some(master)
}

/// A namespace whose replicas use `key`, with its data seeded (a few
/// messages and conversations) and the messages index created (so `plan`
/// reads its settings and stats); with `ghost`, also a document in that
/// index that MongoDB does not have (so `once` compares the id sets and
/// deletes it).
async fn seeded_target(master: &Master, tag: &str, key: &str, ghost: bool) -> (Target, Env) {
    let target = Target::new(tag).with_meili(&master.server.host, key);
    let as_master = Env::for_target(
        &target
            .clone()
            .with_meili(&master.server.host, &master.server.key),
    )
    .await;
    seed(&as_master, 40, 4).await;
    let messages = as_master.uid(Collection::Messages);
    as_master.create_index(&messages, "messageId").await;
    if ghost {
        as_master
            .put_docs(
                &messages,
                &[json!({"messageId": "ghost", "user": "user-1", "text": "gone from MongoDB"})],
            )
            .await;
    }
    (target, as_master)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_the_listed_actions_runs_every_command() {
    let Some(master) = with_api_keys().await else {
        return;
    };
    let (key_uid, key) = master.create_key(&SERVICE_ACTIONS).await.unwrap();
    let (target, env) = seeded_target(&master, "scoped_all", &key, true).await;
    let messages = env.uid(Collection::Messages);

    let out = target.run("scoped", &["plan"]);
    assert_eq!(out.status.code(), Some(0), "plan: {}", text(&out));
    let out = target.run("scoped", &["once"]);
    assert_eq!(out.status.code(), Some(0), "once: {}", text(&out));
    let now = server_now(&env.db).await;
    env.assert_in_step(now, &[]).await;

    let out = target.run("scoped", &["verify"]);
    assert_eq!(out.status.code(), Some(0), "verify: {}", text(&out));

    let out = target.run("scoped", &["reindex"]);
    assert_eq!(out.status.code(), Some(0), "reindex: {}", text(&out));
    let build = env.build_uid(Collection::Messages);
    assert_eq!(
        master.swaps_of(&messages).await,
        [json!([messages, build])],
        "reindex swapped the rebuilt index in"
    );
    env.assert_in_step(now, &[]).await;

    let out = target.run("scoped", &["status"]);
    assert_eq!(out.status.code(), Some(0), "status: {}", text(&out));

    // `run`: its first reconciliation, then a new message indexed (by
    // following change streams, or by the next interval's run on a server
    // without them), then a clean exit on SIGTERM.
    let port = free_port();
    let runner = target
        .clone()
        .set("RECONCILER__SERVE__LISTEN", &format!("127.0.0.1:{port}"))
        .set("RECONCILER__SERVE__INTERVAL", "1s");
    let mut replica = runner.spawn("scoped-run", &["run"]);
    let base = format!("http://127.0.0.1:{port}");
    eventually(
        Duration::from_secs(60),
        "`run`'s first reconciliation with the scoped key",
        || async {
            let status = support::follow::status(&base).await;
            (status["lastRun"]["outcome"] == "completed").then_some(())
        },
    )
    .await;
    let added: Document = message(1_000, now);
    let added_id = added.get_str("messageId").unwrap().to_string();
    env.insert(Collection::Messages, vec![added]).await;
    eventually(
        Duration::from_secs(60),
        "the new message indexed by `run` with the scoped key",
        || async {
            let in_meili = env.meili_docs(Collection::Messages).await;
            in_meili.contains_key(&added_id).then_some(())
        },
    )
    .await;
    terminate(&replica);
    let status = wait_exit(&mut replica, Duration::from_secs(30));
    assert!(
        status.success(),
        "run exits 0 on SIGTERM: {status:?}\n{}",
        replica.stderr_so_far()
    );
    let log = replica.stderr_so_far();
    let errors = replica_log_errors(&log);
    assert!(errors.is_empty(), "run logged errors: {errors:#?}");

    master.delete_key(&key_uid).await;
    env.cleanup().await;
}

/// The JSON log lines at level ERROR.
fn replica_log_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| serde_json::from_str::<Value>(line).is_ok_and(|v| v["level"] == "ERROR"))
        .collect()
}

/// For each action, the first command that needs it (on fresh data and an
/// empty messages index; `once` with a document in that index that MongoDB
/// lacks): a key without that
/// action makes this command fail. The commands before it in the order
/// `plan`, `once`, `reindex` need the action not (`plan` reads,
/// `once` neither swaps nor drops indexes).
const FIRST_NEEDED_BY: [(&str, &str); 11] = [
    ("tasks.get", "plan"),
    ("indexes.get", "plan"),
    ("settings.get", "plan"),
    ("stats.get", "plan"),
    ("indexes.create", "once"),
    ("settings.update", "once"),
    ("documents.add", "once"),
    ("documents.get", "once"),
    ("documents.delete", "once"),
    ("indexes.delete", "reindex"),
    ("indexes.swap", "reindex"),
];

/// `command`, run with a key that has every action but `missing`.
async fn without(master: &Master, missing: &'static str, command: &'static str) -> Output {
    let actions: Vec<&str> = SERVICE_ACTIONS
        .iter()
        .copied()
        .filter(|a| *a != missing)
        .collect();
    let (key_uid, key) = master.create_key(&actions).await.unwrap();
    let tag = format!("without_{missing}");
    let (target, env) = seeded_target(master, &tag, &key, command == "once").await;
    let out = tokio::task::spawn_blocking(move || target.run("scoped", &[command]))
        .await
        .unwrap();
    master.delete_key(&key_uid).await;
    env.cleanup().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_lacking_any_listed_action_fails_naming_the_refusal() {
    let Some(master) = with_api_keys().await else {
        return;
    };
    let covered: BTreeSet<&str> = FIRST_NEEDED_BY.iter().map(|(a, _)| *a).collect();
    assert_eq!(covered, SERVICE_ACTIONS.into_iter().collect());
    let outcomes = futures::future::join_all(
        FIRST_NEEDED_BY
            .iter()
            .map(|(missing, command)| without(&master, missing, command)),
    )
    .await;
    for ((missing, command), out) in FIRST_NEEDED_BY.iter().zip(outcomes) {
        let said = text(&out);
        let refusal = said
            .lines()
            .rfind(|line| line.contains("invalid_api_key"))
            .unwrap_or_default();
        println!(
            "without {missing}: `{command}` exits {:?}: {refusal}",
            out.status.code()
        );
        // Meilisearch answers a key lacking an action as it answers a wrong
        // key (403 invalid_api_key); the service names the operation it
        // refused, or (the start-up check) says the key was rejected.
        if *missing == "tasks.get" {
            assert_eq!(out.status.code(), Some(4), "{said}");
            assert!(refusal.contains("key was rejected"), "{said}");
        } else {
            assert_eq!(
                out.status.code(),
                Some(1),
                "without {missing}, `{command}`: {said}"
            );
            assert!(
                refusal.contains("Meilisearch refused "),
                "without {missing}, `{command}`: {said}"
            );
        }
        assert!(!said.contains(&master.server.key), "the master key leaked");
        if *missing == "indexes.swap" {
            assert!(
                refusal.contains("Meilisearch refused swap indexes")
                    && refusal.contains("invalid_api_key"),
                "{said}"
            );
        }
    }
}

/// docs/compatibility.md lists exactly [`SERVICE_ACTIONS`] (the backquoted
/// `word.word` names of its "Meilisearch API key" section).
#[test]
fn the_compatibility_page_lists_exactly_these_actions() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/compatibility.md"
    ))
    .expect("docs/compatibility.md");
    let section = page
        .split("\n## ")
        .find(|s| s.starts_with("Meilisearch API key"))
        .expect("a `## Meilisearch API key` section");
    let listed: BTreeSet<&str> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| {
            code.split_once('.').is_some_and(|(a, b)| {
                [a, b]
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
            })
        })
        .collect();
    let wanted: BTreeSet<&str> = SERVICE_ACTIONS.into_iter().collect();
    assert_eq!(listed, wanted);
}
