//! The pipelined indexer (docs/design.md §4.6): three concurrent stages
//! per pass. The reader reads documents in `_id` order — a plain scan
//! filtered in Rust when the pass expects more than [`PLAIN_SCAN_ABOVE_PAGES`]
//! pages, the server's unindexed filter otherwise ([`Read`]) — and cuts them
//! into NDJSON batches by count and bytes. The sender enqueues batches while
//! fewer than `max_bytes_in_flight` bytes (and `in_flight` tasks) are enqueued
//! and not yet indexed and handed to the acknowledger, so Meilisearch can
//! merge consecutive tasks into one indexing batch; it drops each batch's
//! NDJSON once enqueued, keeping only the compact [`BatchDoc`]s, and settles
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
//! The same sender serves a forced reindex's build ([`Feed::Indexable`]:
//! every indexable document into the index `ctx.uid` names, with no
//! acknowledgement — the flags describe the live index until the swap) and
//! the exact comparison's repairs ([`super::exact`], which feeds its own
//! batches to [`send_batches`]).

use std::collections::{HashSet, VecDeque};
use std::ops::Range;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::ack;
use super::phases::Phase;
use super::rejects::{self, Rejected};
use super::{Ctx, ReconcileError};
use crate::mongo::{self, DocVersion};

/// Passes of one run: the read of the unindexed documents, then re-sends of
/// the documents that changed while in flight, until none did (bounded: a
/// document edited faster than it can be indexed is left to the next run).
const MAX_PASSES: usize = 5;

/// Which documents a pass reads, and whether it acknowledges them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Feed {
    /// Unindexed documents, each batch acknowledged once its task succeeded.
    Unindexed,
    /// Every indexable document whatever its flag, not acknowledged.
    Indexable,
}

impl Feed {
    fn acknowledges(self) -> bool {
        matches!(self, Feed::Unindexed)
    }
}

/// What one pass did.
#[derive(Debug, Default)]
pub(crate) struct PassOutcome {
    /// Documents sent.
    pub sent: u64,
    /// What the sender did with them.
    pub settled: Settled,
}

/// What indexing one collection did.
#[derive(Debug, Default)]
pub(crate) struct SyncOutcome {
    /// Documents Meilisearch confirmed.
    pub indexed: u64,
    /// Documents deleted from Meilisearch because they were deleted or made
    /// unindexable in MongoDB while their batch was in flight.
    pub deleted: u64,
    /// Flags cleared because the document changed while in flight.
    pub flags_cleared: u64,
    pub rejected: Vec<Rejected>,
}

/// What the sender did with the batches it was given.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Documents Meilisearch confirmed.
    pub indexed: u64,
    /// See [`SyncOutcome`].
    pub deleted: u64,
    pub flags_cleared: u64,
    pub rejected: Vec<Rejected>,
    /// The `_id`s of documents that changed while in flight: their flags
    /// are cleared, and they are to be sent again.
    pub changed: Vec<Bson>,
    /// More documents changed than [`max_changed_ids`] allows keeping: not
    /// all are in `changed`, and only a read of the collection finds them.
    pub changed_overflowed: bool,
}

/// One document of a batch: what its acknowledgement needs. Up to
/// `sync.max_bytes_in_flight` worth of documents wait in flight at once, so
/// LibreChat's own documents — an ObjectId `_id`, a date `updatedAt` and a
/// UUID `messageId`/`conversationId` — are held inline in 40 bytes with no
/// allocation (it was ≈ 100: a 56-byte struct plus the id's text on the
/// heap); anything else is boxed and converts back exactly as well.
#[derive(Clone, Debug)]
pub(crate) enum BatchDoc {
    Typical {
        id: ObjectId,
        updated_at: mongodb::bson::DateTime,
        meili_id: Uuid,
    },
    Other(Box<OtherDoc>),
}

