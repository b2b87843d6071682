//! The markers LibreChat keeps on each chat document, and what they say.
//!
//! - `_meiliIndex: true` — Meilisearch holds this document (flagged);
//!   with `_meiliIndexSchemaVersion` equal to the projection's version it
//!   is **processed**: indexed as the current projection builds it. A
//!   flagged document of another schema version is sent again — how
//!   LibreChat rolls out a projection change.
//! - `_meiliIndexAttempted: true` — a save asked for indexing (LibreChat's
//!   hooks set it with `_meiliIndex: false` on every save).
//! - `_meiliIndexVersion` — a fresh token LibreChat writes with every save
//!   through its models; part of a document's version ([`VERSION_TOKEN`]).
//! - `_meiliCleanupVersion: 1` — written when a document no longer
//!   searchable has been removed from Meilisearch.
//!
//! After a successful addition LibreChat sets `_meiliIndex: true,
//! _meiliCleanupVersion: 1, _meiliIndexSchemaVersion: 1`; after removing a
//! document it sets `_meiliCleanupVersion: 1` and unsets `_meiliIndex` and
//! `_meiliIndexAttempted`. We write the same ([`indexed`], [`removed`]), so
//! LibreChat's own `getSyncProgress()` ([`ProgressFilters`]) agrees with us.

use mongodb::bson::{doc, Bson, DateTime, Document};

use super::searchable::{is_excluded, matches_or_contains, Retention};
use super::{Collection, Rules};

/// The flag: true = Meilisearch holds this document.
pub const FLAG: &str = "_meiliIndex";
/// Set by LibreChat's hooks with every save: indexing was asked for.
const ATTEMPTED: &str = "_meiliIndexAttempted";
/// LibreChat's per-save version token (a fresh ObjectId's hex).
pub(crate) const VERSION_TOKEN: &str = "_meiliIndexVersion";
/// The projection's version the document was indexed with.
pub const SCHEMA_VERSION: &str = "_meiliIndexSchemaVersion";
/// Written once a document that is not searchable was removed.
const CLEANUP_VERSION: &str = "_meiliCleanupVersion";
/// LibreChat's cleanup version.
const CLEANUP_VERSION_VALUE: i32 = 1;

/// The update that marks a document indexed at the current schema version.
pub(crate) fn indexed(rules: &Rules) -> Document {
    doc! { "$set": {
        FLAG: true,
        CLEANUP_VERSION: CLEANUP_VERSION_VALUE,
        SCHEMA_VERSION: rules.schema_version,
    } }
}

/// The update that marks a document removed from Meilisearch (it is not
/// searchable, and Meilisearch no longer holds it).
pub(crate) fn removed() -> Document {
    doc! {
        "$set": { CLEANUP_VERSION: CLEANUP_VERSION_VALUE },
        "$unset": { FLAG: "", ATTEMPTED: "" },
    }
}

/// The update that marks a searchable document as needing to be sent
/// (again): Meilisearch lacks it, or holds another version.
pub(crate) fn unindexed() -> Document {
    doc! { "$set": { FLAG: false } }
}

/// Processed: flagged at the current schema version.
pub fn processed_filter(rules: &Rules) -> Document {
    doc! { FLAG: true, SCHEMA_VERSION: rules.schema_version }
}

/// Not processed (the complement of [`processed_filter`]), written as
/// LibreChat's own sync query writes it: unflagged, or flagged at another
/// schema version — each branch can use an index on `_meiliIndex` (such as
/// LibreChat's `{_meiliIndex, isTemporary, expiredAt}`), though the second
/// one's `_meiliIndex: true` selects nearly every document: a read that
/// may leave it out uses [`unflagged_filter`].
pub(crate) fn unprocessed_filter(rules: &Rules) -> Document {
    doc! { "$or": [
        unflagged_filter(),
        { FLAG: true, SCHEMA_VERSION: { "$ne": rules.schema_version } },
    ] }
}

/// Unflagged: the first branch of [`unprocessed_filter`] alone, which is
/// every unprocessed document while no document is flagged at another
/// schema version. An index on `_meiliIndex` answers it from the backlog's
/// own entries; the other branch's `_meiliIndex: true` selects nearly every
/// document, which DocumentDB then fetches one by one to test the schema
/// version.
pub(crate) fn unflagged_filter() -> Document {
    doc! { FLAG: { "$ne": true } }
}

/// Documents that may be in Meilisearch by their markers: the flag is there,
/// either way (`true`: indexed; `false`: saved since, and the older version
/// may still be there). LibreChat's removal unsets it ([`removed`]).
pub(crate) fn may_be_indexed_filter() -> Document {
    doc! { FLAG: { "$in": [true, false] } }
}

/// Whether `doc` is flagged (`_meiliIndex: true`, whatever the schema
/// version): it claims Meilisearch holds it.
pub fn is_flagged(doc: &Document) -> bool {
    doc.get(FLAG)
        .is_some_and(|v| matches_or_contains(v, |v| matches!(v, Bson::Boolean(true))))
}

