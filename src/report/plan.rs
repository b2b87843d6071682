//! `plan`'s text: per index what both servers hold and what a
//! reconciliation would do ([`Plan`]), and why an index is rebuilt
//! ([`RebuildReason`], also in a run's summary and its log line).
//! `plan --json` serializes the same data instead.

use std::fmt;

use crate::reconcile::{build_uid, IndexPlan, Plan, RebuildReason};

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (health, time) = (&self.meili_health, &self.server_time);
        writeln!(f, "Meilisearch: {health} · MongoDB time: {time}")?;
        for i in &self.indexes {
            writeln!(f)?;
            writeln!(f, "{} → index {}", i.collection.name(), i.index_uid)?;
            what_is(f, i)?;
            what_would_change(f, i)?;
        }
        writeln!(f)?;
        if self.nothing_to_do {
            write!(f, "Nothing to do.")
        } else {
            write!(f, "A reconciliation would change the above.")
        }
    }
}

/// The index and its collection as read: documents, counts, LibreChat's
/// view, excluded documents to clean up, settings.
fn what_is(f: &mut fmt::Formatter<'_>, i: &IndexPlan) -> fmt::Result {
    let pk = i.primary_key.as_deref().unwrap_or("(none)");
    if i.exists {
        let (n, expected) = (i.meili_documents, &i.expected_primary_key);
        writeln!(
            f,
            "  index:     {n} documents, primary key {pk} (expected {expected})"
        )?;
    } else {
        writeln!(f, "  index:     missing")?;
    }
    writeln!(
        f,
        "  mongo:     {} searchable, {} indexed, {} to index",
        i.mongo.indexable, i.mongo.indexed, i.mongo.unindexed
    )?;
    if let Some(lc) = &i.librechat {
        writeln!(
            f,
            "  librechat: {} of {} processed, {} pending indexing, {} pending cleanup — {} (its getSyncProgress())",
            lc.processed,
            lc.searchable,
            lc.pending_indexing,
            lc.pending_cleanup,
            if lc.complete { "complete" } else { "incomplete" }
        )?;
    }
    if i.pending_cleanup > 0 {
        writeln!(
            f,
            "  cleanup:   {} excluded documents would be removed from Meilisearch and marked",
            i.pending_cleanup
        )?;
    }
    if i.settings_to_apply.is_empty() {
        writeln!(f, "  settings:  as desired")
    } else {
        let change = serde_json::to_string(&i.settings_to_apply).unwrap_or_default();
        writeln!(f, "  settings:  would apply {change}")
    }
}

/// What a reconciliation would do to the index: rebuild, compare, drop a
/// leftover, index.
fn what_would_change(f: &mut fmt::Formatter<'_>, i: &IndexPlan) -> fmt::Result {
    if let Some(reason) = &i.rebuild {
        writeln!(f, "  rebuild:   yes ({reason})")?;
    }
    if i.drift_suspected {
        writeln!(f, "  drift:     counts disagree; id sets would be compared")?;
    }
    if i.exact_comparison_pending {
        writeln!(
            f,
            "  reindex:   interrupted after its build; every document would be compared and the flags set exactly"
        )?;
    }
    if i.leftover_build_index {
        writeln!(
            f,
            "  reindex:   {} left by an interrupted reindex would be dropped",
            build_uid(&i.index_uid)
        )?;
    }
    if i.skipped_by_threshold {
        let n = i.mongo.unindexed;
        writeln!(f, "  index:     {n} unindexed left below the threshold")
    } else {
        writeln!(f, "  would index: {} documents", i.documents_to_index)
    }
}

impl fmt::Display for RebuildReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RebuildReason::IndexMissing => write!(f, "index missing"),
            RebuildReason::WrongPrimaryKey { actual } => {
                let actual = actual.as_deref().unwrap_or("(none)");
                write!(f, "wrong primary key {actual}")
            }
            RebuildReason::IndexLost {
                meili_documents,
                mongo_indexed,
            } => write!(
                f,
                "index has {meili_documents} documents while {mongo_indexed} are flagged indexed"
            ),
            RebuildReason::Forced => write!(f, "forced reindex"),
        }
    }
}
