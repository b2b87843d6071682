//! A zero-downtime reindex keeps search answering from a complete index: a
//! search loop running throughout never sees fewer documents than before
//! the reindex. Documents inserted and edited while the build runs end up in
//! the new index, current and flagged, and the index ends with exactly the
//! expected projection of every indexable document.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use meili_reconciler::lease::Guard;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reindex, ReindexOptions, SyncOptions};
use mongodb::bson::{doc, oid::ObjectId, Document};
use serde_json::{json, Value};
use support::chat_data::{seed, server_now, Env};

/// One `POST /indexes/{uid}/search` with `q: ""`: the estimated total hits.
async fn search_total(
    http: &reqwest::Client,
    host: &str,
    key: &str,
    uid: &str,
) -> Result<u64, String> {
    let response = http
        .post(format!("{host}/indexes/{uid}/search"))
        .bearer_auth(key)
        .json(&json!({ "q": "", "limit": 1 }))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {body}"));
    }
    body["estimatedTotalHits"]
        .as_u64()
        .ok_or_else(|| format!("no estimatedTotalHits in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_answers_from_a_complete_index_throughout() {
    let Some(standin) = support::standin::private_standin() else {
        return;
    };
    let knobs = standin.knobs();
    let env = Env::on_standin(&standin, "ri_search").await;
    // Fewer than 1,000 indexable messages: Meilisearch's estimate is exact
    // below its default maxTotalHits.
    seed(&env, 900, 100).await;
    env.run().await.expect("initial reconciliation");
    let live = env.uid(Collection::Messages);
    let before = env.meili.document_count(&live).await.unwrap();
    assert!(before > 500, "{before}");

    // Every task takes a while from now on, so the build spans many searches.
    knobs.set_latency(120).await;
    let stop = Arc::new(AtomicBool::new(false));
    let searcher = {
        let (stop, host, key, uid) = (
            stop.clone(),
            standin.host.clone(),
            standin.key.clone(),
            live.clone(),
        );
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut totals = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                totals.push(search_total(&http, &host, &key, &uid).await);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            totals.push(search_total(&http, &host, &key, &uid).await);
            totals
        })
    };
    let progress = Progress::new();
    let run = {
        let (db, meili, progress) = (env.db.clone(), env.meili.clone(), progress.clone());
        let opts = SyncOptions {
            batch_docs: 25,
            // Two tasks in flight at a time keep the build slow enough to
            // span the changes below.
            in_flight: 2,
            ..env.opts.clone()
        };
        tokio::spawn(async move {
            reindex(
                &db,
                &meili,
                &opts,
                &ReindexOptions::default(),
                &Guard::unfenced(),
                &progress,
            )
            .await
        })
    };

    // Once the build index holds documents, the build has read past the
    // first message: edit that one, and insert new ones.
    let build = env.build_uid(Collection::Messages);
    loop {
        assert!(
            !run.is_finished(),
            "the reindex ended before the build was seen"
        );
        if env.meili.index(&build).await.unwrap().is_some()
            && env.meili.document_count(&build).await.unwrap() > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let messages = env.db.collection::<Document>("messages");
    let first = env.mongo_docs(Collection::Messages).await.remove(0);
    let first_id = first.get_str("messageId").unwrap().to_string();
    let edited_at = server_now(&env.db).await;
    // As LibreChat does on an edit: new text and updatedAt, the live index
    // updated, the flag set.
    messages
        .update_one(
            doc! { "_id": first.get("_id").unwrap() },
            doc! { "$set": { "text": "EDITED during the build", "updatedAt": edited_at } },
        )
        .await
        .unwrap();
    let mut edited = env
        .meili_docs(Collection::Messages)
        .await
        .remove(&first_id)
        .unwrap();
    edited["text"] = json!("EDITED during the build");
    env.put_docs(&live, &[edited]).await;
    messages
        .update_one(
            doc! { "_id": first.get("_id").unwrap() },
            doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } },
        )
        .await
        .unwrap();
    let inserted: Vec<Document> = (0..20)
        .map(|i| {
            doc! {
                "_id": ObjectId::new(),
                "messageId": format!("during-build-{i}"),
                "conversationId": "conv-new",
                "user": "user-1",
                "sender": "User",
                "text": format!("written while the reindex ran {i}"),
                "createdAt": edited_at,
                "updatedAt": edited_at,
            }
        })
        .collect();
    env.insert(Collection::Messages, inserted).await;
    assert_eq!(
        progress.snapshot().phase,
        "reindex build messages",
        "the changes were made while the build ran"
    );

    let summary = run.await.unwrap().expect("reindex");
    println!("{summary}");
    stop.store(true, Ordering::Relaxed);
    let totals = searcher.await.unwrap();

    // Search never answered from an incomplete index.
    assert!(totals.len() > 10, "the search loop ran: {}", totals.len());
    for (i, total) in totals.iter().enumerate() {
        let total = total
            .as_ref()
            .unwrap_or_else(|e| panic!("search {i} failed: {e}"));
        assert!(
            *total >= before,
            "search {i} saw {total} documents, fewer than the {before} before the reindex"
        );
    }
    assert_eq!(
        totals.last().unwrap().as_ref().unwrap(),
        &(before + 20),
        "the last search saw the new index"
    );

    // The new index holds the edit and the insertions, all flagged, and
    // exactly the expected documents; the old index is gone.
    let in_meili = env.meili_docs(Collection::Messages).await;
    assert_eq!(
        in_meili[&first_id]["text"],
        json!("EDITED during the build")
    );
    for i in 0..20 {
        assert!(in_meili.contains_key(&format!("during-build-{i}")));
    }
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    for c in Collection::ALL {
        assert!(env.meili.index(&env.build_uid(c)).await.unwrap().is_none());
    }
    env.cleanup().await;
}
