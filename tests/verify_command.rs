//! `meili-reconciler verify` (a real process): planted differences — a
//! flagged document missing from Meilisearch, ghosts in both indexes, a
//! stale version under a flag that says "indexed" — are each reported (exit
//! 1; text and JSON with counts and example ids), `--index` limits the
//! comparison, `--repair` fixes exactly them (exit 0), and a second
//! `verify` exits 0 with every document exact.

use crate::support;

use meili_reconciler::mongo::Collection;
use serde_json::{json, Value};
use support::chat_data::{seed, server_now, Env};
use support::cli::{is_labelled, Target};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_each_difference_and_repair_fixes_them() {
    let target = Target::new("verify");
    let env = Env::for_target(&target).await;
    seed(&env, 1_000, 100).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = target.run("op", &["verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "clean after a sync: {}",
        text(&out)
    );

    // Plant one difference of each kind.
    let messages = env.uid(Collection::Messages);
    let convos = env.uid(Collection::Conversations);
    let in_meili = env.meili_docs(Collection::Messages).await;
    let mut ids = in_meili.keys().cloned();
    let (missing, stale) = (ids.next().unwrap(), ids.next().unwrap());
    env.delete_docs(&messages, std::slice::from_ref(&missing))
        .await;
    let mut old = in_meili[&stale].clone();
    old["text"] = json!("AN OLDER VERSION");
    env.put_docs(
        &messages,
        &[
            old,
            json!({"messageId": "ghost-1", "user": "user-1", "text": "gone from MongoDB"}),
        ],
    )
    .await;
    env.put_docs(
        &convos,
        &[json!({"conversationId": "ghost-conv", "user": "user-1", "title": "gone"})],
    )
    .await;

    // Reported, as text...
    let out = target.run("op", &["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{report}");
    assert!(
        report.contains("missing:    1 (1 flagged as indexed)"),
        "{report}"
    );
    assert!(
        report.contains(&missing) && report.contains(&stale),
        "{report}"
    );
    assert!(
        report.contains("ghost-1") && report.contains("ghost-conv"),
        "{report}"
    );
    // ...and as JSON.
    let out = target.run("op", &["verify", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["clean"], false);
    let m = &report["indexes"][0];
    assert_eq!(m["collection"], "messages");
    assert_eq!(
        m["missing"],
        json!({"count": 1, "flagged": 1, "examples": [missing]})
    );
    assert_eq!(
        m["unexpected"],
        json!({"count": 1, "examples": ["ghost-1"]})
    );
    assert_eq!(
        m["stale"],
        json!({"count": 1, "flagged": 1, "examples": [stale]})
    );
    assert_eq!(m["matching"], m["mongoIndexable"].as_u64().unwrap() - 2);
    let c = &report["indexes"][1];
    assert_eq!(
        c["unexpected"],
        json!({"count": 1, "examples": ["ghost-conv"]})
    );
    assert_eq!(c["missing"]["count"], 0);
    assert_eq!(c["stale"]["count"], 0);
    // --index limits the comparison.
    let out = target.run("op", &["verify", "--index", "convos", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["indexes"].as_array().unwrap().len(), 1);
    assert_eq!(report["indexes"][0]["collection"], "conversations");
    // verify wrote nothing and took no lease.
    assert_eq!(
        env.meili_docs(Collection::Messages).await.len(),
        in_meili.len()
    );
    let lease = target.lease().await.unwrap();
    assert!(
        is_labelled(lease.get_str("owner").unwrap(), "first"),
        "{lease}"
    );

    // --repair fixes exactly those.
    let out = target.run("repairer", &["verify", "--repair", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = json_of(&out);
    let m = &summary["collections"][0];
    assert_eq!(m["verified"]["missing"]["count"], 1, "{summary}");
    assert_eq!(
        m["indexed"], 2,
        "the missing and the stale document sent: {summary}"
    );
    assert_eq!(m["deleted"], 1, "the ghost deleted: {summary}");
    assert_eq!(summary["collections"][1]["deleted"], 1, "{summary}");

    let out = target.run("op", &["verify", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(json_of(&out)["clean"], true);
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}

/// `once --deep` compares contents, not only ids: a stale version under a
/// flag that says "indexed" survives `once --force` (ids and counts agree)
/// and is fixed by `once --deep`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_deep_repairs_what_counts_and_ids_cannot_see() {
    let target = Target::new("deep");
    let env = Env::for_target(&target).await;
    seed(&env, 500, 50).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let messages = env.uid(Collection::Messages);
    let in_meili = env.meili_docs(Collection::Messages).await;
    let stale = in_meili.keys().next().unwrap().clone();
    let mut old = in_meili[&stale].clone();
    old["text"] = json!("AN OLDER VERSION");
    env.put_docs(&messages, &[old]).await;

    let out = target.run("ids-only", &["once", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let still = env.meili_docs(Collection::Messages).await;
    assert_eq!(still[&stale]["text"], json!("AN OLDER VERSION"));

    let out = target.run("deep", &["once", "--deep", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 stale before repair"),
        "{}",
        text(&out)
    );
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    env.cleanup().await;
}
