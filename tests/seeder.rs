//! The LibreChat-shaped seeder writes exactly what its spec asks for, counts
//! it truthfully, and is deterministic by seed: other tests build their
//! expectations on its report.

use crate::support;

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::{Client, Database};
use support::seeder::{seed, CollectionCounts, SeedSpec};

async fn fresh_database(tag: &str) -> Database {
    let client = Client::with_uri_str(support::mongo_uri())
        .await
        .expect("MongoDB URI");
    client.database(&support::unique_name(tag))
}

/// A spec where every edge case, opt-in ones included, has a share.
fn spec_with_every_edge_case() -> SeedSpec {
    SeedSpec {
        messages: 3_000,
        conversations: 200,
        seed: 7,
        users: 5,
        chunk_size: 700,
        missing_user: 0.04,
        temporary_true: 0.1,
        temporary_absent: 0.2,
        expired_past: 0.05,
        expired_future: 0.06,
        expired_null: 0.07,
        flag_true: 0.25,
        flag_absent: 0.15,
        content_text_only: 0.2,
        content_mixed: 0.1,
        content_without_text: 0.05,
        unfinished: 0.03,
        long_text: 0.002,
        invalid_message_id: 0.01,
        pipe_in_conversation_id: 0.1,
        tagged: 0.5,
        ..SeedSpec::default()
    }
}

fn share(fraction: f64, n: usize) -> usize {
    (fraction * n as f64).round() as usize
}

async fn count(db: &Database, collection: &str, filter: Document) -> usize {
    db.collection::<Document>(collection)
        .count_documents(filter)
        .await
        .expect("count") as usize
}

async fn all_docs(db: &Database, collection: &str) -> Vec<Document> {
    db.collection::<Document>(collection)
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("read documents")
}

/// The edge cases shared by both collections, counted by the server.
async fn assert_common_counts(
    db: &Database,
    collection: &str,
    counts: &CollectionCounts,
    now: DateTime,
) {
    let checks = [
        ("total", doc! {}, counts.total),
        (
            "missing_user",
            doc! { "user": { "$exists": false } },
            counts.missing_user,
        ),
        (
            "temporary_true",
            doc! { "isTemporary": true },
            counts.temporary_true,
        ),
        (
            "temporary_false",
            doc! { "isTemporary": false },
            counts.temporary_false,
        ),
        (
            "temporary_absent",
            doc! { "isTemporary": { "$exists": false } },
            counts.temporary_absent,
        ),
        (
            "expired_past",
            doc! { "expiredAt": { "$lt": now } },
            counts.expired_past,
        ),
        (
            "expired_future",
            doc! { "expiredAt": { "$gt": now } },
            counts.expired_future,
        ),
        (
            "expired_null",
            doc! { "expiredAt": { "$type": "null" } },
            counts.expired_null,
        ),
        (
            "expired_absent",
            doc! { "expiredAt": { "$exists": false } },
            counts.expired_absent,
        ),
        (
            "subagent",
            doc! { "$or": [ { "subagentTask": { "$exists": true } }, { "subagentThread": { "$exists": true } } ] },
            counts.subagent,
        ),
        (
            "flag_true",
            doc! { "_meiliIndex": true, "_meiliIndexSchemaVersion": 1 },
            counts.flag_true,
        ),
        (
            "flag_false",
            doc! { "_meiliIndex": false },
            counts.flag_false,
        ),
        (
            "flag_absent",
            doc! { "_meiliIndex": { "$exists": false } },
            counts.flag_absent,
        ),
        (
            "pipe_in_conversation_id",
            doc! { "conversationId": { "$regex": "\\|" } },
            counts.pipe_in_conversation_id,
        ),
    ];
    for (name, filter, expected) in checks {
        let found = count(db, collection, filter).await;
        assert_eq!(
            found, expected,
            "{collection}.{name}: Mongo has {found}, the report says {expected}"
        );
    }
}

/// docs/design.md §3.3, computed from the stored document (independently of
/// the seeder): a user, no subagent record, LibreChat's retention (not
/// temporary and not expired, or a legacy record with neither the flag nor
/// an expiry), not unfinished.
fn indexable(doc: &Document, now: DateTime) -> bool {
    let has_user = matches!(doc.get("user"), Some(Bson::String(_)));
    let no_expiry = matches!(doc.get("expiredAt"), None | Some(Bson::Null));
    let later = matches!(doc.get("expiredAt"), Some(Bson::DateTime(at)) if *at > now);
    let retained = match doc.get("isTemporary") {
        Some(Bson::Boolean(false)) => no_expiry || later,
        None => no_expiry,
        _ => false,
    };
    let subagent = doc.contains_key("subagentTask") || doc.contains_key("subagentThread");
    let unfinished = doc.get_bool("unfinished").unwrap_or(false);
    has_user && retained && !subagent && !unfinished
}

