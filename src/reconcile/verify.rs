//! `meili-reconciler verify [--index messages|convos] [--repair] [--json]`
//! (docs/design.md, "Exact comparison and `verify`"): the exact-state proof.
//! Every Meilisearch document of an index is compared with the projection
//! of its MongoDB document ([`super::exact`]), and the differences are
//! reported as *missing* (indexable in MongoDB, absent from Meilisearch —
//! with how many of those MongoDB flags as indexed), *unexpected* (in
//! Meilisearch, gone or not indexable in MongoDB) and *stale* (Meilisearch
//! holds another version), with a few example ids each.
//!
//! [`verify`] only reads (no lease, no write). [`repair`] runs as the lease
//! owner: the structure and settings step of a reconciliation first, then
//! the comparison, fixing exactly the differences it finds (missing and
//! stale documents sent and flagged version-exactly, unexpected ones
//! deleted, flags of what the index holds exactly set); it also clears the
//! reindex marker of an index it compared and drops a leftover build index.
//!
//! Plain data: the report's text is `report::verify`'s. JSON shape
//! (`--json`, stable; camelCase): `{ clean, indexes: [ {
//! collection, indexUid, meiliDocuments, mongoIndexable, matching,
//! missing: { count, flagged, examples }, unexpected: { count, examples },
//! stale: { count, flagged, examples }, partitions } ] }`.

use std::collections::HashSet;

use mongodb::Database;
use serde::Serialize;

use super::ctx::Run;
use super::error::ReconcileError;
use super::exact::{self, Comparison};
use super::excluded;
use super::options::{collections, SyncOptions};
use super::run::{clear_reindex_leftovers, finish, planned, prepare_index};
use super::summary::RunSummary;
use crate::lease::Guard;
use crate::meili::Meili;
use crate::mongo::Collection;
use crate::progress::Progress;

/// What `verify` found in one index.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexReport {
    pub(crate) collection: Collection,
    pub(crate) index_uid: String,
    #[serde(flatten)]
    pub comparison: Comparison,
}

/// What `verify` found.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// No difference in any index compared.
    pub clean: bool,
    pub indexes: Vec<IndexReport>,
}

/// Compares the indexes (`only` one, or both) with MongoDB; writes nothing.
pub async fn verify(
    db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
    only: Option<Collection>,
    progress: &Progress,
) -> Result<VerifyReport, ReconcileError> {
    let guard = Guard::unfenced();
    let run = Run::new(db, meili, opts, &guard, progress);
    let mut indexes = Vec::new();
    for collection in collections(only) {
        let ctx = run.ctx(collection, progress);
        let (comparison, _) = exact::compare(&ctx, None).await?;
        indexes.push(IndexReport {
            collection,
            index_uid: ctx.uid.clone(),
            comparison,
        });
    }
    progress.phase("done", 0);
    Ok(VerifyReport {
        clean: indexes.iter().all(|i| i.comparison.is_exact()),
        indexes,
    })
}

/// `verify --repair`, as lease owner: per index the structure and settings
/// step, then the comparison, repairing every difference it finds. The
/// summary's `verified` says what was found.
pub async fn repair(
    db: &Database,
    meili: &Meili,
    opts: &SyncOptions,
    only: Option<Collection>,
    guard: &Guard,
    progress: &Progress,
) -> Result<RunSummary, ReconcileError> {
    let run = Run::new(db, meili, opts, guard, progress);
    let mut summaries = Vec::new();
    for index in &planned(&run, only).await? {
        let mut summary = prepare_index(&run, index).await?;
        summary.compared_ids = true;
        summary.rebuilt = index.rebuild.clone().filter(|r| r.recreates_index());
        let ctx = run.ctx(index.collection, progress);
        let (comparison, repairs) = exact::compare(&ctx, Some(&HashSet::new())).await?;
        summary.verified = Some(comparison);
        summary.add(repairs);
        summary.add(excluded::clean_up(&ctx).await?);
        // The comparison an interrupted reindex asked for is done.
        clear_reindex_leftovers(&ctx, index).await?;
        summaries.push(summary);
    }
    Ok(finish(&run, summaries))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A report of one index with a missing and a stale document (also
    /// what the rendering's test reads).
    pub(crate) fn sample_report() -> VerifyReport {
        let mut comparison = Comparison {
            meili_documents: 10,
            mongo_indexable: 10,
            matching: 8,
            ..Comparison::default()
        };
        comparison.missing.count = 1;
        comparison.missing.flagged = Some(1);
        comparison.missing.examples = vec!["msg-1".into()];
        comparison.stale.count = 1;
        comparison.stale.flagged = Some(0);
        comparison.stale.examples = vec!["msg-2".into()];
        VerifyReport {
            clean: false,
            indexes: vec![IndexReport {
                collection: Collection::Messages,
                index_uid: "messages".into(),
                comparison,
            }],
        }
    }

    #[test]
    fn the_report_serializes_each_kind_of_difference() {
        let report = sample_report();
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["indexes"][0]["missing"]["count"], 1);
        assert_eq!(json["indexes"][0]["missing"]["flagged"], 1);
        assert_eq!(json["indexes"][0]["stale"]["examples"][0], "msg-2");
        assert!(json["indexes"][0]["unexpected"].get("flagged").is_none());
        assert_eq!(json["indexes"][0]["indexUid"], "messages");
        assert_eq!(json["clean"], false);
    }
}
