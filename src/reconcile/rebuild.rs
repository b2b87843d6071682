//! Rebuilding an index whose structure is wrong (docs/design.md §4.3): create a
//! missing index with the right primary key, or delete and recreate one whose
//! primary key is wrong, and reset the collection's flags so everything is
//! sent again.
//!
//! The flag reset runs in `_id`-range batches, each one update that checks
//! the lease first. It is naturally resumable: after a crash the index is
//! empty (or far smaller) while flags remain set, so the next plan decides on
//! a rebuild again and the reset continues with the documents still flagged.

use super::ctx::{wait_tolerating, Ctx};
use crate::meili::MeiliError;
use crate::mongo;

/// Flags cleared per range update (halved while the server stops an update
/// for taking too long: DocumentDB-based servers allow a statement 10 s, and
/// with LibreChat's indexes one document's update can cost milliseconds).
const RESET_BATCH: usize = 2_000;

/// Creates `uid` with the primary key of `ctx`'s collection, deleting it
/// first when it `exists`.
pub(crate) async fn recreate_index(
    ctx: &Ctx<'_>,
    uid: &str,
    exists: bool,
) -> Result<(), MeiliError> {
    let (meili, guard, pk) = (ctx.meili, ctx.guard, ctx.collection.primary_key());
    if exists {
        // Someone deleting it in between is fine.
        let task = meili.delete_index(uid, guard).await?;
        wait_tolerating(meili, task, "index_not_found", "delete index", guard).await?;
    }
    let task = meili.create_index(uid, pk, guard).await?;
    meili.wait_ok(task, "create index", guard).await
}

/// Clears every flag of the collection, batch by batch. Returns how many.
pub(crate) async fn reset_flags(ctx: &Ctx<'_>) -> Result<u64, mongo::MongoError> {
    ctx.phase("reset flags", 0);
    let mut after = None;
    let mut cleared = 0;
    let (db, collection, guard) = (ctx.db, ctx.collection, ctx.guard);
    loop {
        let (n, upper) =
            mongo::reset_flags_batch(db, collection, after.as_ref(), RESET_BATCH, guard).await?;
        cleared += n;
        ctx.advance(n);
        match upper {
            Some(upper) => after = Some(upper),
            None => return Ok(cleared),
        }
    }
}