fn valid_meili_id(id: &str) -> bool {
    id.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Content shape of a message: (plain text, text-only parts, mixed, no text part).
fn content_shape(doc: &Document) -> [usize; 4] {
    let Ok(parts) = doc.get_array("content") else {
        assert!(
            doc.get_str("text").is_ok(),
            "a message without content has text: {doc}"
        );
        return [1, 0, 0, 0];
    };
    let types: Vec<&str> = parts
        .iter()
        .map(|p| {
            p.as_document()
                .and_then(|d| d.get_str("type").ok())
                .expect("part type")
        })
        .collect();
    let text_parts = types.iter().filter(|t| **t == "text").count();
    match (text_parts, types.len() - text_parts) {
        (0, _) => [0, 0, 0, 1],
        (_, 0) => [0, 1, 0, 0],
        _ => [0, 0, 1, 0],
    }
}

/// Bytes of text a message carries, as plain `text` or in `text` parts.
fn text_len(doc: &Document) -> usize {
    let in_parts: usize = doc
        .get_array("content")
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.as_document()?.get_str("text").ok())
                .map(str::len)
                .sum()
        })
        .unwrap_or(0);
    doc.get_str("text").map_or(0, str::len) + in_parts
}

#[tokio::test]
async fn seeds_exactly_the_requested_edge_cases_and_reports_them() {
    let db = fresh_database("seeder_counts").await;
    let spec = spec_with_every_edge_case();
    let report = seed(&db, &spec).await.expect("seed");
    let (m, c) = (&report.messages, &report.conversations);

    // The report honours the spec exactly.
    for (counts, n) in [(m, spec.messages), (c, spec.conversations)] {
        assert_eq!(counts.total, n);
        assert_eq!(counts.missing_user, share(spec.missing_user, n));
        assert_eq!(counts.temporary_true, share(spec.temporary_true, n));
        assert_eq!(counts.temporary_absent, share(spec.temporary_absent, n));
        assert_eq!(
            counts.temporary_false,
            n - counts.temporary_true - counts.temporary_absent
        );
        assert_eq!(counts.expired_past, share(spec.expired_past, n));
        assert_eq!(counts.expired_future, share(spec.expired_future, n));
        assert_eq!(counts.expired_null, share(spec.expired_null, n));
        assert_eq!(counts.flag_true, share(spec.flag_true, n));
        assert_eq!(counts.flag_absent, share(spec.flag_absent, n));
    }
    assert_eq!(
        m.content_text_only,
        share(spec.content_text_only, spec.messages)
    );
    assert_eq!(m.content_mixed, share(spec.content_mixed, spec.messages));
    assert_eq!(
        m.content_without_text,
        share(spec.content_without_text, spec.messages)
    );
    assert_eq!(m.unfinished, share(spec.unfinished, spec.messages));
    assert_eq!(m.long_text, share(spec.long_text, spec.messages));
    assert_eq!(
        m.invalid_message_id,
        share(spec.invalid_message_id, spec.messages)
    );
    assert_eq!(
        c.pipe_in_conversation_id,
        share(spec.pipe_in_conversation_id, spec.conversations)
    );
    assert_eq!(c.tagged, share(spec.tagged, spec.conversations));
    // Messages are spread evenly over conversations, so they inherit `|` ids.
    assert_eq!(
        m.pipe_in_conversation_id,
        c.pipe_in_conversation_id * spec.messages / spec.conversations
    );

    // Mongo holds what the report says.
    assert_common_counts(&db, "messages", m, spec.now).await;
    assert_common_counts(&db, "conversations", c, spec.now).await;
    assert_eq!(
        count(&db, "messages", doc! { "unfinished": true }).await,
        m.unfinished
    );
    assert_eq!(
        count(&db, "conversations", doc! { "tags.0": { "$exists": true } }).await,
        c.tagged
    );

    let messages = all_docs(&db, "messages").await;
    let mut shapes = [0usize; 4];
    for message in &messages {
        for (total, one) in shapes.iter_mut().zip(content_shape(message)) {
            *total += one;
        }
        for field in [
            "messageId",
            "conversationId",
            "sender",
            "createdAt",
            "updatedAt",
        ] {
            assert!(
                message.contains_key(field),
                "message lacks {field}: {message}"
            );
        }
        let updated = message
            .get_datetime("updatedAt")
            .expect("updatedAt is a date");
        assert!(
            *updated < spec.now,
            "updatedAt is not in the past: {message}"
        );
    }
    let plain = spec.messages - m.content_text_only - m.content_mixed - m.content_without_text;
    assert_eq!(
        shapes,
        [
            plain,
            m.content_text_only,
            m.content_mixed,
            m.content_without_text
        ]
    );
    assert_eq!(m.plain_text, plain);
    let long = messages.iter().filter(|d| text_len(d) > 20_000).count();
    assert_eq!(long, m.long_text);

    let indexable_messages: Vec<&Document> =
        messages.iter().filter(|d| indexable(d, spec.now)).collect();
    assert_eq!(indexable_messages.len(), m.indexable);
    let rejected = indexable_messages
        .iter()
        .filter(|d| !valid_meili_id(d.get_str("messageId").expect("messageId")))
        .count();
    assert_eq!(rejected, m.indexable_invalid_id);
    let invalid = messages
        .iter()
        .filter(|d| !valid_meili_id(d.get_str("messageId").expect("messageId")))
        .count();
    assert_eq!(invalid, m.invalid_message_id);
    let conversations = all_docs(&db, "conversations").await;
    assert_eq!(
        conversations
            .iter()
            .filter(|d| indexable(d, spec.now))
            .count(),
        c.indexable
    );

    // LibreChat's indexes, including the one its sync queries use.
    for collection in ["messages", "conversations"] {
        let keys: Vec<Document> = db
            .collection::<Document>(collection)
            .list_indexes()
            .await
            .expect("list indexes")
            .map_ok(|index| index.keys)
            .try_collect()
            .await
            .expect("read indexes");
        assert!(
            keys.contains(&doc! { "_meiliIndex": 1, "isTemporary": 1, "expiredAt": 1 }),
            "{collection} lacks the sync index: {keys:?}"
        );
    }
    let duplicate = messages[0].clone();
    let err = db
        .collection::<Document>("messages")
        .insert_one(doc! { "messageId": duplicate.get_str("messageId").unwrap() })
        .await
        .expect_err("messageId is unique");
    let text = err.to_string();
    assert!(
        text.contains("11000") || text.to_lowercase().contains("duplicate"),
        "{err}"
    );

    db.drop().await.expect("drop database");
}