/// A [`BatchDoc`] that is not [`BatchDoc::Typical`].
#[derive(Clone, Debug)]
pub(crate) struct OtherDoc {
    id: Bson,
    updated_at: Option<Bson>,
    meili_id: Option<Box<str>>,
}

impl BatchDoc {
    /// A document sent at `version`.
    pub fn new(version: &DocVersion, meili_id: Option<String>) -> BatchDoc {
        if let (Bson::ObjectId(id), Some(Bson::DateTime(updated_at)), Some(uuid)) = (
            &version.id,
            &version.updated_at,
            meili_id.as_deref().and_then(canonical_uuid),
        ) {
            return BatchDoc::Typical {
                id: *id,
                updated_at: *updated_at,
                meili_id: uuid,
            };
        }
        BatchDoc::Other(Box::new(OtherDoc {
            id: version.id.clone(),
            updated_at: version.updated_at.clone(),
            meili_id: meili_id.map(String::into_boxed_str),
        }))
    }

    /// Its `_id` and the `updatedAt` value that was read and sent.
    pub fn version(&self) -> DocVersion {
        match self {
            BatchDoc::Typical { id, updated_at, .. } => DocVersion {
                id: Bson::ObjectId(*id),
                updated_at: Some(Bson::DateTime(*updated_at)),
            },
            BatchDoc::Other(doc) => DocVersion {
                id: doc.id.clone(),
                updated_at: doc.updated_at.clone(),
            },
        }
    }

    /// The `_id`.
    pub fn mongo_id(&self) -> Bson {
        match self {
            BatchDoc::Typical { id, .. } => Bson::ObjectId(*id),
            BatchDoc::Other(doc) => doc.id.clone(),
        }
    }

    /// The Meilisearch id, when the document has one.
    pub fn meili_id(&self) -> Option<String> {
        match self {
            BatchDoc::Typical { meili_id, .. } => Some(meili_id.hyphenated().to_string()),
            BatchDoc::Other(doc) => doc.meili_id.as_deref().map(str::to_string),
        }
    }

    /// The BSON type of the `_id`.
    pub fn id_type(&self) -> mongodb::bson::spec::ElementType {
        match self {
            BatchDoc::Typical { .. } => mongodb::bson::spec::ElementType::ObjectId,
            BatchDoc::Other(doc) => doc.id.element_type(),
        }
    }
}

/// `text` as a UUID, when it is one written the way it prints back (lower
/// case, hyphenated — how LibreChat's `uuidv4()` writes its ids): only then
/// does the inline form give back the very same text.
fn canonical_uuid(text: &str) -> Option<Uuid> {
    let uuid = Uuid::try_parse(text).ok()?;
    let mut printed = [0u8; uuid::fmt::Hyphenated::LENGTH];
    (uuid.hyphenated().encode_lower(&mut printed).as_bytes() == text.as_bytes()).then_some(uuid)
}

