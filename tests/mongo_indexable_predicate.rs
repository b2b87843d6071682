//! `mongo::is_indexable` (the Rust predicate) says exactly what
//! `mongo::indexable_filter` (the MongoDB filter) selects, document by
//! document, on the seeder's edge cases plus odd values a real database may
//! hold (arrays, non-date `expiredAt`, non-boolean flags).

mod support;

use std::collections::BTreeSet;

use futures::TryStreamExt;
use meili_reconciler::mongo::{self, Collection};
use mongodb::bson::{doc, Bson, DateTime, Document};
use support::seeder::{seed, SeedSpec};

fn odd_documents(collection: Collection, now: DateTime) -> Vec<Document> {
    let before = DateTime::from_millis(now.timestamp_millis() - 60_000);
    let after = DateTime::from_millis(now.timestamp_millis() + 3_600_000);
    let pk = collection.primary_key();
    let variants: Vec<Document> = vec![
        doc! { "user": "" },
        doc! { "user": Bson::Null },
        doc! {},
        doc! { "user": ["a", ""] },
        doc! { "user": [Bson::Null] },
        doc! { "user": ["a"] },
        doc! { "user": Bson::Array(vec![]) },
        doc! { "user": 5 },
        doc! { "user": "u", "isTemporary": [true] },
        doc! { "user": "u", "isTemporary": 1 },
        doc! { "user": "u", "isTemporary": "true" },
        doc! { "user": "u", "isTemporary": Bson::Null },
        doc! { "user": "u", "isTemporary": Bson::Array(vec![]) },
        doc! { "user": "u", "expiredAt": before },
        doc! { "user": "u", "expiredAt": after },
        doc! { "user": "u", "expiredAt": "2001-01-01T00:00:00Z" },
        doc! { "user": "u", "expiredAt": 5 },
        doc! { "user": "u", "expiredAt": [before] },
        doc! { "user": "u", "expiredAt": [after, 3] },
        doc! { "user": "u", "expiredAt": Bson::Array(vec![]) },
        doc! { "user": "u", "unfinished": true },
        doc! { "user": "u", "unfinished": [true] },
        doc! { "user": "u", "unfinished": "yes" },
    ];
    variants
        .into_iter()
        .enumerate()
        .map(|(i, mut d)| {
            d.insert(pk, format!("odd-{i}"));
            d
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_predicate_selects_what_the_filter_selects() {
    let db = support::lease_harness::database("indexable").await;
    let report = seed(
        &db,
        &SeedSpec {
            messages: 2_000,
            conversations: 300,
            ..SeedSpec::default()
        },
    )
    .await
    .unwrap();
    let now = mongo::server_time(&db).await.unwrap();
    for collection in Collection::ALL {
        let handle = db.collection::<Document>(collection.name());
        handle
            .insert_many(odd_documents(collection, now))
            .await
            .unwrap();
        let by_filter: BTreeSet<String> = handle
            .find(mongo::indexable_filter(collection, now))
            .projection(doc! { "_id": 1 })
            .await
            .unwrap()
            .try_collect::<Vec<Document>>()
            .await
            .unwrap()
            .iter()
            .map(|d| mongo::id_key(d.get("_id").unwrap()))
            .collect();
        let all: Vec<Document> = handle
            .find(doc! {})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let by_predicate: BTreeSet<String> = all
            .iter()
            .filter(|d| mongo::is_indexable(collection, d, now))
            .map(|d| mongo::id_key(d.get("_id").unwrap()))
            .collect();
        let disagree: Vec<_> = all
            .iter()
            .filter(|d| {
                let key = mongo::id_key(d.get("_id").unwrap());
                by_filter.contains(&key) != by_predicate.contains(&key)
            })
            .collect();
        assert!(
            disagree.is_empty(),
            "{}: the predicate and the filter disagree on {disagree:#?}",
            collection.name()
        );
        // Both sides saw the edge cases: some indexable, some not.
        let seeded = match collection {
            Collection::Messages => &report.messages,
            Collection::Conversations => &report.conversations,
        };
        assert!(by_filter.len() >= seeded.indexable, "{}", collection.name());
        assert!(by_filter.len() < all.len());
    }
    db.drop().await.unwrap();
}
