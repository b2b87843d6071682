//! The plan's counts partition the indexable documents even while flags
//! change under them — as they do in production (LibreChat's own plugin sets
//! flags, and an acknowledgement a stopped owner sent keeps being applied by
//! the server after the owner is gone): `indexed + unindexed = indexable`, and
//! `indexable` does not depend on the flags. Two separate count queries over
//! complementary filters cannot promise that (a flag flipped between them is
//! counted in neither, or in both); the counts must come from one query.
//! The backlog gauge's count needs no partition: it reads only the
//! unflagged documents, by LibreChat's sync index.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use meili_reconciler::job::Reconciler;
use meili_reconciler::meili::Meili;
use meili_reconciler::mongo::{self, Collection, Counts};
use meili_reconciler::reconcile::SyncOptions;
use meili_reconciler::serve;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::options::IndexOptions;
use mongodb::{Client, IndexModel};
use support::faults::monitored_client;

/// Indexable messages, `_id` 0..INDEXABLE.
const INDEXABLE: i64 = 1_500;
/// How many `_id`s one flag-flipping update covers (like a small ack range).
const FLIP_CHUNK: i64 = 50;
/// Counts taken while the flags change.
const ROUNDS: usize = 30;

const DAY_MS: i64 = 86_400_000;

/// Indexable messages with every flag state the filters must tell apart
/// (false, absent, true) and every indexable `expiredAt` (absent, null,
/// future), then flagged messages that are not indexable.
fn messages(now: DateTime) -> Vec<Document> {
    let future = DateTime::from_millis(now.timestamp_millis() + DAY_MS);
    let past = DateTime::from_millis(now.timestamp_millis() - DAY_MS);
    let mut docs: Vec<Document> = (0..INDEXABLE)
        .map(|i| {
            // At the current schema version, so the flag alone decides
            // whether a document is processed.
            let mut d = doc! {
                "_id": i, "messageId": format!("m{i}"), "user": "u", "text": "t",
                "isTemporary": false, "_meiliIndexSchemaVersion": 1,
            };
            match i % 3 {
                0 => d.insert(mongo::FLAG, false),
                1 => None,
                _ => d.insert(mongo::FLAG, true),
            };
            match i % 5 {
                0 => d.insert("expiredAt", Bson::Null),
                1 => d.insert("expiredAt", future),
                _ => None,
            };
            d
        })
        .collect();
    let not_indexable = [
        doc! { "isTemporary": true },
        doc! { "expiredAt": past },
        doc! { "user": "" },
        doc! { "user": Bson::Null },
        doc! { "unfinished": true },
    ];
    for (k, fields) in not_indexable.into_iter().enumerate() {
        for j in 0..20 {
            let i = INDEXABLE + 1_000 + (k as i64) * 100 + j;
            let mut d =
                doc! { "_id": i, "messageId": format!("m{i}"), "user": "u", mongo::FLAG: true };
            d.extend(fields.clone());
            docs.push(d);
        }
    }
    docs
}

