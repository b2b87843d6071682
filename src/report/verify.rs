//! `verify`'s text: per index the counts compared, then each kind of
//! difference with its count, what it means and a few example ids, then
//! the verdict ([`VerifyReport`]). `verify --json` serializes the same data
//! instead.

use std::fmt;

use crate::reconcile::exact::Difference;
use crate::reconcile::verify::VerifyReport;

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in &self.indexes {
            let c = &i.comparison;
            let (name, uid) = (i.collection.name(), &i.index_uid);
            let (meili, mongo, exact) = (c.meili_documents, c.mongo_indexable, c.matching);
            let counts = format!("{meili} in Meilisearch, {mongo} indexable in MongoDB");
            write!(f, "{name} → index {uid}: {counts}, {exact} exact")?;
            if c.partitions > 1 {
                write!(
                    f,
                    " (compared in {} partitions: sync.compare_memory holds fewer digests)",
                    c.partitions
                )?;
            }
            writeln!(f)?;
            let missing = "indexable in MongoDB, absent from Meilisearch";
            line(f, "missing", &c.missing, missing)?;
            let unexpected = "in Meilisearch, gone or not indexable in MongoDB";
            line(f, "unexpected", &c.unexpected, unexpected)?;
            line(f, "stale", &c.stale, "Meilisearch holds another version")?;
        }
        if self.clean {
            write!(
                f,
                "Clean: Meilisearch holds exactly what MongoDB says it should."
            )
        } else {
            write!(
                f,
                "Differences found. Unflagged missing or stale documents are pending work the next \
                 run indexes; flagged ones, and unexpected documents, are not. \
                 `meili-reconciler verify --repair` fixes them all."
            )
        }
    }
}

/// One kind of difference: its count, how many are flagged, what it means,
/// and a few example ids.
fn line(f: &mut fmt::Formatter<'_>, name: &str, d: &Difference, meaning: &str) -> fmt::Result {
    write!(f, "  {:<11} {}", format!("{name}:"), d.count)?;
    if d.count == 0 {
        return writeln!(f);
    }
    if let Some(flagged) = d.flagged {
        write!(f, " ({flagged} flagged as indexed)")?;
    }
    let more = (d.count > d.examples.len() as u64).then_some(", …");
    let more = more.unwrap_or_default();
    writeln!(f, " — {meaning}: {}{more}", d.examples.join(", "))
}

#[cfg(test)]
mod tests {
    use crate::reconcile::verify::tests::sample_report;

    #[test]
    fn the_report_names_each_kind_of_difference() {
        let report = sample_report();
        let text = report.to_string();
        assert!(
            text.contains("missing:    1 (1 flagged as indexed)"),
            "{text}"
        );
        assert!(text.contains("msg-2"), "{text}");
        assert!(text.contains("unexpected: 0"), "{text}");
        assert!(text.contains("Differences found"), "{text}");
    }
}
