//! The Rust side of LibreChat's rules says exactly what their MongoDB
//! filters select, document by document, on the seeder's edge cases plus odd
//! values a real database may hold (arrays, non-date `expiredAt`,
//! non-boolean flags, `null` exclusion paths, numbers of every type as
//! schema versions): `searchable::is_searchable` and `searchable::filter`,
//! each retention branch (`Retention::of` and `Retention::filter`, what an
//! acknowledgement statement re-checks), `markers::is_processed` and
//! `markers::processed_filter`, and `mongo::is_unindexed` and
//! `mongo::unindexed_filter` (and its unflagged part, `Backlog::Unflagged`,
//! also as read page by page through LibreChat's backlog index, which
//! `mongo::backlog_index` names only when it holds every document).

use crate::support;

use std::collections::BTreeSet;

use futures::TryStreamExt;
use meili_reconciler::librechat::searchable::{self, Retention};
use meili_reconciler::librechat::{markers, Rules};
use meili_reconciler::mongo::{self, Collection};
use mongodb::bson::{doc, Bson, DateTime, Document};
use support::seeder::{seed, SeedSpec};

fn odd_documents(collection: Collection, now: DateTime) -> Vec<Document> {
    let before = DateTime::from_millis(now.timestamp_millis() - 60_000);
    let after = DateTime::from_millis(now.timestamp_millis() + 3_600_000);
    let pk = collection.primary_key();
    let excluded = match collection {
        Collection::Messages => "subagentTask",
        Collection::Conversations => "subagentThread",
    };
    let mut variants: Vec<Document> = vec![
        doc! { "user": "" },
        doc! { "user": Bson::Null },
        doc! {},
        doc! { "user": ["a", ""] },
        doc! { "user": [Bson::Null] },
        doc! { "user": ["a"] },
        doc! { "user": Bson::Array(vec![]) },
        doc! { "user": 5 },
        doc! { "user": "u", "unfinished": true },
        doc! { "user": "u", "unfinished": [true] },
        doc! { "user": "u", "unfinished": "yes" },
        doc! { "user": "u", excluded: { "status": "running" } },
        doc! { "user": "u", excluded: Bson::Null },
        doc! { "user": "u", excluded: Bson::Array(vec![]) },
        doc! { "user": "u", "isTemporary": false, "expiredAt": after, excluded: {} },
    ];
    // Every retention combination the filter's three branches tell apart.
    let temporaries = [
        None,
        Some(Bson::Boolean(false)),
        Some(Bson::Boolean(true)),
        Some(Bson::Null),
        Some(Bson::Array(vec![Bson::Boolean(true)])),
        Some(Bson::Array(vec![Bson::Boolean(true), Bson::Boolean(false)])),
        Some(Bson::Array(vec![Bson::Null])),
        Some(Bson::Array(vec![])),
        Some(Bson::Int32(0)),
        Some(Bson::Int32(1)),
        Some(Bson::String("false".into())),
    ];
    let expiries = [
        None,
        Some(Bson::Null),
        Some(Bson::DateTime(before)),
        Some(Bson::DateTime(after)),
        Some(Bson::String("2100-01-01T00:00:00Z".into())),
        Some(Bson::Int32(5)),
        Some(Bson::Array(vec![Bson::DateTime(before)])),
        Some(Bson::Array(vec![Bson::DateTime(after), Bson::Int32(3)])),
        Some(Bson::Array(vec![Bson::Null])),
        Some(Bson::Array(vec![])),
    ];
    for temporary in &temporaries {
        for expiry in &expiries {
            let mut d = doc! { "user": "u" };
            if let Some(t) = temporary {
                d.insert("isTemporary", t.clone());
            }
            if let Some(e) = expiry {
                d.insert("expiredAt", e.clone());
            }
            variants.push(d);
        }
    }
    // Markers: the flag and the schema version, in every type.
    let flags = [
        None,
        Some(Bson::Boolean(true)),
        Some(Bson::Boolean(false)),
        Some(Bson::Array(vec![Bson::Boolean(true)])),
    ];
    let versions = [
        None,
        Some(Bson::Int32(1)),
        Some(Bson::Int64(1)),
        Some(Bson::Double(1.0)),
        Some(Bson::Int32(2)),
        Some(Bson::String("1".into())),
        Some(Bson::Array(vec![Bson::Int32(1)])),
    ];
    for flag in &flags {
        for version in &versions {
            let mut d = doc! { "user": "u", "isTemporary": false };
            if let Some(f) = flag {
                d.insert(markers::FLAG, f.clone());
            }
            if let Some(v) = version {
                d.insert(markers::SCHEMA_VERSION, v.clone());
            }
            variants.push(d);
        }
    }
    variants
        .into_iter()
        .enumerate()
        .map(|(i, mut d)| {
            d.insert(pk, format!("odd-{i}"));
            d
        })
        .collect()
}

