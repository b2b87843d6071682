//! What a run did: a [`RunSummary`] with one [`CollectionSummary`] per
//! collection, and the line it reads as in the log. Filled by the engine
//! (`run`), a reindex and `verify --repair`; read by the job, the lease
//! document and the CLI.

use std::fmt;

use serde::Serialize;

use super::exact;
use super::phases;
use super::plan::RebuildReason;
use super::rejects::Rejected;

/// What a run did to one collection and its index.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CollectionSummary {
    pub collection: String,
    pub index_uid: String,
    /// Documents Meilisearch confirmed in this run.
    pub indexed: u64,
    /// Documents deleted from Meilisearch (gone or no longer indexable in Mongo).
    pub deleted: u64,
    /// Flags cleared (index rebuilt, drift, documents no longer indexable,
    /// documents changed while in flight).
    pub flags_cleared: u64,
    /// Flags set by an exact comparison on documents the index already held.
    pub flags_set: u64,
    /// Documents Meilisearch refused, left unacknowledged.
    pub rejected: Vec<Rejected>,
    /// Settings keys that were changed.
    pub settings_changed: Vec<String>,
    /// Why the index was rebuilt, if it was.
    pub rebuilt: Option<RebuildReason>,
    /// Unindexed documents left alone because they were below the threshold.
    pub skipped_by_threshold: Option<u64>,
    /// Whether the id sets were compared.
    pub compared_ids: bool,
    /// Hash partitions the id or document comparison ran in: 0 when none
    /// ran; above 1 when `sync.compare_memory` could not hold every id (or
    /// digest) at once, and each side was read once per partition.
    pub comparison_partitions: u64,
    /// What an exact comparison of every document found (before repairing),
    /// when one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<exact::Comparison>,
}

impl CollectionSummary {
    pub(super) fn changed_anything(&self) -> bool {
        self.indexed > 0
            || self.deleted > 0
            || self.flags_cleared > 0
            || self.flags_set > 0
            || !self.rejected.is_empty()
            || !self.settings_changed.is_empty()
            || self.rebuilt.is_some()
    }
}

/// The outcome of one reconciliation.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub collections: Vec<CollectionSummary>,
    pub duration_ms: u64,
    /// Documents indexed per second of the whole run.
    pub docs_per_sec: f64,
    /// Nothing was changed (documents skipped by the threshold stay as they were).
    pub nothing_to_do: bool,
    /// Where the indexing time went ([`phases`]).
    pub phases: phases::Phases,
}

impl RunSummary {
    pub fn rejected_count(&self) -> usize {
        self.collections.iter().map(|c| c.rejected.len()).sum()
    }

    pub fn indexed(&self) -> u64 {
        self.collections.iter().map(|c| c.indexed).sum()
    }
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.collections {
            write!(f, "{} → {}: ", c.collection, c.index_uid)?;
            if !c.changed_anything() {
                write!(f, "nothing to do")?;
            } else {
                let mut parts = Vec::new();
                if let Some(reason) = &c.rebuilt {
                    parts.push(format!("rebuilt ({reason})"));
                }
                if !c.settings_changed.is_empty() {
                    parts.push(format!(
                        "settings changed: {}",
                        c.settings_changed.join(", ")
                    ));
                }
                parts.push(format!("indexed {}", c.indexed));
                if c.deleted > 0 {
                    parts.push(format!("deleted {}", c.deleted));
                }
                if c.flags_cleared > 0 {
                    parts.push(format!("flags cleared {}", c.flags_cleared));
                }
                if c.flags_set > 0 {
                    parts.push(format!("flags set {}", c.flags_set));
                }
                if !c.rejected.is_empty() {
                    let shown: Vec<String> = c
                        .rejected
                        .iter()
                        .take(5)
                        .map(|r| format!("{} ({})", r.id.as_deref().unwrap_or(&r.mongo_id), r.code))
                        .collect();
                    let more = c.rejected.len().saturating_sub(shown.len());
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    parts.push(format!(
                        "rejected {}: {}{more}",
                        c.rejected.len(),
                        shown.join(", ")
                    ));
                }
                write!(f, "{}", parts.join(", "))?;
            }
            if let Some(v) = &c.verified {
                write!(
                    f,
                    "; compared every document: {} missing, {} unexpected, {} stale before repair",
                    v.missing.count, v.unexpected.count, v.stale.count
                )?;
            }
            if let Some(n) = c.skipped_by_threshold {
                write!(f, "; {n} unindexed left below the threshold")?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "took {:.1} s, {:.0} docs/s",
            self.duration_ms as f64 / 1000.0,
            self.docs_per_sec
        )?;
        if self.phases != phases::Phases::default() {
            write!(f, " ({})", self.phases)?;
        }
        if self.nothing_to_do {
            write!(f, "; nothing to do")?;
        } else if self.rejected_count() > 0 {
            write!(f, "; completed with {} rejects", self.rejected_count())?;
        } else {
            write!(f, "; completed")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_says_nothing_to_do_or_counts_rejects() {
        let mut summary = RunSummary {
            collections: vec![CollectionSummary {
                collection: "messages".into(),
                index_uid: "messages".into(),
                ..Default::default()
            }],
            nothing_to_do: true,
            ..Default::default()
        };
        assert!(summary.to_string().contains("nothing to do"));
        summary.nothing_to_do = false;
        summary.collections[0].indexed = 999;
        summary.collections[0].rejected.push(Rejected {
            id: Some("bad|id".into()),
            mongo_id: "1".into(),
            code: "invalid_document_id".into(),
            message: String::new(),
            mongo_id_key: "1".into(),
        });
        let text = summary.to_string();
        assert!(text.contains("indexed 999"), "{text}");
        assert!(text.contains("bad|id (invalid_document_id)"), "{text}");
        assert!(text.contains("completed with 1 rejects"), "{text}");
    }
}
