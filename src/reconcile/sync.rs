//! The pipelined indexer (docs/design.md §4.6): three concurrent stages
//! per pass. The reader reads documents in `_id` order — a plain scan
//! filtered in Rust when the pass expects more than [`PLAIN_SCAN_ABOVE_PAGES`]
//! pages, the server's unindexed filter otherwise ([`Read`]) — and cuts them
//! into NDJSON batches by count and bytes, beginning a page only when the
//! sender has taken every batch it was handed and has room for another
//! ([`Demand`]), so no finished batch waits for room. The sender enqueues batches while
//! fewer than `max_bytes_in_flight` bytes (and `in_flight` tasks) are enqueued
//! and not yet indexed and handed to the acknowledger, so Meilisearch can
//! merge consecutive tasks into one indexing batch; it drops each batch's
//! NDJSON once enqueued, keeping only the compact
//! [`BatchDoc`](super::batch::BatchDoc)s, and settles
//! each task. The acknowledger acknowledges settled batches from a bounded
//! queue, beside the sender, which never waits on it while the budget has
//! room.
//! Each stage adds its time to the run's [`super::phases`].
//!
//! The acknowledgement is version-exact ([`super::ack`]): each document's
//! flag is set only if it still has the very `updatedAt` value that was read
//! and sent, and documents deleted, made unindexable or changed while their
//! batch was in flight are found and handled in the same run. A document
//! edited in between stays (or becomes) unindexed; it is read again by `_id`
//! and sent again in the same run, and Meilisearch's task order leaves the
//! latest version. Memory is bounded by the settings (the formula is in the
//! design document).
//!
//! The same sender serves a forced reindex's build ([`Read::Everything`]:
//! every indexable document into the index `ctx.uid` names, with no
//! acknowledgement — the flags describe the live index until the swap) and
//! the exact comparison's repairs ([`super::exact`], which feeds its own
//! batches to [`send_batches`]).
//!
//! A pass may start from a page already read ([`run_pass`]'s `first`): the
//! head start's (`super::head_start`), sent while the plan counts.
//!
//! Here: the passes and the reader; the sender and the acknowledger are in
//! `send`, what a batch holds in `batch`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mongodb::bson::{Bson, DateTime, Document, RawDocumentBuf};
use tokio::sync::{mpsc, watch};

use super::ack::Tally;
use super::apply;
use super::batch::{ndjson_line, Batch};
use super::ctx::Ctx;
use super::error::ReconcileError;
use super::phases::Phase;
use super::send::{max_changed_ids, send_batches, Demand};
use crate::librechat::markers;
use crate::librechat::searchable::{self, Retention};
use crate::mongo::{self, id_key};

/// Passes of one run: the read of the unindexed documents, then re-sends of
/// the documents that changed while in flight, until none did (bounded: a
/// document edited faster than it can be indexed is left to the next run).
const MAX_PASSES: usize = 5;

/// A pass reads by plain `_id` range pages (filtering in Rust) when it
/// expects more than this many pages of documents, and with the unindexed
/// filter otherwise. On DocumentDB-based servers a filtered page sorted by
/// `_id` costs a large fraction of a plain scan of the whole collection
/// (less with the narrow [`mongo::Backlog::Unflagged`] hinted to
/// LibreChat's index), so beyond two or three pages the scan is cheaper; on MongoDB both walk the `_id` index once, and the
/// plain scan only transfers the flagged documents too.
pub(crate) const PLAIN_SCAN_ABOVE_PAGES: u64 = 2;

/// Indexes every unindexed indexable document of the collection (about
/// `expected` of them, of which `backlog` says which a filtered read must
/// look for), leaving out the documents whose `_id` key is in
/// `already_rejected` (refused earlier in the same run, and reported there).
///
/// One read of the collection ([`run_pass`]); then the documents whose
/// acknowledgement found them changed while in flight are read again by
/// `_id` and sent again (acknowledged alike), until none changed. No second
/// read of the collection: on DocumentDB-based servers the unindexed filter
/// sorted by `_id` costs seconds a page at 1M documents, and what it would
/// find beyond those — documents others wrote behind the reader — is the
/// next run's (or follow mode's) to index; LibreChat's save hook normally
/// indexes them itself.
pub(crate) async fn index_unindexed(
    ctx: &Ctx<'_>,
    expected: u64,
    backlog: mongo::Backlog,
    already_rejected: &HashSet<String>,
) -> Result<Tally, ReconcileError> {
    ctx.phase("index", expected);
    let page_size = ctx.opts.batch_docs.max(1) as u64;
    let read = if expected > PLAIN_SCAN_ABOVE_PAGES * page_size {
        Read::Plain
    } else {
        Read::Filtered(backlog)
    };
    let done = run_pass(ctx, read, already_rejected, None).await?;
    tracing::debug!(index = %ctx.uid, pass = 1, ?read, indexed = done.indexed, "indexing pass done");
    send_changed_again(ctx, done, backlog, already_rejected).await
}