/// Documents sent in one Meilisearch task, as NDJSON, in ascending `_id`
/// order (they are read that way).
#[derive(Debug)]
pub(crate) struct Batch {
    pub docs: Vec<BatchDoc>,
    /// Start of each document's line in `payload`, plus the end.
    offsets: Vec<usize>,
    payload: Vec<u8>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch {
            docs: Vec::new(),
            offsets: vec![0],
            payload: Vec::new(),
        }
    }

    /// Adds a MongoDB document (read with its `_id` and `updatedAt`) as the
    /// line Meilisearch gets.
    pub fn push_document(&mut self, collection: mongo::Collection, doc: &Document, line: &[u8]) {
        self.push(
            BatchDoc::new(&DocVersion::of(doc), mongo::meili_id(collection, doc)),
            line,
        );
    }

    fn push(&mut self, doc: BatchDoc, line: &[u8]) {
        self.docs.push(doc);
        self.payload.extend_from_slice(line);
        self.offsets.push(self.payload.len());
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.payload.len()
    }

    /// Whether adding a line of `line_len` bytes must start a new batch.
    pub fn is_full_for(&self, line_len: usize, opts: &super::SyncOptions) -> bool {
        !self.is_empty()
            && (self.len() >= opts.batch_docs || self.bytes() + line_len > opts.batch_bytes)
    }

    /// The NDJSON of documents `range`, copied (bisecting a refused batch).
    pub fn payload_of(&self, range: Range<usize>) -> Bytes {
        Bytes::copy_from_slice(&self.payload[self.offsets[range.start]..self.offsets[range.end]])
    }

    /// Takes the whole NDJSON out of the batch, without copying it, to be
    /// enqueued: while a task waits its turn in Meilisearch the batch keeps
    /// per document only what the acknowledgement needs (ids and versions),
    /// and the NDJSON is freed as soon as the request that sends it ends.
    fn take_payload(&mut self) -> Bytes {
        self.shrink_to_fit();
        self.offsets = Vec::new();
        Bytes::from(std::mem::take(&mut self.payload))
    }

    /// Gives back the slack a finished batch's vectors grew (up to as much
    /// again as they hold), which would otherwise wait in the queues with it.
    fn shrink_to_fit(&mut self) {
        self.payload.shrink_to_fit();
        self.offsets.shrink_to_fit();
        self.docs.shrink_to_fit();
    }
}

/// A document as one NDJSON line of its Meilisearch shape.
pub(crate) fn ndjson_line(
    collection: mongo::Collection,
    doc: &Document,
) -> Result<Vec<u8>, ReconcileError> {
    let mut line = serde_json::to_vec(&mongo::to_meili(collection, doc))
        .map_err(|e| ReconcileError::Other(format!("serializing a document: {e}")))?;
    line.push(b'\n');
    Ok(line)
}

/// The key a document's `_id` has in skip sets (see [`Rejected`]).
pub(crate) fn id_key(id: &Bson) -> String {
    mongo::id_key(id)
}

/// A pass reads by plain `_id` range pages (filtering in Rust) when it
/// expects more than this many pages of documents, and with the unindexed
/// filter otherwise. On DocumentDB-based servers a filtered page sorted by
/// `_id` costs about a third of a plain scan of the whole collection (1M
/// documents: 5–7 s a page against 18 s for the scan), so beyond two or
/// three pages the scan is cheaper; on MongoDB both walk the `_id` index
/// once, and the plain scan only transfers the flagged documents too.
pub(crate) const PLAIN_SCAN_ABOVE_PAGES: u64 = 2;

/// Indexes every unindexed indexable document of the collection (about
/// `expected` of them), leaving out the documents whose `_id` key is in
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
    already_rejected: &HashSet<String>,
) -> Result<SyncOutcome, ReconcileError> {
    ctx.phase("index", expected);
    let mut outcome = SyncOutcome::default();
    let mut rejected_ids = already_rejected.clone();
    let page_size = ctx.opts.batch_docs.max(1) as u64;
    let read = if expected > PLAIN_SCAN_ABOVE_PAGES * page_size {
        Read::Plain
    } else {
        Read::Filtered
    };
    let done = run_pass(ctx, Feed::Unindexed, read, &rejected_ids).await?;
    tracing::debug!(index = %ctx.uid, pass = 1, ?read, sent = done.sent, indexed = done.settled.indexed, "indexing pass done");
    let (mut changed, mut overflowed) = outcome.absorb(done.settled, &mut rejected_ids);
    // The changed documents are scattered over the collection: read back by
    // `_id` list, never by a range that could span it.
    let scattered = ctx.on_index(ctx.uid.clone()).with_scattered_ids();
    for pass in 2..=MAX_PASSES {
        if overflowed {
            // Too many changed to keep their `_id`s: one filtered read of
            // the collection finds them (they are unflagged).
            tracing::info!(index = %ctx.uid, pass, kept_at_most = max_changed_ids(ctx.opts),
                "many documents changed while in flight: reading the unindexed ones again");
            let done = run_pass(ctx, Feed::Unindexed, Read::Filtered, &rejected_ids).await?;
            (changed, overflowed) = outcome.absorb(done.settled, &mut rejected_ids);
            continue;
        }
        if changed.is_empty() {
            break;
        }
        let now = mongo::server_time(ctx.db).await?;
        let docs: Vec<Document> =
            mongo::read_documents(ctx.db, ctx.collection, &changed, mongo::ReadBack::Ids)
                .await?
                .into_iter()
                .filter(|d| {
                    let id = d.get("_id").unwrap_or(&Bson::Null);
                    mongo::is_unindexed(ctx.collection, d, now)
                        && !rejected_ids.contains(&id_key(id))
                })
                .collect();
        tracing::debug!(index = %ctx.uid, pass, changed = changed.len(), sending = docs.len(),
            "sending again the documents that changed while in flight");
        let settled = super::apply::index_documents(&scattered, docs).await?;
        (changed, overflowed) = outcome.absorb(settled, &mut rejected_ids);
    }
    if !changed.is_empty() || overflowed {
        tracing::info!(index = %ctx.uid, docs = changed.len(), overflowed,
            "documents kept changing while in flight: left unindexed for the next run");
    }
    Ok(outcome)
}

