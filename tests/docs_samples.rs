//! The sample outputs in the documentation are the binary's own: every
//! sample block in `README.md` and `docs/*.md` must equal what the real
//! `meili-reconciler` prints on a fixed small dataset, once the values that
//! vary from run to run are normalized ([`normalize`]).
//!
//! A sample block is
//!
//! ````text
//! <!-- sample: NAME -->
//! ```text
//! …output…
//! ```
//! <!-- /sample -->
//! ````
//!
//! (the fence may say `json` instead of `text`). The names this test knows:
//!
//! | name | what produces it |
//! |---|---|
//! | `status` | `meili-reconciler status` after a completed `once` |
//! | `http-status` | `GET /status` of a `run` replica once its first run completed, pretty-printed as `jq .` does |
//! | `plan` | `meili-reconciler plan` after that `once`, with new unindexed messages and one message deleted from MongoDB behind the index's back |
//!
//! A block with any other name fails the test, as does a malformed block (no
//! fence right after the opening comment, no closing comment right after
//! the fence).
//!
//! **Refreshing the samples**: `UPDATE_DOC_SAMPLES=1 scripts/test --test
//! docs_samples` rewrites every block in place with the current output
//! instead of comparing (and says which blocks changed); review the diff and
//! commit it.
//!
//! The dataset: the test seeder's default mix of LibreChat's edge cases
//! (temporary, expired, subagent, unfinished, no `user`, …; `SeedSpec`
//! seed 1) at 60 messages and 6 conversations, in a fresh database and
//! index prefix. The seeder is deterministic for a seed; its dates lie
//! around the time of the run, which no sample shows.
//!
//! Every setting is the default except the servers, the database and index
//! prefix (normalized back to the defaults), the `run` replica's listen
//! address, and `serve.follow = false` (interval mode). That last one keeps
//! the samples the same on every server: DocumentDB serves no change streams,
//! so there `run` and `status` are in interval mode whatever the setting,
//! while a replica following change streams shows in `/status` how the
//! reconciliation's own flag writes came back through the stream
//! (`applied` counts, the last event's time), which vary with timing.

use crate::support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mongodb::bson::{doc, DateTime, Document};
use regex::Regex;
use serde_json::Value;
use support::cli::{eventually, free_port, terminate, wait_exit, Target};
use support::seeder::{seed, SeedSpec};

/// The sample names this test can produce.
const KNOWN: [&str; 3] = ["status", "http-status", "plan"];

/// The variable that turns comparing into rewriting.
const UPDATE: &str = "UPDATE_DOC_SAMPLES";

// ---------------------------------------------------------------------------
// Sample blocks in Markdown.

/// One sample block of one file.
#[derive(Debug, Clone)]
struct Block {
    name: String,
    /// 1-based line of the opening comment, for messages.
    line: usize,
    /// Byte range of the body: from the line after the opening fence to the
    /// start of the closing fence's line.
    body: std::ops::Range<usize>,
}