/// After a first pass — a read of the collection ([`index_unindexed`]) or
/// a head start's page (`super::head_start`), which `first` settled — the
/// documents whose acknowledgement found them changed while in flight are
/// read again by `_id` and sent again (acknowledged alike), until none
/// changed (at most [`MAX_PASSES`] passes in all). Returns what every pass
/// did (but the documents to send again).
pub(crate) async fn send_changed_again(
    ctx: &Ctx<'_>,
    first: Tally,
    backlog: mongo::Backlog,
    already_rejected: &HashSet<String>,
) -> Result<Tally, ReconcileError> {
    let mut outcome = Tally::default();
    let mut rejected_ids = already_rejected.clone();
    let (mut changed, mut overflowed) = absorb(&mut outcome, first, &mut rejected_ids);
    // The changed documents are scattered over the collection: read back by
    // `_id` list, never by a range that could span it.
    let scattered = ctx.on_index(ctx.uid.clone()).with_scattered_ids();
    let rules = &ctx.opts.rules;
    for pass in 2..=MAX_PASSES {
        if overflowed {
            // Too many changed to keep their `_id`s: one filtered read of
            // the collection finds them (they are unflagged).
            tracing::info!(index = %ctx.uid, pass, kept_at_most = max_changed_ids(ctx.opts),
                "many documents changed while in flight: reading the unindexed ones again");
            let done = run_pass(ctx, Read::Filtered(backlog), &rejected_ids, None).await?;
            (changed, overflowed) = absorb(&mut outcome, done, &mut rejected_ids);
            continue;
        }
        if changed.is_empty() {
            break;
        }
        let now = mongo::server_time(ctx.db).await?;
        let by_ids = mongo::ReadBack::Ids;
        let read = mongo::read_documents(ctx.db, rules, ctx.collection, &changed, by_ids).await?;
        let wanted = |d: &Document| {
            let id = d.get("_id").unwrap_or(&Bson::Null);
            mongo::is_unindexed(rules, ctx.collection, d, now)
                && !rejected_ids.contains(&id_key(id))
        };
        let docs: Vec<Document> = read.into_iter().filter(wanted).collect();
        tracing::debug!(index = %ctx.uid, pass, changed = changed.len(), sending = docs.len(),
            "sending again the documents that changed while in flight");
        let settled = apply::index_documents(&scattered, docs, now).await?;
        (changed, overflowed) = absorb(&mut outcome, settled, &mut rejected_ids);
    }
    if !changed.is_empty() || overflowed {
        tracing::info!(index = %ctx.uid, docs = changed.len(), overflowed,
            "documents kept changing while in flight: left unindexed for the next run");
    }
    Ok(outcome)
}

/// Adds what a pass's sender did to `outcome`, its rejects to
/// `rejected_ids`; returns the `_id`s to send again and whether more
/// changed than were kept.
fn absorb(
    outcome: &mut Tally,
    mut settled: Tally,
    rejected_ids: &mut HashSet<String>,
) -> (Vec<Bson>, bool) {
    rejected_ids.extend(super::rejects::keys(&settled.rejected));
    let changed = std::mem::take(&mut settled.changed);
    let overflowed = std::mem::take(&mut settled.changed_overflowed);
    outcome.add(settled);
    (changed, overflowed)
}

/// Which documents a pass reads from MongoDB, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Pages of the unindexed documents (of the backlog, those
    /// [`mongo::Backlog`] selects), filtered by the server.
    Filtered(mongo::Backlog),
    /// The unindexed documents by a plain `_id`-ordered scan of every
    /// document ([`mongo::Scan`]), filtered in Rust ([`mongo::is_unindexed`]).
    Plain,
    /// Every indexable document whatever its flag, by a plain scan, not
    /// acknowledged (a reindex's build).
    Everything,
}