/// Most `_id`s of documents changed while in flight a pass keeps to send
/// again (five batches' worth): beyond that the next pass reads the
/// collection instead, so memory stays bounded by the settings whatever
/// others edit during a run.
pub(crate) fn max_changed_ids(opts: &super::SyncOptions) -> usize {
    5 * opts.batch_docs.max(1)
}

impl SyncOutcome {
    /// Adds what a pass's sender did; returns the `_id`s to send again and
    /// whether more changed than were kept.
    fn absorb(
        &mut self,
        settled: Settled,
        rejected_ids: &mut HashSet<String>,
    ) -> (Vec<Bson>, bool) {
        self.indexed += settled.indexed;
        self.deleted += settled.deleted;
        self.flags_cleared += settled.flags_cleared;
        for r in settled.rejected {
            rejected_ids.insert(r.mongo_id_key.clone());
            self.rejected.push(r);
        }
        (settled.changed, settled.changed_overflowed)
    }
}

/// How a pass reads its documents from MongoDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Pages of the documents the feed selects, filtered by the server.
    Filtered,
    /// A plain `_id`-ordered scan of every document ([`mongo::Scan`]),
    /// filtered in Rust ([`mongo::is_unindexed`], [`mongo::is_indexable`]).
    Plain,
}

/// One pass over the documents `feed` selects (leaving out `skip`), sent
/// into `ctx.uid`.
pub(crate) async fn run_pass(
    ctx: &Ctx<'_>,
    feed: Feed,
    read: Read,
    skip: &HashSet<String>,
) -> Result<PassOutcome, ReconcileError> {
    let (tx, rx) = mpsc::channel::<Batch>(1);
    let (sent, settled) = tokio::try_join!(
        read_batches(ctx, feed, read, tx, skip),
        send_batches(ctx, feed.acknowledges(), rx)
    )?;
    Ok(PassOutcome { sent, settled })
}