/// The sample blocks of `text`, or what is malformed (with its line).
fn find_blocks(text: &str) -> Result<Vec<Block>, String> {
    let opening = Regex::new(r"^<!--\s*sample:\s*([A-Za-z0-9_-]+)\s*-->\s*$").unwrap();
    let closing = Regex::new(r"^<!--\s*/sample\s*-->\s*$").unwrap();
    let fence = Regex::new(r"^```(text|json)\s*$").unwrap();
    // (byte offset of the line, the line without its newline)
    let mut lines = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        lines.push((offset, line.trim_end_matches(['\n', '\r'])));
        offset += line.len();
    }
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (_, line) = lines[i];
        if closing.is_match(line) {
            return Err(format!(
                "line {}: `<!-- /sample -->` without an opening `<!-- sample: NAME -->`",
                i + 1
            ));
        }
        let Some(found) = opening.captures(line) else {
            if line.trim_start().starts_with("<!-- sample") {
                return Err(format!(
                    "line {}: a sample comment must read `<!-- sample: NAME -->` (NAME: letters, digits, `-`, `_`): {line}",
                    i + 1
                ));
            }
            i += 1;
            continue;
        };
        let name = found[1].to_string();
        let start_line = i + 1;
        if !lines.get(i + 1).is_some_and(|(_, l)| fence.is_match(l)) {
            return Err(format!(
                "line {start_line}: `<!-- sample: {name} -->` must be followed at once by a ```text or ```json fence"
            ));
        }
        let body_start = lines.get(i + 2).map_or(text.len(), |(o, _)| *o);
        let Some(end) = (i + 2..lines.len()).find(|&j| lines[j].1 == "```") else {
            return Err(format!(
                "line {start_line}: sample `{name}`: its fence is never closed"
            ));
        };
        if !lines.get(end + 1).is_some_and(|(_, l)| closing.is_match(l)) {
            return Err(format!(
                "line {start_line}: sample `{name}`: the closing fence (line {}) must be followed at once by `<!-- /sample -->`",
                end + 1
            ));
        }
        blocks.push(Block {
            name,
            line: start_line,
            body: body_start..lines[end].0,
        });
        i = end + 2;
    }
    Ok(blocks)
}

/// `README.md` and every `docs/*.md`, with their sample blocks.
fn documents() -> Vec<(PathBuf, String, Vec<Block>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .filter(|p| p.exists())
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            let blocks = find_blocks(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, text, blocks)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Normalizing what varies.

/// What one test run chose that an operator's deployment names otherwise.
struct RunNames {
    /// `meili.index_prefix` of the run (the samples show the default, none).
    index_prefix: String,
    /// `mongo.database` of the run (the samples show `LibreChat`).
    database: String,
    /// `MEILI_HOST` of the run.
    meili_host: String,
    /// `host:port` of each MongoDB server in `MONGO_URI`.
    mongo_hosts: Vec<String>,
    /// `serve.listen` of the `run` replica, if any.
    listen: Option<String>,
}

/// The output of a run as the docs show it. Names the run chose become what
/// a stock LibreChat deployment has; values that differ from run to run
/// become placeholders in angle brackets. In this order:
///
/// 1. the index prefix → none (`messages`, `convos`: `meili.index_prefix`'s default);
/// 2. the database name → `LibreChat`;
/// 3. the Meilisearch URL → `http://meilisearch:7700`, each MongoDB
///    `host:port` → `mongodb:27017`, the `run` replica's listen address →
///    `127.0.0.1:9464` (LibreChat's compose names and our defaults);
/// 4. RFC 3339 timestamps → `<time>`;
/// 5. replica ids: `host:pid:random` (the default `lease.owner`) →
///    `<host>:<pid>:<random>`, `label:random` → `label:<random>` (the random
///    part is 8 hex digits);
/// 6. JSON numbers under a key ending in `Secs` or `PerSec`, or under
///    `durationMs` (durations, rates, ETAs, expiries) → `<n>`;
/// 7. in text, a number of seconds (`0.2 s`, `174.0s`) and a rate
///    (`279 docs/s`) → `<n> s`, `<n>s`, `<n> docs/s`;
/// 8. version strings `x.y.z` (not part of a longer dotted number) → `<version>`.
///
/// Counts, states, settings and messages are left as they are: they are
/// what a sample is there to show, and the dataset fixes them.
fn normalize(text: &str, names: &RunNames) -> String {
    let mut out = text.to_string();
    // 1, 2: the prefix first, since it starts with the database's name.
    if !names.index_prefix.is_empty() {
        out = out.replace(&names.index_prefix, "");
    }
    if !names.database.is_empty() {
        out = out.replace(&names.database, "LibreChat");
    }
    // 3.
    let meili_host = names.meili_host.trim_end_matches('/');
    if !meili_host.is_empty() {
        out = out.replace(meili_host, "http://meilisearch:7700");
    }
    for host in &names.mongo_hosts {
        out = out.replace(host.as_str(), "mongodb:27017");
    }
    if let Some(listen) = &names.listen {
        out = out.replace(listen.as_str(), "127.0.0.1:9464");
    }
    let rules: [(&str, &str); 7] = [
        // 4.
        (
            r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})",
            "<time>",
        ),
        // 5.
        (
            r"\b[A-Za-z0-9][A-Za-z0-9.-]*:\d+:[0-9a-f]{8}\b",
            "<host>:<pid>:<random>",
        ),
        (r"\b([A-Za-z][A-Za-z0-9._-]*):[0-9a-f]{8}\b", "$1:<random>"),
        // 6.
        (
            r#"("[A-Za-z]*(?:Secs|PerSec)"|"durationMs")(\s*:\s*)-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"#,
            "$1$2<n>",
        ),
        // 7.
        (r"\b\d+(?:\.\d+)? docs/s\b", "<n> docs/s"),
        (r"\b\d+(?:\.\d+)?( ?)s\b", "<n>${1}s"),
        // 8.
        (
            r"(^|[^\d.])v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?([^\d.]|$)",
            "$1<version>$2",
        ),
    ];
    for (pattern, replacement) in rules {
        out = Regex::new(pattern)
            .unwrap()
            .replace_all(&out, replacement)
            .into_owned();
    }
    out
}