/// One pass over the documents `read` selects (leaving out `skip`), sent
/// into `ctx.uid`; its first page is `first` when given (read at its time,
/// e.g. the head start's, `super::head_start`): it is cut and sent as the
/// reader cuts a page it read, and one shorter than `sync.batch_docs` ends
/// the pass.
pub(crate) async fn run_pass(
    ctx: &Ctx<'_>,
    read: Read,
    skip: &HashSet<String>,
    first: Option<(DateTime, Vec<RawDocumentBuf>)>,
) -> Result<Tally, ReconcileError> {
    let (tx, rx) = mpsc::channel::<Batch>(1);
    let (demand_tx, demand_rx) = watch::channel(Demand::default());
    let page_size = ctx.opts.batch_docs.max(1);
    let reader = Reader {
        ctx,
        read,
        tx,
        demand: demand_rx,
        handed: 0,
        skip,
        first,
        scan: (!matches!(read, Read::Filtered(_)))
            .then(|| mongo::Scan::new(ctx.db, &ctx.opts.rules, ctx.collection, page_size)),
        page_size,
        after: None,
        batch: Batch::default(),
    };
    let acknowledge = read != Read::Everything;
    let sending = send_batches(ctx, acknowledge, rx, Some(demand_tx));
    let ((), settled) = tokio::try_join!(reader.run(), sending)?;
    Ok(settled)
}

/// The reader stage of a pass: pages of the documents `read` selects in,
/// batches out.
struct Reader<'r, 'a> {
    ctx: &'r Ctx<'a>,
    read: Read,
    tx: mpsc::Sender<Batch>,
    /// What the sender asks for ([`Demand`]).
    demand: watch::Receiver<Demand>,
    /// Batches handed to the sender.
    handed: u64,
    skip: &'r HashSet<String>,
    /// A page already read, and its time.
    first: Option<(DateTime, Vec<RawDocumentBuf>)>,
    /// The cursor of a plain scan.
    scan: Option<mongo::Scan>,
    page_size: usize,
    /// The last `_id` read, where a filtered page resumes.
    after: Option<Bson>,
    /// The batch being filled.
    batch: Batch,
}

impl Reader<'_, '_> {
    /// Reads and cuts until the pass has read everything or the sender
    /// stopped.
    async fn run(mut self) -> Result<(), ReconcileError> {
        loop {
            // Before a page is read, the sender's demand: while it waits for
            // room in Meilisearch the reader waits here, holding no page and
            // no finished batch (only the one it is filling; the queue is
            // empty once the sender has taken every batch): it builds a batch
            // only when the sender can enqueue it, so a run the budget holds
            // back keeps what a run it never holds back keeps.
            let waiting = Instant::now();
            let handed = self.handed;
            let demand = self.demand.wait_for(|d| d.wants_more_after(handed));
            let wanted = demand.await.is_ok();
            self.ctx.phases.add(Phase::ReaderWaited, waiting.elapsed());
            if !wanted {
                return Ok(()); // the sender stopped; its error is reported
            }
            if !self.read_page().await? {
                return Ok(()); // read everything, or the sender stopped
            }
            self.pause_between_pages().await?;
        }
    }

    /// Reads one page and cuts it into batches. A page is read in parts: a
    /// plain scan's documents are taken off its cursor a round trip at a
    /// time and cut into batches before the next part is fetched, so the
    /// reader never holds a whole page of raw documents; a filtered page is
    /// one query, one part. `true`: the page was full, the next follows;
    /// `false`: the pass has read everything, or the sender stopped (its
    /// error is reported).
    async fn read_page(&mut self) -> Result<bool, ReconcileError> {
        let started = Instant::now();
        let now = match &self.first {
            Some((now, _)) => *now,
            None => mongo::server_time(self.ctx.db).await?,
        };
        self.ctx.phases.add(Phase::Read, started.elapsed());
        let mut read_in_page = 0usize;
        let mut page_ended = false;
        let mut building = Duration::ZERO;
        while read_in_page < self.page_size && !page_ended {
            let reading = Instant::now();
            let part;
            (part, page_ended) = self.next_part(now, read_in_page).await?;
            self.ctx.phases.add(Phase::Read, reading.elapsed());
            super::test_hook::pause_after("page-read").await;
            read_in_page += part.len();
            self.after = part.last().and_then(mongo::raw_id).or(self.after.take());
            if !self.cut_part(&part, now, &mut building).await? {
                return Ok(false);
            }
        }
        self.ctx.phases.add(Phase::Build, building);
        tracing::debug!(index = %self.ctx.uid, docs = read_in_page, ms = started.elapsed().as_millis() as u64, "page read and cut");
        // A plain scan keeps filling the batch across pages (a page may
        // hold few unindexed documents); a filtered page is sent as it ends,
        // so small passes are not held back.
        let flush = page_ended || matches!(self.read, Read::Filtered(_));
        if flush && !self.batch.is_empty() && !self.cut().await {
            return Ok(false);
        }
        Ok(!page_ended)
    }