/// Reads pages of the documents `feed` selects and cuts them into batches.
async fn read_batches(
    ctx: &Ctx<'_>,
    feed: Feed,
    read: Read,
    tx: mpsc::Sender<Batch>,
    skip: &HashSet<String>,
) -> Result<u64, ReconcileError> {
    let opts = ctx.opts;
    let page_size = opts.batch_docs.max(1);
    let mut after: Option<Bson> = None;
    let mut sent = 0u64;
    let mut batch = Batch::new();
    let mut scan =
        (read == Read::Plain).then(|| mongo::Scan::new(ctx.db, ctx.collection, page_size));
    loop {
        let started = Instant::now();
        let now = mongo::server_time(ctx.db).await?;
        let page = match (&mut scan, feed) {
            (Some(scan), _) => scan.next_page(page_size).await?,
            (None, Feed::Unindexed) => {
                mongo::read_unindexed_page(ctx.db, ctx.collection, now, after.as_ref(), page_size)
                    .await?
            }
            (None, Feed::Indexable) => {
                mongo::read_indexable_page(ctx.db, ctx.collection, now, after.as_ref(), page_size)
                    .await?
            }
        };
        ctx.phases.add(Phase::Read, started.elapsed());
        tracing::debug!(index = %ctx.uid, docs = page.len(), ms = started.elapsed().as_millis() as u64, "page read");
        let full_page = page.len() == page_size;
        after = page.last().and_then(mongo::raw_id);
        let mut building = Instant::now();
        for raw in &page {
            let doc = &mongo::parse(raw)?;
            if read == Read::Plain {
                let wanted = match feed {
                    Feed::Unindexed => mongo::is_unindexed(ctx.collection, doc, now),
                    Feed::Indexable => mongo::is_indexable(ctx.collection, doc, now),
                };
                if !wanted {
                    continue;
                }
            }
            let mongo_id = doc.get("_id").cloned().unwrap_or(Bson::Null);
            if skip.contains(&id_key(&mongo_id)) {
                continue;
            }
            let line = ndjson_line(ctx.collection, doc)?;
            if batch.is_full_for(line.len(), opts) {
                sent += batch.len() as u64;
                ctx.phases.add(Phase::Build, building.elapsed());
                let full = std::mem::replace(&mut batch, Batch::new());
                if !hand_over(ctx, &tx, full).await {
                    return Ok(sent); // the sender stopped; its error is reported
                }
                building = Instant::now();
            }
            batch.push_document(ctx.collection, doc, &line);
        }
        ctx.phases.add(Phase::Build, building.elapsed());
        drop(page);
        // A plain scan keeps filling the batch across pages (a page may
        // hold few unindexed documents); a filtered page is sent as it ends,
        // as before, so small passes are not held back.
        let flush = !full_page || read == Read::Filtered;
        if flush && !batch.is_empty() {
            sent += batch.len() as u64;
            if !hand_over(ctx, &tx, std::mem::replace(&mut batch, Batch::new())).await {
                return Ok(sent);
            }
        }
        if !full_page {
            return Ok(sent);
        }
        if !opts.delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(opts.delay) => {}
                _ = ctx.guard.cancelled() => { ctx.guard.check()?; }
            }
        }
    }
}

/// Hands a finished batch to the sender, counting the wait as the reader
/// waiting on the pipeline. `false`: the sender stopped.
async fn hand_over(ctx: &Ctx<'_>, tx: &mpsc::Sender<Batch>, mut batch: Batch) -> bool {
    batch.shrink_to_fit();
    let waiting = Instant::now();
    let delivered = tx.send(batch).await.is_ok();
    ctx.phases.add(Phase::ReaderWaited, waiting.elapsed());
    delivered
}

/// Batches whose accepted documents wait for their acknowledgement: a
/// bounded queue between the sender and the acknowledger.
const ACK_QUEUE_BATCHES: usize = 4;

/// Sends batches, keeping at most `max_bytes_in_flight` bytes of NDJSON (and
/// `in_flight` tasks) enqueued in Meilisearch and not yet ended, so that
/// Meilisearch finds several tasks of the index enqueued and merges them into
/// one indexing batch; settles each task (wait, isolate rejects) and, when
/// `acknowledge`, hands its accepted documents to the acknowledger, which
/// runs beside the sender.
pub(crate) async fn send_batches(
    ctx: &Ctx<'_>,
    acknowledge: bool,
    rx: mpsc::Receiver<Batch>,
) -> Result<Settled, ReconcileError> {
    let (ack_tx, ack_rx) = mpsc::channel::<Vec<BatchDoc>>(ACK_QUEUE_BATCHES);
    let ack_tx = acknowledge.then_some(ack_tx); // dropped at once otherwise
    let (mut settled, acked) = tokio::try_join!(
        enqueue_and_settle(ctx, rx, ack_tx),
        acknowledge_queue(ctx, ack_rx)
    )?;
    settled.deleted += acked.deleted;
    settled.flags_cleared += acked.flags_cleared;
    settled.changed = acked.changed;
    settled.changed_overflowed = acked.changed_overflowed;
    Ok(settled)
}

