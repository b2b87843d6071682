//! Which documents belong in Meilisearch at MongoDB's time `now`: one rule,
//! written once as a MongoDB filter ([`filter`]) and once in Rust with
//! MongoDB's matching rules ([`is_searchable`]), proven equal document by
//! document (`tests/mongo_indexable_predicate.rs`).
//!
//! LibreChat's rule (`buildIndexableQuery`): its retention filter —
//! `{ isTemporary: false, expiredAt: null }` or `{ isTemporary: false,
//! expiredAt: { $gt: now } }` or `{ isTemporary: null, expiredAt: null }`
//! (a legacy record without `isTemporary` is searchable only without an
//! expiry) — and the collection's exclusion path absent (`subagentTask`,
//! `subagentThread`). Ours is stricter in two ways: a document needs a
//! `user` (not missing, null or `""`: LibreChat's search filters by user and
//! its own cleanup deletes hits without one), and a message must not be
//! `unfinished: true` (a reply still streaming; LibreChat's save hook
//! removes those too, though its progress check counts them).
//!
//! An acknowledgement must not use `$or` per document (some servers then
//! scan the collection for every statement), so the retention filter is
//! also available one branch at a time ([`Retention`]): the branch the
//! document was read in, re-evaluated at the acknowledgement's `now`.

use mongodb::bson::{doc, Bson, DateTime, Document};

use super::{Collection, Rules};

/// The fields [`is_searchable`] reads besides the exclusion path.
const FIELDS: [&str; 4] = ["user", "isTemporary", "expiredAt", "unfinished"];

/// LibreChat's retention expiry (a date; its models put a TTL index on it,
/// so MongoDB deletes the document some time after it passes).
pub(crate) const EXPIRY: &str = "expiredAt";

/// Documents whose expiry has passed at `now`: searchable in no branch of
/// the retention filter (only a date compares with `now`).
pub(crate) fn expired_filter(now: DateTime) -> Document {
    doc! { EXPIRY: { "$lte": now } }
}

/// Documents whose expiry is one date (the type LibreChat writes; not an
/// array), later than `after` when given: what the expiry clock waits for.
/// An array is left out because MongoDB sorts it by its earliest element
/// while it may still be searchable through a later one: the sweep judges
/// such a document by the rule itself, and it would otherwise stand first
/// in every query for the next expiry.
pub(crate) fn expiry_after_filter(after: Option<DateTime>) -> Document {
    let mut range = match after {
        Some(after) => doc! { "$gt": after },
        None => doc! { "$type": "date" },
    };
    range.insert("$not", doc! { "$type": "array" });
    doc! { EXPIRY: range }
}

/// Which branch of LibreChat's retention filter a document is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// `isTemporary: false`, no expiry.
    Permanent,
    /// `isTemporary: false`, an expiry after `now` (a retention policy).
    Expiring,
    /// No `isTemporary` and no expiry (records from before the field).
    Legacy,
}

impl Retention {
    /// The branch's filter at `now`.
    pub(crate) fn filter(self, now: DateTime) -> Document {
        match self {
            Retention::Permanent => doc! { "isTemporary": false, "expiredAt": Bson::Null },
            Retention::Expiring => doc! { "isTemporary": false, "expiredAt": { "$gt": now } },
            Retention::Legacy => doc! { "isTemporary": Bson::Null, "expiredAt": Bson::Null },
        }
    }

    /// Every branch, `$or`ed: LibreChat's retention filter at `now`.
    pub(crate) fn any_filter(now: DateTime) -> Document {
        let branches = [Retention::Permanent, Retention::Expiring, Retention::Legacy];
        doc! { "$or": branches.map(|branch| branch.filter(now)).to_vec() }
    }

    /// The first branch `doc` is in at `now`, if any.
    fn of(doc: &Document, now: DateTime) -> Option<Retention> {
        let temporary_false = equals(doc, "isTemporary", |v| matches!(v, Bson::Boolean(false)));
        let temporary_null = is_null(doc, "isTemporary");
        let no_expiry = is_null(doc, "expiredAt");
        let is_later = |v: &Bson| matches!(v, Bson::DateTime(t) if *t > now);
        let later = equals(doc, "expiredAt", is_later);
        if temporary_false && no_expiry {
            Some(Retention::Permanent)
        } else if temporary_false && later {
            Some(Retention::Expiring)
        } else if temporary_null && no_expiry {
            Some(Retention::Legacy)
        } else {
            None
        }
    }
}

