//! Both ways an indexing pass reads MongoDB (docs/design.md §4.6) index the
//! same documents: plain `_id`-range pages of every document, kept in Rust,
//! when the pass expects more than two pages of unindexed documents; the
//! server's unindexed filter when it expects fewer. In the steady state
//! the head start (§4.6) reads the backlog's first page beside the plan's
//! counts: the whole pass when it is shorter than a page, one wasted page
//! before the scan when it is not.

use crate::support;

use meili_reconciler::lease::Guard;
use meili_reconciler::mongo::Collection;
use meili_reconciler::progress::Progress;
use meili_reconciler::reconcile::{reconcile, RunSummary};
use mongodb::bson::{doc, Document};
use support::chat_data::{indexed, seed, server_now, Env};
use support::faults::{monitored_client, CommandLog};

/// How a run read the messages, from the `find`s it sent: how many plain
/// pages (`_id` order, no filter but where the page starts) and how many
/// through the server's unindexed filter.
#[derive(Debug, PartialEq)]
struct Reads {
    plain: usize,
    filtered: usize,
}

fn messages_reads(log: &CommandLog, from: usize) -> Reads {
    // Both read whole documents (their `text` among the fields) in `_id`
    // order; a rebuild's flag reset and a drift check's id scan read less.
    let finds: Vec<Document> = log.all()[from..]
        .iter()
        .filter(|sent| sent.name == "find" && sent.collection() == Some("messages"))
        .filter(|sent| sent.command.get_document("sort").ok() == Some(&doc! { "_id": 1 }))
        .filter(|sent| {
            let projection = sent.command.get_document("projection");
            projection.is_ok_and(|fields| fields.contains_key("text"))
        })
        .map(|sent| {
            sent.command
                .get_document("filter")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    let filtered = finds
        .iter()
        .filter(|f| f.to_string().contains("_meiliIndex"))
        .count();
    let plain = finds
        .iter()
        .filter(|f| f.keys().all(|key| key == "_id"))
        .count();
    assert_eq!(
        plain + filtered,
        finds.len(),
        "reads of another kind: {finds:#?}"
    );
    Reads { plain, filtered }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_scan_and_the_filtered_read_index_the_same_documents() {
    let mut env = Env::new("read_paths").await;
    // Pages of 100: 3,000 seeded messages (every edge case of indexability)
    // are many pages, so the first run scans.
    env.opts.batch_docs = 100;
    env.opts.threshold = 0;
    let now = seed(&env, 3_000, 300).await;
    let (client, log) = monitored_client("read_paths", true, None).await;
    let db = client.database(env.db.name());
    let (guard, progress) = (Guard::unfenced(), Progress::new());
    let run = |what: &'static str| {
        let (db, env, guard, progress, log) = (&db, &env, &guard, &progress, &log);
        async move {
            let from = log.all().len();
            let summary: RunSummary = reconcile(db, &env.meili, &env.opts, guard, progress)
                .await
                .expect(what);
            (summary, messages_reads(log, from))
        }
    };
    let (summary, reads) = run("first run (plain scan)").await;
    assert!(indexed(&summary) > 2_000, "{summary}");
    assert!(reads.plain > 0, "many pages to index: a plain scan");
    assert_eq!(reads.filtered, 0, "no index yet: no head start");
    env.assert_in_step(now, &[]).await;

    // A backlog of 1,000 among flagged documents (still a scan: it must pass
    // the flagged ones over), some of them made temporary meanwhile.
    let messages = env.db.collection::<Document>("messages");
    let backlog = doc! { "messageId": { "$regex": "^msg-1[0-9][0-9][0-9]$" } };
    messages
        .update_many(
            backlog.clone(),
            doc! { "$set": { "_meiliIndex": false, "text": "edited in the backlog" } },
        )
        .await
        .unwrap();
    messages
        .update_many(
            doc! { "messageId": { "$regex": "^msg-1[0-9][0-9]0$" } },
            doc! { "$set": { "isTemporary": true } },
        )
        .await
        .unwrap();
    let now = server_now(&env.db).await;
    let (summary, reads) = run("second run (plain scan)").await;
    assert!(indexed(&summary) > 0, "{summary}");
    // The head start's one filtered page (design §4.6) is full: the counts
    // then choose the scan for the pass.
    assert_eq!(
        reads.filtered, 1,
        "the head start reads one page of the backlog, and no more"
    );
    assert!(reads.plain > 0, "a backlog of ten pages: a plain scan");
    env.assert_in_step(now, &[]).await;

    // 50 unindexed: under a page, read by the server's filter.
    messages
        .update_many(
            doc! { "messageId": { "$regex": "^msg-2[0-4][0-9]$" } },
            doc! { "$set": { "_meiliIndex": false, "text": "edited, few" } },
        )
        .await
        .unwrap();
    let now = server_now(&env.db).await;
    let (summary, reads) = run("third run (filtered)").await;
    assert!(indexed(&summary) > 0, "{summary}");
    // Under a page: the head start's page is the whole backlog, sent as
    // the pass's first page, which the pass does not read again.
    assert_eq!(
        reads,
        Reads {
            plain: 0,
            filtered: 1
        },
        "under a page: one filtered read"
    );
    env.assert_in_step(now, &[]).await;
    let shown = env.meili_docs(Collection::Messages).await;
    assert!(
        shown
            .values()
            .any(|d| d["text"] == "edited, few" || d["text"] == "edited in the backlog"),
        "the edits reached Meilisearch"
    );
    env.cleanup().await;
}

/// A read-back (an acknowledgement that did not match everything, a refused
/// batch) finds the same documents by `_id` list as by `_id` range, for ids
/// scattered over the collection as follow mode's micro-batches are (a new
/// message beside edits of old ones) — including ids no longer there — and
/// holds nothing but the wanted documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_back_by_id_list_finds_what_a_range_read_finds() {
    use meili_reconciler::mongo::{read_states, ReadBack};
    use mongodb::bson::{oid::ObjectId, Bson};

    let env = Env::new("read_back_ids").await;
    seed(&env, 600, 10).await;
    let messages = env.db.collection::<Document>("messages");
    let mut all: Vec<Bson> = Vec::new();
    let mut cursor = messages
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .projection(doc! { "_id": 1 })
        .await
        .unwrap();
    use futures::TryStreamExt;
    while let Some(d) = cursor.try_next().await.unwrap() {
        all.push(d.get("_id").unwrap().clone());
    }
    // Every other document, from the first to the last (300 ids: more than
    // one `$in` list), and one id that is not there (deleted meanwhile).
    let mut wanted: Vec<Bson> = all.iter().step_by(2).cloned().collect();
    wanted.push(Bson::ObjectId(ObjectId::new()));
    wanted.sort_by_key(|id| id.as_object_id().map(|o| o.bytes()));
    assert!(wanted.len() > 200, "several `$in` lists: {}", wanted.len());

    let m = Collection::Messages;
    let by_ids = read_states(&env.db, &Default::default(), m, &wanted, ReadBack::Ids)
        .await
        .unwrap();
    let by_range = read_states(&env.db, &Default::default(), m, &wanted, ReadBack::Range)
        .await
        .unwrap();
    let ids = |docs: &[Document]| {
        let mut ids: Vec<String> = docs
            .iter()
            .map(|d| d.get_object_id("_id").unwrap().to_hex())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        by_ids.len(),
        wanted.len() - 1,
        "every wanted document that exists"
    );
    assert_eq!(ids(&by_ids), ids(&by_range));
    let versions = |docs: &[Document]| {
        let mut v: Vec<String> = docs.iter().map(|d| format!("{d}")).collect();
        v.sort();
        v
    };
    assert_eq!(versions(&by_ids), versions(&by_range), "the same fields");
    env.cleanup().await;
}