/// The sender: enqueues batches within the in-flight budget, settles their
/// tasks and hands the settled batches to the acknowledger.
///
/// It never waits on the acknowledger while it has room to enqueue: when
/// Meilisearch ends a merged indexing batch, all of its tasks end at once,
/// and handing them over one by one to a queue of [`ACK_QUEUE_BATCHES`]
/// would leave Meilisearch with nothing enqueued until most of them were
/// acknowledged. Settled batches wait in the sender instead, and their bytes
/// keep counting against `max_bytes_in_flight` until the acknowledger takes
/// them, so memory stays bounded by the budget either way; a slow
/// acknowledger still holds enqueueing back, through the budget.
async fn enqueue_and_settle(
    ctx: &Ctx<'_>,
    mut rx: mpsc::Receiver<Batch>,
    ack_tx: Option<mpsc::Sender<Vec<BatchDoc>>>,
) -> Result<Settled, ReconcileError> {
    let max_tasks = ctx.opts.in_flight.max(1);
    let max_bytes = ctx.opts.max_bytes_in_flight.max(1);
    // NDJSON bytes of the tasks not yet ended plus those of `unhanded`.
    let mut bytes_held = 0usize;
    let mut pending = FuturesUnordered::new();
    // Settled batches the acknowledger has not taken yet, with their bytes.
    let mut unhanded: VecDeque<(usize, Vec<BatchDoc>)> = VecDeque::new();
    let mut settled = Settled::default();
    let mut open = true;
    while open || !pending.is_empty() || !unhanded.is_empty() {
        let room = open && pending.len() < max_tasks && bytes_held < max_bytes;
        let idle = if room {
            Phase::PipelineWaited
        } else if !unhanded.is_empty() {
            Phase::AckWaited
        } else {
            Phase::MeiliWait
        };
        let waiting = Instant::now();
        tokio::select! {
            Some(done) = pending.next(), if !pending.is_empty() => {
                ctx.phases.add(idle, waiting.elapsed());
                let done: Done = done?;
                settled.indexed += done.accepted.len() as u64;
                settled.rejected.extend(done.rejected);
                if ack_tx.is_some() && !done.accepted.is_empty() {
                    unhanded.push_back((done.bytes, done.accepted));
                } else {
                    bytes_held -= done.bytes;
                    ctx.advance(done.accepted.len() as u64);
                }
            }
            permit = reserve(ack_tx.as_ref()), if !unhanded.is_empty() => {
                ctx.phases.add(idle, waiting.elapsed());
                let Ok(permit) = permit else {
                    // The acknowledger stopped; its error is reported.
                    return Ok(settled);
                };
                let (bytes, docs) = unhanded.pop_front().expect("not empty");
                bytes_held -= bytes;
                permit.send(docs);
            }
            batch = rx.recv(), if room => {
                ctx.phases.add(idle, waiting.elapsed());
                match batch {
                    Some(mut batch) => {
                        let sending = Instant::now();
                        let payload = batch.take_payload();
                        let bytes = payload.len();
                        let task = ctx.meili.add_documents_ndjson(&ctx.uid, payload, ctx.guard).await?;
                        ctx.phases.add(Phase::Send, sending.elapsed());
                        bytes_held += bytes;
                        pending.push(settle(ctx, batch, bytes, task, sending));
                    }
                    None => open = false,
                }
            }
        }
    }
    Ok(settled)
}

