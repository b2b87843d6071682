//! The pipelined indexer (DESIGN.md §3.4): read unindexed documents page by
//! page (by `_id`, no long-lived cursor), shape and serialize them to NDJSON,
//! cut batches by count and bytes, keep up to `in_flight` Meilisearch tasks
//! outstanding while the next page is read, and acknowledge each batch by
//! its `_id` range once its task succeeded.
//!
//! The acknowledgement filter is the read's own filter plus "not changed since
//! the read" (`updatedAt ≤ server time of the read`), so a document edited in
//! between stays unindexed; the next pass re-reads and re-sends it, and
//! Meilisearch's task order leaves the latest version. Passes repeat until
//! one finds nothing to send (bounded). Memory is bounded by the batch
//! settings: one batch being built, one queued, `in_flight` awaiting tasks.
//!
//! The same pipeline feeds a forced reindex ([`Feed::Indexable`]): every
//! indexable document, into the index `ctx.uid` names, with no
//! acknowledgement (the flags describe the live index until the swap).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use mongodb::bson::{Bson, DateTime};
use tokio::sync::mpsc;

use super::rejects::{self, Rejected};
use super::{Ctx, ReconcileError};
use crate::mongo;

/// Passes over the unindexed documents in one run; later passes only find
/// documents edited while the earlier ones ran.
const MAX_PASSES: usize = 5;

/// Which documents a pass reads, and whether it acknowledges them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Feed {
    /// Unindexed documents, each batch acknowledged once its task succeeded.
    Unindexed,
    /// Every indexable document whatever its flag (only those changed at or
    /// after `changed_since`, when given), not acknowledged.
    Indexable { changed_since: Option<DateTime> },
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
    /// Documents Meilisearch confirmed.
    pub indexed: u64,
    pub rejected: Vec<Rejected>,
}

/// What indexing one collection did.
#[derive(Debug, Default)]
pub(crate) struct SyncOutcome {
    /// Documents Meilisearch confirmed.
    pub indexed: u64,
    pub rejected: Vec<Rejected>,
}

/// One document of a batch.
#[derive(Clone, Debug)]
pub(crate) struct BatchDoc {
    pub mongo_id: Bson,
    pub meili_id: Option<String>,
    /// Read right after the previous document of the batch, with no
    /// document left out in between: both can share an acknowledged range.
    pub follows_previous: bool,
}

/// Documents sent in one Meilisearch task, as NDJSON.
#[derive(Debug)]
pub(crate) struct Batch {
    /// MongoDB's clock just before the page was read.
    pub read_time: DateTime,
    pub docs: Vec<BatchDoc>,
    /// Start of each document's line in `payload`, plus the end.
    offsets: Vec<usize>,
    payload: Vec<u8>,
}

impl Batch {
    fn new(read_time: DateTime) -> Batch {
        Batch {
            read_time,
            docs: Vec::new(),
            offsets: vec![0],
            payload: Vec::new(),
        }
    }