/// `filter` (of retention) and the conditions besides retention: they do
/// not depend on time.
fn and_timeless(mut filter: Document, rules: &Rules, collection: Collection) -> Document {
    filter.insert("user", doc! { "$nin": [Bson::Null, ""] });
    if collection.spec().hides_unfinished {
        filter.insert("unfinished", doc! { "$ne": true });
    }
    if let Some(path) = rules.exclusion_path(collection) {
        filter.insert(path, doc! { "$exists": false });
    }
    filter
}

/// Documents of `collection` that belong in Meilisearch at `now`.
pub fn filter(rules: &Rules, collection: Collection, now: DateTime) -> Document {
    and_timeless(Retention::any_filter(now), rules, collection)
}

/// The documents that are in `branch` at `now` and meet the other
/// conditions: no `$or`, for per-document statements.
pub fn branch_filter(
    rules: &Rules,
    collection: Collection,
    branch: Retention,
    now: DateTime,
) -> Document {
    and_timeless(branch.filter(now), rules, collection)
}

/// Whether `doc` matches [`filter`] at `now`, with MongoDB's rules: a
/// missing field equals `null`, and a condition on an array holds when it
/// holds for the array or one of its elements. `doc` must carry [`FIELDS`]
/// and the exclusion path ([`read_fields`]).
pub fn is_searchable(rules: &Rules, collection: Collection, doc: &Document, now: DateTime) -> bool {
    searchable_branch(rules, collection, doc, now).is_some()
}

/// The retention branch `doc` is searchable in at `now`, or `None` when it
/// is not searchable.
pub fn searchable_branch(
    rules: &Rules,
    collection: Collection,
    doc: &Document,
    now: DateTime,
) -> Option<Retention> {
    let no_user = |v: &Bson| matches!(v, Bson::Null) || v.as_str() == Some("");
    let user_missing = doc
        .get("user")
        .is_none_or(|v| matches_or_contains(v, no_user));
    let unfinished = collection.spec().hides_unfinished
        && equals(doc, "unfinished", |v| matches!(v, Bson::Boolean(true)));
    if user_missing || unfinished || is_excluded(rules, collection, doc) {
        return None;
    }
    Retention::of(doc, now)
}

/// Whether `doc` is kept out of search by its collection's exclusion path
/// (present, whatever its value — `$exists` counts a `null` too).
pub(crate) fn is_excluded(rules: &Rules, collection: Collection, doc: &Document) -> bool {
    rules
        .exclusion_path(collection)
        .is_some_and(|path| doc.contains_key(path))
}

/// The fields to read for [`is_searchable`].
pub(crate) fn read_fields(rules: &Rules, collection: Collection) -> Vec<&str> {
    let mut fields: Vec<&str> = FIELDS.to_vec();
    fields.extend(rules.exclusion_path(collection));
    fields
}

/// `{ field: value }` for a scalar `value`: the field equals it, or is an
/// array with an element equal to it.
fn equals(doc: &Document, field: &str, is_value: impl Fn(&Bson) -> bool) -> bool {
    doc.get(field)
        .is_some_and(|v| matches_or_contains(v, is_value))
}

/// `{ field: null }`: missing, `null`, or an array holding a `null`.
fn is_null(doc: &Document, field: &str) -> bool {
    doc.get(field)
        .is_none_or(|v| matches_or_contains(v, |v| matches!(v, Bson::Null | Bson::Undefined)))
}