/// Room in the acknowledger's queue; never ready without an acknowledger.
async fn reserve<T>(
    tx: Option<&mpsc::Sender<T>>,
) -> Result<mpsc::Permit<'_, T>, mpsc::error::SendError<()>> {
    match tx {
        Some(tx) => tx.reserve().await,
        None => std::future::pending().await,
    }
}

/// The acknowledger: acknowledges queued documents version-exactly, one
/// batch after another, until the sender is done.
async fn acknowledge_queue(
    ctx: &Ctx<'_>,
    mut rx: mpsc::Receiver<Vec<BatchDoc>>,
) -> Result<ack::Acked, ReconcileError> {
    let mut total = ack::Acked::default();
    while let Some(docs) = rx.recv().await {
        let started = Instant::now();
        let refs: Vec<&BatchDoc> = docs.iter().collect();
        let acked = ack::acknowledge(ctx, &refs).await?;
        ctx.phases.add(Phase::Ack, started.elapsed());
        total.flagged += acked.flagged;
        total.deleted += acked.deleted;
        total.flags_cleared += acked.flags_cleared;
        if total.changed.len() + acked.changed.len() > max_changed_ids(ctx.opts) {
            total.changed_overflowed = true;
        } else {
            total.changed.extend(acked.changed);
        }
        ctx.advance(docs.len() as u64);
    }
    Ok(total)
}

/// The documents of a refused batch as they are now, with their NDJSON:
/// read back per run of one `_id` type (by range or list, `Ctx::read_back`), keeping those of
/// the batch that are still indexable ([`mongo::is_indexable`] at MongoDB's
/// clock; whatever their flag, as every feed sends: a reindex's build and the
/// exact comparison's repairs send flagged documents too). A document deleted
/// or made unindexable meanwhile is left out: the refused task indexed
/// nothing, so nothing of it is searchable.
async fn reread(ctx: &Ctx<'_>, refused: &Batch) -> Result<Batch, ReconcileError> {
    let now = mongo::server_time(ctx.db).await?;
    let refs: Vec<&BatchDoc> = refused.docs.iter().collect();
    let mut batch = Batch::new();
    for run in ack::same_type_runs(&refs) {
        let ids: Vec<Bson> = run.iter().map(|d| d.mongo_id()).collect();
        let docs = mongo::read_documents(ctx.db, ctx.collection, &ids, ctx.read_back).await?;
        for doc in docs
            .iter()
            .filter(|d| mongo::is_indexable(ctx.collection, d, now))
        {
            let line = ndjson_line(ctx.collection, doc)?;
            batch.push_document(ctx.collection, doc, &line);
        }
    }
    Ok(batch)
}

/// A settled task: the bytes it held in flight, the documents Meilisearch
/// accepted (in `_id` order) and those it rejected.
struct Done {
    bytes: usize,
    accepted: Vec<BatchDoc>,
    rejected: Vec<Rejected>,
}