    fn push(&mut self, doc: BatchDoc, line: &[u8]) {
        self.docs.push(doc);
        self.payload.extend_from_slice(line);
        self.offsets.push(self.payload.len());
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    fn bytes(&self) -> usize {
        self.payload.len()
    }

    /// The NDJSON of documents `range`.
    pub fn payload_of(&self, range: Range<usize>) -> Arc<[u8]> {
        Arc::from(&self.payload[self.offsets[range.start]..self.offsets[range.end]])
    }

    /// The `_id` ranges to acknowledge: maximal runs of accepted documents
    /// read one after the other (a rejected or skipped document breaks a run,
    /// so no range can cover it).
    pub fn accepted_runs(&self, accepted: &[bool]) -> Vec<(Bson, Bson)> {
        let mut runs = Vec::new();
        let mut start: Option<usize> = None;
        for (i, (doc, &ok)) in self.docs.iter().zip(accepted).enumerate() {
            let joins = start.is_some() && doc.follows_previous && ok;
            if !joins {
                if let Some(s) = start.take() {
                    runs.push((
                        self.docs[s].mongo_id.clone(),
                        self.docs[i - 1].mongo_id.clone(),
                    ));
                }
                if ok {
                    start = Some(i);
                }
            }
        }
        if let Some(s) = start {
            runs.push((
                self.docs[s].mongo_id.clone(),
                self.docs[self.len() - 1].mongo_id.clone(),
            ));
        }
        runs
    }
}

/// The key a document's `_id` has in skip sets (see [`Rejected`]).
pub(crate) fn id_key(id: &Bson) -> String {
    format!("{id:?}")
}

/// Indexes every unindexed indexable document of the collection, leaving
/// out the documents whose `_id` key is in `already_rejected` (refused
/// earlier in the same run, and reported there).
pub(crate) async fn index_unindexed(
    ctx: &Ctx<'_>,
    expected: u64,
    already_rejected: &HashSet<String>,
) -> Result<SyncOutcome, ReconcileError> {
    ctx.phase("index", expected);
    let mut outcome = SyncOutcome::default();
    let mut rejected_ids = already_rejected.clone();
    for pass in 1..=MAX_PASSES {
        let done = run_pass(ctx, Feed::Unindexed, &rejected_ids).await?;
        tracing::debug!(index = %ctx.uid, pass, sent = done.sent, indexed = done.indexed, "indexing pass done");
        outcome.indexed += done.indexed;
        for r in done.rejected {
            rejected_ids.insert(r.mongo_id_key.clone());
            outcome.rejected.push(r);
        }
        if done.sent == 0 {
            break;
        }
    }
    Ok(outcome)
}

/// One pass over the documents `feed` selects (leaving out `skip`), sent
/// into `ctx.uid`.
pub(crate) async fn run_pass(
    ctx: &Ctx<'_>,
    feed: Feed,
    skip: &HashSet<String>,
) -> Result<PassOutcome, ReconcileError> {
    let (tx, rx) = mpsc::channel::<Batch>(1);
    let (sent, (indexed, rejected)) = tokio::try_join!(
        read_batches(ctx, feed, tx, skip),
        send_batches(ctx, feed.acknowledges(), rx)
    )?;
    Ok(PassOutcome {
        sent,
        indexed,
        rejected,
    })
}

/// Reads pages of the documents `feed` selects and cuts them into batches.
async fn read_batches(
    ctx: &Ctx<'_>,
    feed: Feed,
    tx: mpsc::Sender<Batch>,
    skip: &HashSet<String>,
) -> Result<u64, ReconcileError> {
    let opts = ctx.opts;
    let page_size = opts.batch_docs.max(1);
    let mut after: Option<Bson> = None;
    let mut sent = 0u64;
    loop {
        let read_time = mongo::server_time(ctx.db).await?;
        let page = match feed {
            Feed::Unindexed => {
                mongo::read_unindexed_page(
                    ctx.db,
                    ctx.collection,
                    read_time,
                    after.as_ref(),
                    page_size,
                )
                .await?
            }
            Feed::Indexable { changed_since } => {
                mongo::read_indexable_page(
                    ctx.db,
                    ctx.collection,
                    read_time,
                    changed_since,
                    after.as_ref(),
                    page_size,
                )
                .await?
            }
        };
        let full_page = page.len() == page_size;
        after = page.last().and_then(|d| d.get("_id").cloned());
        let mut batch = Batch::new(read_time);
        let mut follows = false;
        for doc in &page {
            let mongo_id = doc.get("_id").cloned().unwrap_or(Bson::Null);
            if skip.contains(&id_key(&mongo_id)) {
                follows = false;
                continue;
            }
            let mut line = serde_json::to_vec(&mongo::to_meili(ctx.collection, doc))
                .map_err(|e| ReconcileError::Other(format!("serializing a document: {e}")))?;
            line.push(b'\n');
            if batch.len() > 0
                && (batch.len() >= opts.batch_docs || batch.bytes() + line.len() > opts.batch_bytes)
            {
                sent += batch.len() as u64;
                if tx
                    .send(std::mem::replace(&mut batch, Batch::new(read_time)))
                    .await
                    .is_err()
                {
                    return Ok(sent); // the sender stopped; its error is reported
                }
                follows = false;
            }
            let meili_id = mongo::meili_id(ctx.collection, doc);
            batch.push(
                BatchDoc {
                    mongo_id,
                    meili_id,
                    follows_previous: follows,
                },
                &line,
            );
            follows = true;
        }
        if batch.len() > 0 {
            sent += batch.len() as u64;
            if tx.send(batch).await.is_err() {
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

/// Sends batches, keeping at most `in_flight` tasks outstanding, and settles
/// each (wait, isolate rejects, acknowledge when `acknowledge`).
async fn send_batches(
    ctx: &Ctx<'_>,
    acknowledge: bool,
    mut rx: mpsc::Receiver<Batch>,
) -> Result<(u64, Vec<Rejected>), ReconcileError> {
    let in_flight = ctx.opts.in_flight.max(1);
    let mut pending = FuturesUnordered::new();
    let mut indexed = 0;
    let mut rejected = Vec::new();
    let mut open = true;
    while open || !pending.is_empty() {
        tokio::select! {
            Some(done) = pending.next(), if !pending.is_empty() => {
                let (n, mut r): (u64, Vec<Rejected>) = done?;
                indexed += n;
                rejected.append(&mut r);
            }
            batch = rx.recv(), if open && pending.len() < in_flight => match batch {
                Some(batch) => {
                    let sent = std::time::Instant::now();
                    let task = ctx
                        .meili
                        .add_documents_ndjson(&ctx.uid, batch.payload_of(0..batch.len()), ctx.guard)
                        .await?;
                    pending.push(settle(ctx, batch, task, sent, acknowledge));
                }
                None => open = false,
            },
        }
    }
    Ok((indexed, rejected))
}

/// Waits for a batch's task; on a document error isolates the rejected
/// documents; acknowledges the accepted ones by range when `acknowledge`.
async fn settle(
    ctx: &Ctx<'_>,
    batch: Batch,
    task: u64,
    sent: std::time::Instant,
    acknowledge: bool,
) -> Result<(u64, Vec<Rejected>), ReconcileError> {
    let outcome = ctx.meili.wait_for_task(task, ctx.guard).await?;
    crate::metrics::batch_latency(sent.elapsed());
    let verdicts = match &outcome.error {
        None => vec![None; batch.len()],
        Some(error) if rejects::is_document_error(&error.code) => {
            tracing::warn!(index = %ctx.uid, task, code = %error.code, docs = batch.len(),
                "a batch was refused; isolating the documents Meilisearch rejects");
            rejects::isolate(ctx, &batch, error.clone()).await?
        }
        Some(_) => return Err(outcome.into_result("add documents").unwrap_err().into()),
    };
    let accepted: Vec<bool> = verdicts.iter().map(Option::is_none).collect();
    let runs = if acknowledge {
        batch.accepted_runs(&accepted)
    } else {
        Vec::new()
    };
    for (first, last) in runs {
        mongo::ack_range(
            ctx.db,
            ctx.collection,
            batch.read_time,
            &first,
            &last,
            ctx.guard,
        )
        .await?;
    }
    let confirmed = accepted.iter().filter(|a| **a).count() as u64;
    ctx.advance(confirmed);
    let rejected = batch
        .docs
        .iter()
        .zip(verdicts)
        .filter_map(|(doc, verdict)| verdict.map(|e| Rejected::new(doc, e)))
        .collect();
    Ok((confirmed, rejected))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(follows: &[bool]) -> Batch {
        let mut b = Batch::new(DateTime::from_millis(0));
        for (i, f) in follows.iter().enumerate() {
            b.push(
                BatchDoc {
                    mongo_id: Bson::Int32(i as i32),
                    meili_id: Some(format!("m{i}")),
                    follows_previous: *f,
                },
                format!("{{\"messageId\":\"m{i}\"}}\n").as_bytes(),
            );
        }
        b
    }

    #[test]
    fn runs_exclude_rejected_and_skipped_documents() {
        let b = batch(&[false, true, true, true, false, true]);
        assert_eq!(
            b.accepted_runs(&[true; 6]),
            vec![
                (Bson::Int32(0), Bson::Int32(3)),
                (Bson::Int32(4), Bson::Int32(5))
            ]
        );
        assert_eq!(
            b.accepted_runs(&[true, false, true, true, true, false]),
            vec![
                (Bson::Int32(0), Bson::Int32(0)),
                (Bson::Int32(2), Bson::Int32(3)),
                (Bson::Int32(4), Bson::Int32(4))
            ]
        );
        assert!(b.accepted_runs(&[false; 6]).is_empty());
    }

    #[test]
    fn payload_slices_are_whole_lines() {
        let b = batch(&[false, true, true]);
        assert_eq!(&*b.payload_of(1..2), b"{\"messageId\":\"m1\"}\n");
        assert_eq!(b.payload_of(0..3).len(), b.bytes());
    }
}