fn assert_partition(when: &str, counts: &Counts) {
    assert_eq!(
        counts.indexable, INDEXABLE as u64,
        "{when}: indexable must not depend on the flags: {counts:?}"
    );
    assert_eq!(
        counts.indexed + counts.unindexed,
        counts.indexable,
        "{when}: indexed and unindexed must partition the indexable documents: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_partition_the_indexable_documents_while_flags_change() {
    let client = Client::with_uri_str(support::mongo_uri())
        .await
        .expect("mongo client");
    let db = client.database(&support::unique_name("counts"));
    let now = mongo::server_time(&db).await.expect("server time");
    let collection = db.collection::<Document>("messages");
    collection
        .insert_many(messages(now))
        .await
        .expect("insert messages");

    // At rest: only `true` is indexed; false and absent are unindexed; the
    // flagged documents that are not indexable count nowhere.
    let at_rest = mongo::counts(&db, &Default::default(), Collection::Messages, now)
        .await
        .expect("counts");
    assert_partition("at rest", &at_rest);
    assert_eq!(
        at_rest.indexed,
        (0..INDEXABLE).filter(|i| i % 3 == 2).count() as u64
    );

    // A writer sets then clears the flags of the indexable documents in small
    // ascending `_id` ranges, round after round, until the counting is done.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (collection, stop) = (collection.clone(), stop.clone());
        tokio::spawn(async move {
            let mut flag = true;
            let mut updates = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for start in (0..INDEXABLE).step_by(FLIP_CHUNK as usize) {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    collection
                        .update_many(
                            doc! { "_id": { "$gte": start, "$lt": start + FLIP_CHUNK } },
                            doc! { "$set": { mongo::FLAG: flag } },
                        )
                        .await
                        .expect("flip flags");
                    updates += 1;
                }
                flag = !flag;
            }
            updates
        })
    };

    let mut mid_way = 0;
    for round in 1..=ROUNDS {
        let counts = mongo::counts(&db, &Default::default(), Collection::Messages, now)
            .await
            .expect("counts");
        assert_partition(&format!("round {round}, flags changing"), &counts);
        if counts.indexed > 0 && counts.indexed < counts.indexable {
            mid_way += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let updates = writer.await.expect("writer");
    assert!(updates > 0, "the writer never changed a flag");
    assert!(
        mid_way > 0,
        "no count was taken while the flags were changing ({updates} updates)"
    );
    let _ = db.drop().await;
}

/// Indexable messages flagged at another schema version (what an older
/// LibreChat's hook leaves): unprocessed for the plan, flagged all the same.
const OTHER_VERSION: i64 = 40;

/// The name the test gives LibreChat's sync index, to see it named as the
/// backlog count's hint (any name will do: the key is what is looked for).
const SYNC_INDEX: &str = "sync_index_any_name";

/// The backlog every replica counts after every run (`serve::update_backlog`,
/// the gauge's source) is the unflagged searchable documents, document for
/// document of every kind above: one count per collection whose filter is
/// the flag's `$ne: true` and the searchable filter, hinted to LibreChat's
/// sync index `{_meiliIndex, isTemporary, expiredAt}` where the collection
/// has it — so the server reads the backlog's own entries, not every
/// indexable document (the plan's aggregation must) nor every flagged one
/// (what the unprocessed condition's other branch reads). It is the plan's
/// `unindexed` less the documents flagged at another schema version, which
/// the plan counts and a run sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_count_is_the_unflagged_count_by_the_sync_index() {
    let (client, log) = monitored_client("backlog-count", true, None).await;
    let db = client.database(&support::unique_name("backlog"));
    let now = mongo::server_time(&db).await.expect("server time");
    let messages_handle = db.collection::<Document>("messages");
    let mut docs = messages(now);
    docs.extend((0..OTHER_VERSION).map(|j| {
        let i = INDEXABLE + 5_000 + j;
        doc! { "_id": i, "messageId": format!("m{i}"), "user": "u", "text": "t",
        "isTemporary": false, mongo::FLAG: true, "_meiliIndexSchemaVersion": 0 }
    }));
    messages_handle
        .insert_many(docs)
        .await
        .expect("insert messages");
    messages_handle
        .create_index(
            IndexModel::builder()
                .keys(doc! { mongo::FLAG: 1, "isTemporary": 1, "expiredAt": 1 })
                .options(IndexOptions::builder().name(SYNC_INDEX.to_string()).build())
                .build(),
        )
        .await
        .expect("create the sync index");

    let meili = support::meili();
    let reconciler = Reconciler {
        db: db.clone(),
        meili: Meili::new(&meili.host, Some(&meili.key)).expect("meili client"),
        sync: SyncOptions::default(),
    };
    let before = log.all().len();
    serve::update_backlog(&reconciler).await;
    let sent = log.all()[before..].to_vec();
    for collection in Collection::ALL {
        let counts: Vec<_> = sent
            .iter()
            .filter(|s| s.name == "aggregate" && s.collection() == Some(collection.name()))
            .collect();
        assert_eq!(counts.len(), 1, "one count on {collection:?}: {counts:?}");
        let command = &counts[0].command;
        // The first condition of the `$match` is the flag's.
        let flag_condition = command
            .get_array("pipeline")
            .ok()
            .and_then(|p| p.first())
            .and_then(Bson::as_document)
            .and_then(|stage| stage.get_document("$match").ok())
            .and_then(|m| m.get_array("$and").ok())
            .and_then(|all| all.first())
            .and_then(Bson::as_document)
            .cloned();
        assert_eq!(
            flag_condition,
            Some(doc! { mongo::FLAG: { "$ne": true } }),
            "the backlog count is restricted to the unflagged documents: {command:?}"
        );
        // `conversations` does not exist here: no index to name.
        let expected_hint = (collection == Collection::Messages).then_some(SYNC_INDEX);
        assert_eq!(
            command.get_str("hint").ok(),
            expected_hint,
            "the backlog count names the sync index where there is one: {command:?}"
        );
    }

    let unflagged = (0..INDEXABLE).filter(|i| i % 3 != 2).count() as u64;
    let plan = mongo::counts(&db, &Default::default(), Collection::Messages, now)
        .await
        .expect("counts");
    assert_eq!(plan.unindexed, unflagged + OTHER_VERSION as u64, "{plan:?}");
    let backlog = mongo::count_unflagged(&db, &Default::default(), Collection::Messages, now)
        .await
        .expect("backlog count");
    assert_eq!(backlog, unflagged);
    let _ = db.drop().await;
}