/// The `host:port` parts of a MongoDB connection string.
fn mongo_hosts(uri: &str) -> Vec<String> {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn normalize_replaces_what_varies_and_keeps_the_rest() {
    let names = RunNames {
        index_prefix: "t_docs_1_2_abc_".into(),
        database: "t_docs_1_2_abc".into(),
        meili_host: "http://127.0.0.1:26725".into(),
        mongo_hosts: mongo_hosts("mongodb://u:p@127.0.0.1:20922/?tls=true"),
        listen: Some("127.0.0.1:41234".into()),
    };
    assert_eq!(names.mongo_hosts, ["127.0.0.1:20922"]);
    let raw = "messages → t_docs_1_2_abc_messages: indexed 52, deleted 3\n\
               database t_docs_1_2_abc at 127.0.0.1:20922, meili http://127.0.0.1:26725/, http://127.0.0.1:41234/status\n\
               owner:      vm-3.local:325:979eca8e (epoch 1) then api-1:9d75e07c\n\
               last reconciliation completed: 2026-12-05T22:15:06.178Z; finished 2026-12-05T22:15:18.118437877Z\n\
               took 0.2 s, 279 docs/s (read 0.0 s, ack 12 s); expires in: 174.0s\n\
               {\"durationMs\":207,\"docsPerSec\":279.3,\"ackWaitedSecs\":1.2536e-05,\"etaSecs\":null,\"indexed\":52,\n\
               \"nextRunInSecs\": 319, \"bucketMs\": 10, \"epoch\": 2}\n\
               Meilisearch v1.50.0 (meili-reconciler 0.1.0), not 127.0.0.1 nor 1.5";
    let want = "messages → messages: indexed 52, deleted 3\n\
                database LibreChat at mongodb:27017, meili http://meilisearch:7700/, http://127.0.0.1:9464/status\n\
                owner:      <host>:<pid>:<random> (epoch 1) then api-1:<random>\n\
                last reconciliation completed: <time>; finished <time>\n\
                took <n> s, <n> docs/s (read <n> s, ack <n> s); expires in: <n>s\n\
                {\"durationMs\":<n>,\"docsPerSec\":<n>,\"ackWaitedSecs\":<n>,\"etaSecs\":null,\"indexed\":52,\n\
                \"nextRunInSecs\": <n>, \"bucketMs\": 10, \"epoch\": 2}\n\
                Meilisearch <version> (meili-reconciler <version>), not 127.0.0.1 nor 1.5";
    assert_eq!(normalize(raw, &names), want);
    // Counts in a plan's lines are not durations.
    let plan = "  mongo:     52 searchable, 52 indexed, 0 to index";
    assert_eq!(normalize(plan, &names), plan);
}

#[test]
fn sample_blocks_are_found_and_malformed_ones_refused() {
    let text = "intro\n<!-- sample: plan -->\n```text\nline 1\nline 2\n```\n<!-- /sample -->\n\
                more\n<!-- sample: http-status -->\n```json\n{}\n```\n<!-- /sample -->\n";
    let blocks = find_blocks(text).unwrap();
    let found: Vec<(&str, usize, &str)> = blocks
        .iter()
        .map(|b| (b.name.as_str(), b.line, &text[b.body.clone()]))
        .collect();
    assert_eq!(
        found,
        [("plan", 2, "line 1\nline 2\n"), ("http-status", 9, "{}\n")]
    );
    for bad in [
        "<!-- sample: plan -->\ntext\n```text\nx\n```\n<!-- /sample -->\n",
        "<!-- sample: plan -->\n```text\nx\n",
        "<!-- sample: plan -->\n```text\nx\n```\nafter\n",
        "<!-- /sample -->\n",
        "<!-- sample plan -->\n```text\nx\n```\n<!-- /sample -->\n",
    ] {
        assert!(find_blocks(bad).is_err(), "accepted: {bad:?}");
    }
}

// ---------------------------------------------------------------------------
// Producing the samples.

/// A fresh database and index prefix on the test servers, every setting at
/// its default (not the suite's short lease timings) but interval mode (see
/// the module docs).
fn target(tag: &str) -> Target {
    let mut target = Target::new(tag);
    target.env.clear();
    target.set("RECONCILER__SERVE__FOLLOW", "false")
}

fn names_of(target: &Target, listen: Option<String>) -> RunNames {
    RunNames {
        index_prefix: target.prefix.clone(),
        database: target.database.clone(),
        meili_host: target.meili_host.clone(),
        mongo_hosts: mongo_hosts(&target.mongo_uri),
        listen,
    }
}

/// The fixed dataset (see the module docs).
fn dataset() -> SeedSpec {
    SeedSpec {
        messages: 60,
        conversations: 6,
        seed: 1,
        ..SeedSpec::default()
    }
}

/// Runs a command to completion, asserting exit 0; its stdout.
fn stdout_of(target: &Target, args: &[&str]) -> String {
    let out = target.run("", args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "meili-reconciler {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// `status` after a completed `once`, then `plan` after LibreChat wrote new
/// messages (unindexed: `MEILI_NO_SYNC=true`) and a script deleted one
/// indexed message from MongoDB.
async fn status_and_plan() -> (String, String) {
    let target = target("docs_status");
    let db = target.db().await;
    seed(&db, &dataset()).await.expect("seed");
    stdout_of(&target, &["once"]);
    let status = normalize(&stdout_of(&target, &["status"]), &names_of(&target, None));

    let messages = db.collection::<Document>("messages");
    let now = DateTime::now();
    let new: Vec<Document> = (0..12)
        .map(|n| support::follow::new_message("new", n, now))
        .collect();
    messages
        .insert_many(new)
        .await
        .expect("insert new messages");
    let indexed = messages
        .find_one(doc! { "_meiliIndex": true })
        .sort(doc! { "_id": 1 })
        .await
        .expect("read an indexed message")
        .expect("an indexed message");
    messages
        .delete_one(doc! { "_id": indexed.get("_id").unwrap() })
        .await
        .expect("delete a message");
    let plan = normalize(&stdout_of(&target, &["plan"]), &names_of(&target, None));
    target.cleanup().await;
    (status, plan)
}

/// `GET /status` of a `run` replica (interval mode) once its first run
/// completed, as `curl -s …/status | jq .` prints it.
async fn http_status() -> String {
    let listen = format!("127.0.0.1:{}", free_port());
    let target = target("docs_http").set("RECONCILER__SERVE__LISTEN", &listen);
    seed(&target.db().await, &dataset()).await.expect("seed");
    let mut replica = target.spawn("", &["run"]);
    let url = format!("http://{listen}/status");
    let status: Value = eventually(
        support::timing::RUN_BOUND,
        "the run replica's first run to complete",
        || async {
            let status: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
            (status["lastRun"]["outcome"] == "completed").then_some(status)
        },
    )
    .await;
    terminate(&replica);
    let exit = wait_exit(&mut replica, Duration::from_secs(60));
    assert!(exit.success(), "run exits 0 on SIGTERM: {exit:?}");
    let pretty = serde_json::to_string_pretty(&status).expect("JSON");
    target.cleanup().await;
    normalize(&pretty, &names_of(&target, Some(listen)))
}

// ---------------------------------------------------------------------------
// The check.

/// The first line (1-based) where `a` and `b` differ.
fn first_difference(a: &str, b: &str) -> usize {
    let mut lines_a = a.lines();
    let mut lines_b = b.lines();
    let mut line = 1;
    while lines_a.next() == lines_b.next() {
        line += 1;
    }
    line
}

#[tokio::test(flavor = "multi_thread")]
async fn every_sample_in_the_docs_is_the_binarys_output() {
    let documents = documents();
    let mut unknown = Vec::new();
    for (path, _, blocks) in &documents {
        for block in blocks {
            if !KNOWN.contains(&block.name.as_str()) {
                unknown.push(format!(
                    "{}:{}: `{}`",
                    path.display(),
                    block.line,
                    block.name
                ));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "sample blocks of names this test cannot produce (it knows {KNOWN:?}):\n{}",
        unknown.join("\n")
    );
    let wanted = |name: &str| {
        documents
            .iter()
            .any(|(_, _, blocks)| blocks.iter().any(|b| b.name == name))
    };
    let need_status_or_plan = wanted("status") || wanted("plan");
    let need_http = wanted("http-status");
    let (cli, http) = tokio::join!(
        async {
            if need_status_or_plan {
                Some(status_and_plan().await)
            } else {
                None
            }
        },
        async {
            if need_http {
                Some(http_status().await)
            } else {
                None
            }
        }
    );
    let output = |name: &str| -> String {
        let text = match name {
            "status" => cli.as_ref().map(|(s, _)| s.clone()),
            "plan" => cli.as_ref().map(|(_, p)| p.clone()),
            "http-status" => http.clone(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("{name} was not produced"));
        format!("{}\n", text.trim_end())
    };

    let update = std::env::var(UPDATE).is_ok_and(|v| !v.is_empty() && v != "0");
    let mut mismatches = Vec::new();
    for (path, text, blocks) in &documents {
        let mut rewritten = String::with_capacity(text.len());
        let mut copied = 0;
        for block in blocks {
            let want = output(&block.name);
            let have = &text[block.body.clone()];
            if have != want {
                mismatches.push(format!(
                    "{}:{}: sample `{}` differs from the output, first at its line {}.\n\
                     --- in the doc\n{have}--- the output (normalized)\n{want}---",
                    path.display(),
                    block.line,
                    block.name,
                    first_difference(have, &want),
                ));
            }
            rewritten.push_str(&text[copied..block.body.start]);
            rewritten.push_str(&want);
            copied = block.body.end;
        }
        rewritten.push_str(&text[copied..]);
        if update && rewritten != *text {
            std::fs::write(path, rewritten)
                .unwrap_or_else(|e| panic!("rewrite {}: {e}", path.display()));
        }
    }
    if update {
        // Past libtest's capture (it hides a passing test's `eprintln!`),
        // so the lead sees which blocks changed.
        let mut stderr = std::io::stderr().lock();
        for mismatch in &mismatches {
            let first = mismatch.lines().next().unwrap_or("");
            let _ = writeln!(stderr, "{UPDATE}: rewrote {first}");
        }
        if mismatches.is_empty() {
            let _ = writeln!(stderr, "{UPDATE}: every sample was already current");
        }
        return;
    }
    assert!(
        mismatches.is_empty(),
        "{}\n\nIf the new output is right, refresh the samples: {UPDATE}=1 scripts/test --test docs_samples",
        mismatches.join("\n\n")
    );
}