/// Whether `doc` matches [`processed_filter`], with MongoDB's rules
/// (numbers of any type compare by value; arrays through an element).
pub fn is_processed(rules: &Rules, doc: &Document) -> bool {
    let version = f64::from(rules.schema_version);
    is_flagged(doc)
        && doc.get(SCHEMA_VERSION).is_some_and(|v| {
            matches_or_contains(v, |v| match v {
                Bson::Int32(n) => f64::from(*n) == version,
                Bson::Int64(n) => *n as f64 == version,
                Bson::Double(n) => *n == version,
                _ => false,
            })
        })
}

/// Whether `doc` asks for LibreChat's removal markers once Meilisearch no
/// longer holds it: flagged, attempted, or — kept out by its exclusion path
/// — unflagged without a cleanup version (LibreChat's pending cleanup).
pub(crate) fn wants_removed_marker(rules: &Rules, collection: Collection, doc: &Document) -> bool {
    let excluded = is_excluded(rules, collection, doc);
    is_flagged(doc)
        || matches!(doc.get(ATTEMPTED), Some(Bson::Boolean(true)))
        || (excluded
            && matches!(doc.get(FLAG), Some(Bson::Boolean(false)))
            && matches!(doc.get(CLEANUP_VERSION), None | Some(Bson::Null)))
}

/// The `updatedFields` an acknowledgement can leave in a change event:
/// every ordering of every non-empty subset of [`indexed`]'s fields that
/// marks something (the flag or the schema version; MongoDB reports only
/// the fields that changed, in an order it does not promise).
pub(crate) fn acknowledgement_shapes(rules: &Rules) -> Vec<Document> {
    let fields: [(&str, Bson); 3] = [
        (FLAG, Bson::Boolean(true)),
        (CLEANUP_VERSION, Bson::Int32(CLEANUP_VERSION_VALUE)),
        (SCHEMA_VERSION, Bson::Int32(rules.schema_version)),
    ];
    // Each ordering as the indexes into `fields`, a digit each.
    let orders = [
        "0", "2", "01", "10", "02", "20", "12", "21", "012", "021", "102", "120", "201", "210",
    ];
    let field = |digit: u8| {
        let (name, value) = &fields[usize::from(digit - b'0')];
        (name.to_string(), value.clone())
    };
    orders
        .iter()
        .map(|order| order.bytes().map(field).collect())
        .collect()
}

/// What an update that touched markers only did, from its change event:
/// `Some(true)` it marked the document indexed (an acknowledgement, ours or
/// LibreChat's save hook's: no work), `Some(false)` it only cleared the
/// flag or recorded a removal (whoever did it asked for a re-send, or
/// removed the document), `None` it changed something else.
pub(crate) fn marker_only_update(
    rules: &Rules,
    updated: &Document,
    removed: &[String],
) -> Option<bool> {
    // Whether `key` is not among the updated fields, or set to `value`.
    let unset_or = |key: &str, value: Bson| updated.get(key).is_none_or(|v| *v == value);
    let only = |allowed: &[&str]| updated.keys().all(|k| allowed.contains(&k.as_str()));
    let acknowledges = removed.is_empty()
        && !updated.is_empty()
        && only(&[FLAG, CLEANUP_VERSION, SCHEMA_VERSION])
        && unset_or(FLAG, Bson::Boolean(true))
        && unset_or(CLEANUP_VERSION, Bson::Int32(CLEANUP_VERSION_VALUE))
        && unset_or(SCHEMA_VERSION, Bson::Int32(rules.schema_version))
        && (updated.contains_key(FLAG) || updated.contains_key(SCHEMA_VERSION));
    if acknowledges {
        return Some(true);
    }
    let clears = (updated.is_empty() || only(&[FLAG, CLEANUP_VERSION, ATTEMPTED]))
        && removed.iter().all(|k| k == FLAG || k == ATTEMPTED)
        && unset_or(FLAG, Bson::Boolean(false))
        && !(updated.is_empty() && removed.is_empty());
    clears.then_some(false)
}

/// LibreChat's own `getSyncProgress()` of one collection, as four count
/// filters at `now` — its searchable documents (retention and exclusion
/// only: it does not ask for a user, and counts unfinished messages), of
/// those the processed ones and the ones pending indexing, and the excluded
/// documents pending cleanup. Complete = processed equals searchable and no
/// cleanup is pending.
pub(crate) struct ProgressFilters {
    pub(crate) searchable: Document,
    pub(crate) processed: Document,
    pub(crate) pending_indexing: Document,
    pub(crate) pending_cleanup: Option<Document>,
}