    /// The next part of the page: the page already read, a round trip of
    /// the plain scan, or a filtered page. `true` with it: the page ends
    /// there (it came short).
    async fn next_part(
        &mut self,
        now: DateTime,
        read_in_page: usize,
    ) -> Result<(Vec<RawDocumentBuf>, bool), ReconcileError> {
        if let Some((_, page)) = self.first.take() {
            let ended = page.len() < self.page_size;
            return Ok((page, ended));
        }
        if let Some(scan) = &mut self.scan {
            let wanted = (self.page_size - read_in_page).min(mongo::SCAN_ROUND_TRIP_DOCS);
            let part = scan.next_page(wanted).await?;
            let ended = part.len() < wanted;
            return Ok((part, ended));
        }
        let backlog = match self.read {
            Read::Filtered(backlog) => Some(backlog),
            _ => None,
        };
        let after = self.after.as_ref();
        let part = self.ctx.read_page(backlog, now, after).await?;
        let ended = part.len() < self.page_size;
        Ok((part, ended))
    }

    /// Adds the part's wanted documents to batches, handing each full one
    /// to the sender; the time spent building is added to `building`.
    /// `false`: the sender stopped.
    async fn cut_part(
        &mut self,
        part: &[RawDocumentBuf],
        now: DateTime,
        building: &mut Duration,
    ) -> Result<bool, ReconcileError> {
        let opts = self.ctx.opts;
        let mut built = Instant::now();
        for raw in part {
            let doc = &mongo::parse(raw)?;
            let Some(branch) = self.wanted(doc, now) else {
                continue;
            };
            let line = ndjson_line(self.ctx.collection, doc)?;
            // Cut before a line that would overflow the batch's bytes, and
            // right after the line that fills its count: not when the next
            // document arrives, so a reader the budget holds back waits
            // holding no batch beside the queued one.
            if self.batch.is_full_for(line.len(), opts)
                && !self.timed_cut(building, &mut built).await
            {
                return Ok(false);
            }
            self.batch
                .push_document(self.ctx.collection, doc, branch, &line);
            if self.batch.len() >= opts.batch_docs && !self.timed_cut(building, &mut built).await {
                return Ok(false);
            }
        }
        *building += built.elapsed();
        Ok(true)
    }

    /// [`Self::cut`], the time since `built` added to `building` and
    /// `built` restarted after it (the wait is not building).
    async fn timed_cut(&mut self, building: &mut Duration, built: &mut Instant) -> bool {
        *building += built.elapsed();
        let delivered = self.cut().await;
        *built = Instant::now();
        delivered
    }

    /// Whether the pass sends `doc`: the branch of LibreChat's retention
    /// filter it is searchable in (what its acknowledgement checks again;
    /// a filtered page holds only searchable documents, by the same rule
    /// and `now`), unless it is skipped or indexed and the pass reads only
    /// the unindexed ones.
    fn wanted(&self, doc: &Document, now: DateTime) -> Option<Retention> {
        let rules = &self.ctx.opts.rules;
        let branch = searchable::searchable_branch(rules, self.ctx.collection, doc, now)?;
        let indexed = self.read != Read::Everything && markers::is_processed(rules, doc);
        let key = id_key(doc.get("_id").unwrap_or(&Bson::Null));
        (!indexed && !self.skip.contains(&key)).then_some(branch)
    }

    /// `sync.delay` between pages, ended early by a lost lease.
    async fn pause_between_pages(&mut self) -> Result<(), ReconcileError> {
        if !self.ctx.opts.delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(self.ctx.opts.delay) => {}
                _ = self.ctx.guard.cancelled() => { self.ctx.guard.check()?; }
            }
        }
        Ok(())
    }

    /// Hands the batch being filled over to the sender, counted in the
    /// demand, and starts a new one: the queue is empty unless
    /// the page fills a second batch, which waits for it, counted as the
    /// reader waiting on the pipeline. `false`: the sender stopped.
    async fn cut(&mut self) -> bool {
        let mut full = std::mem::take(&mut self.batch);
        full.shrink_to_fit();
        self.handed += 1;
        tracing::debug!(index = %self.ctx.uid, docs = full.len(), handed = self.handed, "batch handed to the sender");
        let waiting = Instant::now();
        let delivered = self.tx.send(full).await.is_ok();
        self.ctx.phases.add(Phase::ReaderWaited, waiting.elapsed());
        delivered
    }
}