/// MongoDB's rule for a condition on a field that may hold an array: it
/// holds for the value itself or for one of its elements (one level).
pub(crate) fn matches_or_contains(value: &Bson, condition: impl Fn(&Bson) -> bool) -> bool {
    condition(value) || matches!(value, Bson::Array(items) if items.iter().any(&condition))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searchability_follows_librechat_s_retention_and_exclusion_with_mongodb_matching() {
        let rules = Rules::default();
        let now = DateTime::from_millis(1_000_000);
        let before = DateTime::from_millis(999_999);
        let after = DateTime::from_millis(1_000_001);
        let m = |d: Document| is_searchable(&rules, Collection::Messages, &d, now);
        let c = |d: Document| is_searchable(&rules, Collection::Conversations, &d, now);
        // Retention: permanent, expiring later, legacy without expiry.
        assert!(m(doc! { "user": "u", "isTemporary": false }));
        assert!(m(
            doc! { "user": "u", "isTemporary": false, "expiredAt": Bson::Null }
        ));
        assert!(m(
            doc! { "user": "u", "isTemporary": false, "expiredAt": after }
        ));
        assert!(m(doc! { "user": "u" }));
        assert!(m(doc! { "user": "u", "isTemporary": Bson::Null }));
        // Expired, temporary, legacy with an expiry, odd flags.
        assert!(!m(
            doc! { "user": "u", "isTemporary": false, "expiredAt": now }
        ));
        assert!(!m(
            doc! { "user": "u", "isTemporary": false, "expiredAt": before }
        ));
        assert!(!m(doc! { "user": "u", "isTemporary": true }));
        assert!(
            !m(doc! { "user": "u", "expiredAt": after }),
            "legacy with an expiry is temporary"
        );
        assert!(!m(doc! { "user": "u", "isTemporary": 0 }));
        assert!(!m(doc! { "user": "u", "isTemporary": "false" }));
        assert!(!m(
            doc! { "user": "u", "isTemporary": false, "expiredAt": "2100-01-01" }
        ));
        // Arrays match through an element.
        assert!(m(doc! { "user": "u", "isTemporary": [true, false] }));
        assert!(m(
            doc! { "user": "u", "isTemporary": false, "expiredAt": [before, after] }
        ));
        assert!(!m(
            doc! { "user": "u", "isTemporary": false, "expiredAt": [before] }
        ));
        assert!(m(doc! { "user": "u", "isTemporary": [Bson::Null] }));
        // The exclusion path, present with any value.
        assert!(!m(
            doc! { "user": "u", "subagentTask": { "status": "running" } }
        ));
        assert!(!m(doc! { "user": "u", "subagentTask": Bson::Null }));
        assert!(
            m(doc! { "user": "u", "subagentThread": {} }),
            "messages ignore conversations' path"
        );
        assert!(!c(doc! { "user": "u", "subagentThread": {} }));
        // Ours: a user, and no unfinished message.
        assert!(!m(doc! {}));
        assert!(!m(doc! { "user": "" }));
        assert!(!m(doc! { "user": ["a", ""] }));
        assert!(m(doc! { "user": 5 }));
        assert!(!m(doc! { "user": "u", "unfinished": true }));
        assert!(!m(doc! { "user": "u", "unfinished": [true] }));
        assert!(c(doc! { "user": "u", "unfinished": true }));
        // No exclusion path configured.
        let none = Rules {
            messages_exclusion_path: None,
            ..Rules::default()
        };
        assert!(is_searchable(
            &none,
            Collection::Messages,
            &doc! { "user": "u", "subagentTask": {} },
            now
        ));
    }

    #[test]
    fn a_document_s_branch_is_the_first_it_matches() {
        let now = DateTime::from_millis(10);
        let later = DateTime::from_millis(11);
        assert_eq!(
            Retention::of(&doc! { "isTemporary": false }, now),
            Some(Retention::Permanent)
        );
        assert_eq!(
            Retention::of(&doc! { "isTemporary": false, "expiredAt": later }, now),
            Some(Retention::Expiring)
        );
        assert_eq!(Retention::of(&doc! {}, now), Some(Retention::Legacy));
        assert_eq!(Retention::of(&doc! { "expiredAt": later }, now), None);
        // In two branches at once (arrays): the first.
        assert_eq!(
            Retention::of(&doc! { "isTemporary": [false, Bson::Null] }, now),
            Some(Retention::Permanent)
        );
    }

    #[test]
    fn the_filters_name_every_condition() {
        let rules = Rules::default();
        let now = DateTime::from_millis(10);
        let full = filter(&rules, Collection::Messages, now);
        assert_eq!(full.get_array("$or").unwrap().len(), 3);
        for key in ["user", "unfinished", "subagentTask"] {
            assert!(full.contains_key(key), "{key}: {full}");
        }
        let one = branch_filter(&rules, Collection::Conversations, Retention::Expiring, now);
        assert!(!one.contains_key("$or"), "{one}");
        assert!(
            one.contains_key("subagentThread") && !one.contains_key("unfinished"),
            "{one}"
        );
        assert_eq!(
            read_fields(&rules, Collection::Conversations).last(),
            Some(&"subagentThread")
        );
    }
}