impl ProgressFilters {
    pub(crate) fn new(rules: &Rules, collection: Collection, now: DateTime) -> ProgressFilters {
        let mut searchable = Retention::any_filter(now);
        if let Some(path) = rules.exclusion_path(collection) {
            searchable.insert(path, doc! { "$exists": false });
        }
        let and = |other: Document| doc! { "$and": [searchable.clone(), other] };
        ProgressFilters {
            processed: and(processed_filter(rules)),
            pending_indexing: and(doc! { "$or": [
                { FLAG: { "$ne": true }, ATTEMPTED: true },
                { FLAG: true, SCHEMA_VERSION: { "$ne": rules.schema_version } },
            ] }),
            pending_cleanup: rules.exclusion_path(collection).map(pending_cleanup_filter),
            searchable,
        }
    }
}

/// Excluded documents that may still hold a Meilisearch entry (LibreChat's
/// `buildExcludedIndexedQuery`): flagged, attempted, or unflagged without a
/// cleanup version. What the excluded-documents cleanup removes and marks.
pub(crate) fn pending_cleanup_filter(exclusion_path: &str) -> Document {
    doc! {
        exclusion_path: { "$exists": true },
        "$or": [
            { FLAG: true },
            { ATTEMPTED: true },
            { FLAG: false, CLEANUP_VERSION: Bson::Null },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processed_means_flagged_at_the_current_schema_version() {
        let rules = Rules::default();
        assert!(is_processed(
            &rules,
            &doc! { FLAG: true, SCHEMA_VERSION: 1 }
        ));
        assert!(is_processed(
            &rules,
            &doc! { FLAG: true, SCHEMA_VERSION: 1_i64 }
        ));
        assert!(is_processed(
            &rules,
            &doc! { FLAG: true, SCHEMA_VERSION: 1.0 }
        ));
        assert!(
            !is_processed(&rules, &doc! { FLAG: true }),
            "indexed before schema versions"
        );
        assert!(!is_processed(
            &rules,
            &doc! { FLAG: true, SCHEMA_VERSION: 2 }
        ));
        assert!(!is_processed(
            &rules,
            &doc! { FLAG: false, SCHEMA_VERSION: 1 }
        ));
        assert!(!is_processed(&rules, &doc! { SCHEMA_VERSION: 1 }));
        let raised = Rules {
            schema_version: 2,
            ..Rules::default()
        };
        assert!(!is_processed(
            &raised,
            &doc! { FLAG: true, SCHEMA_VERSION: 1 }
        ));
        assert!(is_flagged(&doc! { FLAG: true }));
    }

    #[test]
    fn marker_only_updates_are_told_apart() {
        let rules = Rules::default();
        let kind = |updated: Document, removed: &[&str]| {
            let removed: Vec<String> = removed.iter().map(|s| s.to_string()).collect();
            marker_only_update(&rules, &updated, &removed)
        };
        // Acknowledgements, whichever fields changed.
        assert_eq!(kind(doc! { FLAG: true }, &[]), Some(true));
        assert_eq!(
            kind(doc! { FLAG: true, SCHEMA_VERSION: 1 }, &[]),
            Some(true)
        );
        assert_eq!(
            kind(
                doc! { SCHEMA_VERSION: 1, CLEANUP_VERSION: 1, FLAG: true },
                &[]
            ),
            Some(true)
        );
        assert_eq!(kind(doc! { SCHEMA_VERSION: 1 }, &[]), Some(true));
        // Another schema version is not ours.
        assert_eq!(kind(doc! { FLAG: true, SCHEMA_VERSION: 2 }, &[]), None);
        // Clears and removals.
        assert_eq!(kind(doc! { FLAG: false }, &[]), Some(false));
        assert_eq!(
            kind(doc! { CLEANUP_VERSION: 1 }, &[FLAG, ATTEMPTED]),
            Some(false)
        );
        assert_eq!(kind(doc! {}, &[FLAG]), Some(false));
        // Anything else is a change.
        assert_eq!(
            kind(
                doc! { FLAG: false, ATTEMPTED: true, "_meiliIndexVersion": "x", "text": "t" },
                &[]
            ),
            None
        );
        assert_eq!(kind(doc! { FLAG: true, "text": "t" }, &[]), None);
        assert_eq!(kind(doc! { FLAG: true }, &["text"]), None);
        // Every acknowledgement shape is recognised as one.
        let shapes = acknowledgement_shapes(&rules);
        assert_eq!(shapes.len(), 14);
        for shape in shapes {
            assert_eq!(kind(shape.clone(), &[]), Some(true), "{shape}");
        }
    }

    #[test]
    fn the_markers_are_librechat_s() {
        let rules = Rules::default();
        assert_eq!(
            indexed(&rules),
            doc! { "$set": { "_meiliIndex": true, "_meiliCleanupVersion": 1, "_meiliIndexSchemaVersion": 1 } }
        );
        assert_eq!(
            removed(),
            doc! { "$set": { "_meiliCleanupVersion": 1 }, "$unset": { "_meiliIndex": "", "_meiliIndexAttempted": "" } }
        );
    }
}
