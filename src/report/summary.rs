//! What a run did, as text ([`RunSummary`]): one line per collection, then
//! the time, where it went ([`Phases`]) and the verdict. `once`, `reindex`
//! and `verify --repair` print it; every reconciliation logs it.

use std::fmt;

use crate::reconcile::phases::Phases;
use crate::reconcile::{CollectionSummary, Rejected, RunSummary};

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.collections {
            write!(f, "{} → {}: ", c.collection, c.index_uid)?;
            if c.changed_anything() {
                write!(f, "{}", changes(c).join(", "))?;
            } else {
                write!(f, "nothing to do")?;
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
        let secs = self.duration_ms as f64 / 1000.0;
        write!(f, "took {secs:.1} s, {:.0} docs/s", self.docs_per_sec)?;
        if self.phases != Phases::default() {
            write!(f, " ({})", self.phases)?;
        }
        if self.nothing_to_do {
            write!(f, "; nothing to do")
        } else if self.rejected_count() > 0 {
            write!(f, "; completed with {} rejects", self.rejected_count())
        } else {
            write!(f, "; completed")
        }
    }
}

/// What the run changed in one collection and its index.
fn changes(c: &CollectionSummary) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(reason) = &c.rebuilt {
        parts.push(format!("rebuilt ({reason})"));
    }
    if !c.settings_changed.is_empty() {
        let changed = c.settings_changed.join(", ");
        parts.push(format!("settings changed: {changed}"));
    }
    parts.push(format!("indexed {}", c.indexed));
    let counts = [
        ("deleted", c.deleted),
        ("flags cleared", c.flags_cleared),
        ("flags set", c.flags_set),
    ];
    for (what, n) in counts.into_iter().filter(|(_, n)| *n > 0) {
        parts.push(format!("{what} {n}"));
    }
    if !c.rejected.is_empty() {
        parts.push(rejected(&c.rejected));
    }
    parts
}

/// The documents Meilisearch refused: their count and the first five.
fn rejected(rejected: &[Rejected]) -> String {
    let shown: Vec<String> = rejected
        .iter()
        .take(5)
        .map(|r| format!("{} ({})", r.id.as_deref().unwrap_or(&r.mongo_id), r.code))
        .collect();
    let more = match rejected.len() - shown.len() {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    format!("rejected {}: {}{more}", rejected.len(), shown.join(", "))
}

impl fmt::Display for Phases {
    /// Each phase's seconds, in [`crate::metrics::SYNC_PHASES`]' order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .into_iter()
            .map(|(label, secs)| format!("{} {secs:.1} s", label.replace('_', " ")))
            .collect();
        write!(f, "{}", parts.join(", "))
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