/// The `_id` keys of the documents of `handle` that `filter` selects.
async fn selected(handle: &mongodb::Collection<Document>, filter: Document) -> BTreeSet<String> {
    handle
        .find(filter)
        .projection(doc! { "_id": 1 })
        .await
        .unwrap()
        .try_collect::<Vec<Document>>()
        .await
        .unwrap()
        .iter()
        .map(|d| mongo::id_key(d.get("_id").unwrap()))
        .collect()
}

/// Asserts that `predicate` holds for exactly the documents `by_filter` names.
fn assert_same(
    what: &str,
    all: &[Document],
    by_filter: &BTreeSet<String>,
    predicate: impl Fn(&Document) -> bool,
) {
    let disagree: Vec<_> = all
        .iter()
        .filter(|d| {
            let key = mongo::id_key(d.get("_id").unwrap());
            by_filter.contains(&key) != predicate(d)
        })
        .collect();
    assert!(
        disagree.is_empty(),
        "{what}: the predicate and the filter disagree on {disagree:#?}"
    );
    // Both sides saw the edge cases: some selected, some not.
    assert!(
        !by_filter.is_empty() && by_filter.len() < all.len(),
        "{what}: {} of {}",
        by_filter.len(),
        all.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_predicate_selects_what_the_filter_selects() {
    let db = support::lease_harness::database("indexable").await;
    let rules = Rules::default();
    let report = seed(
        &db,
        &SeedSpec {
            messages: 2_000,
            conversations: 300,
            flag_true: 0.1,
            ..SeedSpec::default()
        },
    )
    .await
    .unwrap();
    let now = mongo::server_time(&db).await.unwrap();
    for collection in Collection::ALL {
        let name = collection.name();
        let handle = db.collection::<Document>(name);
        handle
            .insert_many(odd_documents(collection, now))
            .await
            .unwrap();
        let all: Vec<Document> = handle
            .find(doc! {})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();

        let searchable = selected(&handle, searchable::filter(&rules, collection, now)).await;
        assert_same(&format!("{name} searchable"), &all, &searchable, |d| {
            searchable::is_searchable(&rules, collection, d, now)
        });
        for branch in [Retention::Permanent, Retention::Expiring, Retention::Legacy] {
            let in_branch = selected(
                &handle,
                searchable::branch_filter(&rules, collection, branch, now),
            )
            .await;
            // A document may match two branches (arrays); the predicate
            // names the first, the acknowledgement re-checks that one.
            assert_same(
                &format!("{name} branch {branch:?}"),
                &all,
                &in_branch,
                |d| {
                    searchable::is_searchable(&rules, collection, d, now)
                        && matches_branch(d, branch, now)
                },
            );
        }
        let processed = selected(&handle, markers::processed_filter(&rules)).await;
        assert_same(&format!("{name} processed"), &all, &processed, |d| {
            markers::is_processed(&rules, d)
        });
        let unindexed = selected(&handle, mongo::unindexed_filter(&rules, collection, now)).await;
        assert_same(&format!("{name} unindexed"), &all, &unindexed, |d| {
            mongo::is_unindexed(&rules, collection, d, now)
        });
        // The narrow read of a backlog the plan found free of documents
        // flagged at another schema version: the unflagged part of it.
        let unflagged = selected(
            &handle,
            mongo::unindexed_filter_in(&rules, collection, now, mongo::Backlog::Unflagged),
        )
        .await;
        assert_same(
            &format!("{name} unindexed, unflagged"),
            &all,
            &unflagged,
            |d| mongo::is_unindexed(&rules, collection, d, now) && !markers::is_flagged(d),
        );
        // The same, read as the sync reads it: pages by `_id`, hinted to
        // LibreChat's backlog index (the seeder builds it; the odd
        // documents make it multikey), selects exactly those documents.
        assert_eq!(
            mongo::backlog_index(&db, collection)
                .await
                .unwrap()
                .as_deref(),
            Some("_meiliIndex_1_isTemporary_1_expiredAt_1"),
            "{name}: LibreChat's backlog index is found"
        );
        let mut read = BTreeSet::new();
        let mut after: Option<Bson> = None;
        loop {
            let page = mongo::read_unindexed_page(
                &db,
                &rules,
                collection,
                now,
                mongo::Backlog::Unflagged,
                after.as_ref(),
                100,
            )
            .await
            .unwrap();
            let Some(last) = page.last() else { break };
            after = mongo::raw_id(last);
            read.extend(
                page.iter()
                    .map(|raw| mongo::id_key(&mongo::raw_id(raw).unwrap())),
            );
        }
        assert_eq!(
            read, unflagged,
            "{name}: the hinted narrow read, page by page"
        );

        let seeded = match collection {
            Collection::Messages => &report.messages,
            Collection::Conversations => &report.conversations,
        };
        // The seeder's own count of searchable documents is among them
        // (the odd documents add more).
        let seeded_searchable = all
            .iter()
            .filter(|d| {
                !d.get_str(collection.primary_key())
                    .unwrap_or("")
                    .starts_with("odd-")
            })
            .filter(|d| searchable.contains(&mongo::id_key(d.get("_id").unwrap())))
            .count();
        assert_eq!(
            seeded_searchable, seeded.indexable,
            "{name}: the seeder's independent count"
        );
    }
    db.drop().await.unwrap();
}

/// Whether `d` is in `branch`, by the branch's own conditions (not only the
/// first it matches).
fn matches_branch(d: &Document, branch: Retention, now: DateTime) -> bool {
    let t = d.get("isTemporary");
    let e = d.get("expiredAt");
    let contains = |v: Option<&Bson>, is: &dyn Fn(&Bson) -> bool| {
        v.is_some_and(|v| is(v) || matches!(v, Bson::Array(items) if items.iter().any(is)))
    };
    let is_null = |v: Option<&Bson>| v.is_none() || contains(v, &|x| matches!(x, Bson::Null));
    let temporary_false = contains(t, &|x| matches!(x, Bson::Boolean(false)));
    match branch {
        Retention::Permanent => temporary_false && is_null(e),
        Retention::Expiring => {
            temporary_false && contains(e, &|x| matches!(x, Bson::DateTime(at) if *at > now))
        }
        Retention::Legacy => is_null(t) && is_null(e),
    }
}

/// The backlog read's hint names LibreChat's index only when that index
/// holds every document: a partial or sparse one with the same key, or the
/// same fields in another order, would leave documents out of the read; a
/// collection that does not exist has none (and its read finds nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_index_is_named_only_when_it_holds_every_document() {
    use mongodb::options::IndexOptions;
    use mongodb::IndexModel;

    let db = support::lease_harness::database("backlogindex").await;
    // A collection that does not exist (MongoDB answers NamespaceNotFound).
    assert_eq!(
        mongo::backlog_index(&db, Collection::Conversations)
            .await
            .unwrap(),
        None,
        "no collection, no index"
    );
    let handle = db.collection::<Document>(Collection::Messages.name());
    handle.insert_one(doc! { "user": "u" }).await.unwrap();
    let key = doc! { "_meiliIndex": 1, "isTemporary": 1, "expiredAt": 1 };
    let named = |name: &str| IndexOptions::builder().name(name.to_string());
    let cases = [
        ("none", None),
        (
            "partial",
            Some(
                IndexModel::builder().keys(key.clone()).options(
                    named("partial")
                        .partial_filter_expression(doc! { "_meiliIndex": { "$eq": false } })
                        .build(),
                ),
            ),
        ),
        (
            "sparse",
            Some(
                IndexModel::builder()
                    .keys(key.clone())
                    .options(named("sparse").sparse(true).build()),
            ),
        ),
        (
            "reordered",
            Some(
                IndexModel::builder()
                    .keys(doc! { "isTemporary": 1, "_meiliIndex": 1, "expiredAt": 1 })
                    .options(named("reordered").build()),
            ),
        ),
        (
            "descending",
            Some(
                IndexModel::builder()
                    .keys(doc! { "_meiliIndex": 1, "isTemporary": 1, "expiredAt": -1 })
                    .options(named("descending").build()),
            ),
        ),
    ];
    for (what, index) in cases {
        if let Some(index) = index {
            handle.create_index(index.build()).await.unwrap();
        }
        assert_eq!(
            mongo::backlog_index(&db, Collection::Messages)
                .await
                .unwrap(),
            None,
            "{what}: not an index a hint may name"
        );
        handle.drop_indexes().await.unwrap();
    }
    handle
        .create_index(
            IndexModel::builder()
                .keys(key)
                .options(named("librechat").build())
                .build(),
        )
        .await
        .unwrap();
    assert_eq!(
        mongo::backlog_index(&db, Collection::Messages)
            .await
            .unwrap()
            .as_deref(),
        Some("librechat"),
        "the whole index, by whatever name"
    );
    db.drop().await.unwrap();
}