#[tokio::test]
async fn the_same_seed_gives_the_same_documents() {
    let spec = SeedSpec {
        messages: 1_500,
        conversations: 120,
        seed: 42,
        now: DateTime::from_millis(1_767_225_600_000), // fixed: dates derive from it
        chunk_size: 400,
        ..spec_with_every_edge_case()
    };
    let (first, second, other) = (
        fresh_database("seeder_det_a").await,
        fresh_database("seeder_det_b").await,
        fresh_database("seeder_det_c").await,
    );
    let report_first = seed(&first, &spec).await.expect("seed first");
    let report_second = seed(&second, &spec).await.expect("seed second");
    seed(
        &other,
        &SeedSpec {
            seed: 43,
            ..spec.clone()
        },
    )
    .await
    .expect("seed other");

    assert_eq!(report_first.messages, report_second.messages);
    assert_eq!(report_first.conversations, report_second.conversations);
    for collection in ["messages", "conversations"] {
        let a = all_docs(&first, collection).await;
        let b = all_docs(&second, collection).await;
        assert_eq!(a.len(), b.len());
        assert!(
            a == b,
            "{collection}: the same seed gave different documents"
        );
        let c = all_docs(&other, collection).await;
        assert!(
            a != c,
            "{collection}: a different seed gave the same documents"
        );
    }

    for db in [first, second, other] {
        db.drop().await.expect("drop database");
    }
}

#[tokio::test]
async fn rejects_proportions_that_cannot_add_up() {
    let db = fresh_database("seeder_invalid").await;
    let spec = SeedSpec {
        expired_past: 0.6,
        expired_future: 0.5,
        ..SeedSpec::default()
    };
    let err = seed(&db, &spec).await.expect_err("sum above 1");
    assert!(err.to_string().contains("expired_"), "{err}");
    let spec = SeedSpec {
        tagged: 1.5,
        ..SeedSpec::default()
    };
    let err = seed(&db, &spec).await.expect_err("fraction above 1");
    assert!(err.to_string().contains("tagged"), "{err}");
}