/// Waits for a batch's task; on a document error isolates the rejected
/// documents.
async fn settle(
    ctx: &Ctx<'_>,
    batch: Batch,
    bytes: usize,
    task: u64,
    sent: Instant,
) -> Result<Done, ReconcileError> {
    let outcome = ctx.meili.wait_for_task(task, ctx.guard).await?;
    crate::metrics::batch_latency(sent.elapsed());
    let (batch, verdicts) = match &outcome.error {
        None => {
            let verdicts = vec![None; batch.len()];
            (batch, verdicts)
        }
        Some(error) if rejects::is_document_error(&error.code) => {
            tracing::warn!(index = %ctx.uid, task, code = %error.code, docs = batch.len(),
                "a batch was refused; isolating the documents Meilisearch rejects");
            // The refused task indexed none of it; its NDJSON was dropped
            // when enqueued, so the batch is read again (the current
            // versions of the documents still to index) and bisected.
            let batch = reread(ctx, &batch).await?;
            let verdicts = rejects::isolate(ctx, &batch).await?;
            (batch, verdicts)
        }
        Some(_) => return Err(outcome.into_result("add documents").unwrap_err().into()),
    };
    let mut accepted = Vec::with_capacity(batch.len());
    let mut rejected = Vec::new();
    for (doc, verdict) in batch.docs.into_iter().zip(verdicts) {
        match verdict {
            None => accepted.push(doc),
            Some(error) => rejected.push(Rejected::new(&doc, error)),
        }
    }
    Ok(Done {
        bytes,
        accepted,
        rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn payload_slices_are_whole_lines_and_batches_remember_versions() {
        let mut b = Batch::new();
        for i in 0..3 {
            let d = doc! { "_id": i, "messageId": format!("m{i}"), "updatedAt": i * 10 };
            let line = ndjson_line(mongo::Collection::Messages, &d).unwrap();
            b.push_document(mongo::Collection::Messages, &d, &line);
        }
        assert_eq!(&*b.payload_of(1..2), b"{\"messageId\":\"m1\"}\n");
        assert_eq!(b.payload_of(0..3).len(), b.bytes());
        assert_eq!(b.docs[2].version().updated_at, Some(Bson::Int32(20)));
        assert_eq!(b.docs[2].meili_id().as_deref(), Some("m2"));
    }

    #[test]
    fn batch_documents_give_back_the_exact_values_read() {
        let oid = ObjectId::new();
        let at = mongodb::bson::DateTime::from_millis(1_700_000_000_123);
        let values = [
            Bson::ObjectId(oid),
            Bson::DateTime(at),
            Bson::Int32(7),
            Bson::Int64(7),
            Bson::String("7".into()),
            Bson::Null,
            Bson::Document(doc! { "a": 1 }),
        ];
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let meili_ids = [
            Some(uuid.to_string()),
            Some(uuid.to_uppercase()),
            Some(uuid.replace('-', "")),
            Some(format!("{{{uuid}}}")),
            Some(format!("urn:uuid:{uuid}")),
            Some("m".to_string()),
            Some(String::new()),
            None,
        ];
        for id in &values {
            for updated_at in values.iter().map(|v| Some(v.clone())).chain([None]) {
                for meili_id in &meili_ids {
                    let version = DocVersion {
                        id: id.clone(),
                        updated_at: updated_at.clone(),
                    };
                    let sent = BatchDoc::new(&version, meili_id.clone());
                    assert_eq!(sent.version(), version);
                    assert_eq!(sent.mongo_id(), *id);
                    assert_eq!(sent.meili_id(), *meili_id);
                    assert_eq!(sent.id_type(), id.element_type());
                }
            }
        }
    }

    #[test]
    fn librechats_documents_wait_in_flight_in_40_bytes_without_allocating() {
        let version = DocVersion {
            id: Bson::ObjectId(ObjectId::new()),
            updated_at: Some(Bson::DateTime(mongodb::bson::DateTime::now())),
        };
        let sent = BatchDoc::new(&version, Some(Uuid::new_v4().hyphenated().to_string()));
        assert!(matches!(sent, BatchDoc::Typical { .. }), "{sent:?}");
        let other = BatchDoc::new(&version, Some("not-a-uuid".into()));
        assert!(matches!(other, BatchDoc::Other(_)), "{other:?}");
        assert_eq!(std::mem::size_of::<BatchDoc>(), 40);
    }

    #[test]
    fn batches_are_cut_by_count_and_bytes() {
        let opts = super::super::SyncOptions {
            batch_docs: 2,
            batch_bytes: 30,
            ..Default::default()
        };
        let mut b = Batch::new();
        assert!(!b.is_full_for(1000, &opts), "an empty batch takes any line");
        b.push_document(mongo::Collection::Messages, &doc! { "_id": 1 }, &[b'x'; 20]);
        assert!(b.is_full_for(11, &opts));
        assert!(!b.is_full_for(10, &opts));
        b.push_document(mongo::Collection::Messages, &doc! { "_id": 2 }, b"y");
        assert!(b.is_full_for(1, &opts));
    }
}
