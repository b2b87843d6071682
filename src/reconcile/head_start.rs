//! The head start (docs/design.md §4.6, Head start): a small backlog is
//! sent while the plan counts.
//!
//! The plan's count of a collection reads every searchable document
//! (seconds at a million), and a run that waited for it before reading its
//! backlog put those seconds in front of a chain no limit counts: read,
//! Meilisearch's indexing batch, acknowledgement. In the steady state (the
//! index exists with the right primary key and settings, and there is
//! nothing to clean up, compare or drop:
//! [`IndexPlan::may_send_before_counts`]), the counts cannot forbid indexing
//! the unflagged backlog. They decide a rebuild (the index lost), the drift
//! check after indexing, the threshold and how to read a large backlog. So
//! the backlog's first page is read beside the counts. When the page is the
//! whole backlog (shorter than a page) and reaches the threshold, it is sent
//! at once. Its acknowledgement waits for the counts ([`Ctx::ack_gate`]), so
//! they see MongoDB's flags as the run found them and the drift check
//! compares them with the index's count read before anything was sent. A
//! rebuild decided by the counts drops the head start: its acknowledger has
//! written nothing, and what it enqueued is in the index the rebuild fills
//! anyway.

use std::collections::HashSet;

use mongodb::bson::DateTime;
use tokio::sync::watch;

use super::ack::Tally;
use super::ctx::Ctx;
use super::error::ReconcileError;
use super::phases::Phase;
use super::plan::{self, IndexPlan};
use super::sync;
use crate::mongo;

/// Counts `surveyed`'s collection at `now` while reading the first page of
/// its unflagged backlog (and sending it, when it is the whole backlog and
/// reaches the threshold); returns the index's plan, decided from the
/// counts, and what the sender of the backlog did, acknowledged once the
/// counts allowed it. Nothing is acknowledged before the counts are taken.
/// `None`: nothing was sent — the backlog fills a page (the counts choose
/// how to read it), it is below the threshold, or the counts decided a
/// rebuild.
pub(crate) async fn count_with_head_start(
    ctx: &Ctx<'_>,
    surveyed: &IndexPlan,
    now: DateTime,
) -> Result<(IndexPlan, Option<Tally>), ReconcileError> {
    let (gate, gate_rx) = watch::channel(false);
    let mut gated = ctx.on_index(ctx.uid.clone());
    gated.ack_gate = Some(gate_rx);
    let counting = async {
        // Tests pause here to see the head start run ahead of the counts.
        super::test_hook::pause_after("head-start-counting").await;
        plan::count(ctx.db, ctx.opts, ctx.collection, now).await
    };
    let sending = send_small_backlog(&gated, now);
    tokio::pin!(counting, sending);
    let mut sent = None;
    let counts = loop {
        tokio::select! {
            counts = &mut counting => break counts?,
            settled = &mut sending, if sent.is_none() => sent = Some(settled?),
        }
    };
    let index = surveyed.decide(counts, ctx.opts);
    if index.rebuild.is_some() {
        // Dropped with the gate closed: nothing of it was acknowledged.
        tracing::info!(index = %ctx.uid, "the counts decided a rebuild: the head start is dropped");
        return Ok((index, None));
    }
    gate.send_replace(true);
    let settled = match sent {
        Some(settled) => settled,
        None => sending.await?,
    };
    Ok((index, settled))
}

/// Reads the first page of the unflagged backlog at `now` and, when it is
/// the whole backlog and reaches the threshold, sends it (acknowledged as
/// `ctx.ack_gate` allows). `None`: nothing was sent.
async fn send_small_backlog(ctx: &Ctx<'_>, now: DateTime) -> Result<Option<Tally>, ReconcileError> {
    let opts = ctx.opts;
    let page_size = opts.batch_docs.max(1);
    let reading = std::time::Instant::now();
    let unflagged = Some(mongo::Backlog::Unflagged);
    let page = ctx.read_page(unflagged, now, None).await?;
    ctx.phases.add(Phase::Read, reading.elapsed());
    let docs = page.len();
    if docs >= page_size {
        tracing::debug!(index = %ctx.uid, docs, "head start: the backlog fills a page; the counts decide how to read it");
        return Ok(None);
    }
    if (docs as u64) < opts.threshold && !opts.force {
        tracing::debug!(index = %ctx.uid, docs, threshold = opts.threshold,
            "head start: the backlog is below the threshold; the counts decide");
        return Ok(None);
    }
    if docs > 0 {
        tracing::info!(index = %ctx.uid, docs, "head start: sending the backlog while the plan counts");
    }
    ctx.phase("index", docs as u64);
    // Cut and sent as the reader cuts a page it read (the raw page freed
    // as it is cut), through the same sender.
    let read = sync::Read::Filtered(mongo::Backlog::Unflagged);
    let settled = sync::run_pass(ctx, read, &HashSet::new(), Some((now, page))).await?;
    Ok(Some(settled))
}
