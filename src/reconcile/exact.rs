//! The exact comparison (docs/design.md, "Exact comparison and `verify`"):
//! every Meilisearch document of an index against the projection of its
//! MongoDB document, by a 64-bit digest of a canonical form on each
//! side — what `verify` reports, what `verify --repair`, `once --deep`, a
//! reindex's flag step and the recovery of an interrupted reindex repair.
//!
//! Three streaming passes; only compact per-id digests of ONE side are kept:
//! 1. Meilisearch, page by page (the fields we send): a sorted
//!    `Vec<(id hash, digest)>`, 16 bytes per document, plus a seen-bitmap
//!    (one bit per document);
//! 2. MongoDB, every indexable document by `_id` pages with the sync's
//!    projection: found with an equal digest → *matching*; found with
//!    another digest → *stale*; not found → *missing*;
//! 3. Meilisearch ids again: those never seen in pass 2 → *unexpected*
//!    (gone or no longer indexable in MongoDB). Documents added to the index
//!    since pass 1 are not in the vector and are left alone.
//!
//! When more documents are expected than `sync.compare_memory / 17`
//! (3.9 million at the default), the ids are split by hash into partitions
//! ([`Partitions`]) and the three passes run per partition, each keeping only
//! its partition's digests: memory is bounded by the setting, not by the
//! index.
//!
//! Before pass 1 it waits for the tasks already enqueued on the index (and
//! any pending index swap), so what it reads is settled.
//!
//! Repairing, it sets the flag of every matching unflagged document
//! version-exactly (the `updatedAt` read in pass 2, as an acknowledgement
//! does), clears the flag of every flagged missing or stale document and
//! sends it (acknowledged version-exactly once its task succeeded — the flag
//! is cleared first, so a crash in between leaves it to ordinary indexing),
//! deletes the unexpected documents, and clears the flags of documents that
//! are not indexable.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use mongodb::bson::{Bson, DateTime, Document};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::ack::{self, Tally};
use super::batch::{ndjson_line, Batch, BatchDoc};
use super::ctx::Ctx;
use super::error::ReconcileError;
use super::orphans::{id_hash, IdPages, Partitions, Seen};
use super::send::send_batches;
use crate::librechat::markers;
use crate::librechat::searchable::{self, Retention};
use crate::meili;
use crate::mongo::{self, id_key};

/// Documents per page read from Meilisearch (whole documents, so fewer than
/// the id pages of pass 3).
const MEILI_PAGE: u64 = 1_000;
/// Example ids kept per kind of difference.
const EXAMPLES: usize = 5;

/// One kind of difference: how many, how many of those MongoDB flags as
/// indexed (for missing and stale documents), and a few ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) flagged: Option<u64>,
    /// Up to five Meilisearch ids (for a MongoDB document without one, its `_id`).
    pub(crate) examples: Vec<String>,
}

impl Difference {
    fn flaggable() -> Difference {
        Difference {
            flagged: Some(0),
            ..Difference::default()
        }
    }

    fn note(&mut self, id: &str, flagged: bool) {
        self.count += 1;
        if let Some(n) = self.flagged.as_mut().filter(|_| flagged) {
            *n += 1;
        }
        if self.examples.len() < EXAMPLES {
            self.examples.push(id.to_string());
        }
    }
}

/// What comparing one index with its collection found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Documents in the index when it was read.
    pub meili_documents: u64,
    /// Indexable documents in MongoDB.
    pub mongo_indexable: u64,
    /// Indexable documents Meilisearch holds exactly.
    pub matching: u64,
    /// Indexable in MongoDB, absent from Meilisearch.
    pub missing: Difference,
    /// In Meilisearch, gone or not indexable in MongoDB.
    pub unexpected: Difference,
    /// In both, but Meilisearch holds another version.
    pub stale: Difference,
    /// Hash partitions the comparison ran in: above 1 when
    /// `sync.compare_memory` could not hold every document's digest, and each
    /// side was read once per partition.
    pub partitions: u64,
}

impl Comparison {
    /// No difference at all.
    pub(crate) fn is_exact(&self) -> bool {
        self.missing.count + self.unexpected.count + self.stale.count == 0
    }
}

/// Compares `ctx.uid` with `ctx.collection` (see the module documentation),
/// repairing when given `repair`: the `_id` keys of documents it must not
/// send (refused by Meilisearch earlier in the run).
/// Returns what it found and, repairing, what it did: missing and stale
/// documents Meilisearch confirmed (`indexed`), unexpected ones deleted
/// (and those that went away while their repair was in flight), flags set
/// on documents Meilisearch holds exactly, and flags cleared.
pub(crate) async fn compare(
    ctx: &Ctx<'_>,
    repair: Option<&HashSet<String>>,
) -> Result<(Comparison, Tally), ReconcileError> {
    wait_for_pending_tasks(ctx).await?;
    let mut comparison = Comparison {
        missing: Difference::flaggable(),
        stale: Difference::flaggable(),
        ..Comparison::default()
    };
    let mut repairs = Tally::default();

    // `None`: no index yet (nothing to read from Meilisearch).
    let in_meili = match ctx.meili.index(&ctx.uid).await? {
        Some(_) => Some(ctx.meili.document_count(&ctx.uid).await?),
        None => None,
    };
    let partitions =
        Partitions::for_comparison(ctx, in_meili.unwrap_or(0), BYTES_PER_DOCUMENT).await?;
    comparison.partitions = partitions.0;
    let mut now = mongo::server_time(ctx.db).await?;
    let counts = mongo::counts(ctx.db, &ctx.opts.rules, ctx.collection, now).await?;
    for index in 0..partitions.0 {
        let part = Part { partitions, index };
        let mut meili = match in_meili {
            Some(total) => read_meili_digests(ctx, part, total).await?,
            None => Digests::new(Vec::new()),
        };
        comparison.meili_documents += meili.len() as u64;

        now = mongo::server_time(ctx.db).await?;
        ctx.phase("compare: read mongodb", counts.indexable);
        repairs.add(compare_part(ctx, now, part, &mut meili, &mut comparison, repair).await?);

        let unexpected = name_unexpected(ctx, &meili, &mut comparison).await?;
        if repair.is_some() {
            repairs.deleted += ctx.delete_documents(&unexpected).await?;
        }
    }
    if repair.is_some() {
        let (db, rules, guard) = (ctx.db, &ctx.opts.rules, ctx.guard);
        repairs.flags_cleared +=
            mongo::clear_flags_of_unindexable(db, rules, ctx.collection, now, guard).await?;
    }
    tracing::info!(index = %ctx.uid, meili_documents = comparison.meili_documents,
        mongo_indexable = comparison.mongo_indexable, matching = comparison.matching,
        missing = comparison.missing.count, unexpected = comparison.unexpected.count,
        stale = comparison.stale.count, "exact comparison");
    Ok((comparison, repairs))
}

/// Pass 2 over one partition; repairing (`repair`: the `_id` keys not to
/// send), what is missing or stale is sent (and acknowledged) beside the
/// comparison, and flags are set or cleared to match what Meilisearch
/// holds. Returns what the repairs did.
async fn compare_part(
    ctx: &Ctx<'_>,
    now: DateTime,
    part: Part,
    meili: &mut Digests,
    comparison: &mut Comparison,
    repair: Option<&HashSet<String>>,
) -> Result<Tally, ReconcileError> {
    // Not repairing (`verify`), no sender is started: nothing may be written.
    let Some(skip) = repair else {
        return compare_mongo(ctx, now, part, meili, comparison, None).await;
    };
    let (tx, rx) = mpsc::channel::<Batch>(1);
    let repair = Some(Repair {
        skip,
        tx,
        to_clear: Vec::new(),
        to_flag: Vec::new(),
        batch: Batch::default(),
        done: Tally::default(),
    });
    let comparing = compare_mongo(ctx, now, part, meili, comparison, repair);
    let (mut done, settled) = tokio::try_join!(comparing, send_batches(ctx, true, rx, None))?;
    done.add(settled);
    Ok(done)
}

/// Compares one MongoDB document (of a page of searchable ones at `now`)
/// with what Meilisearch holds, when it falls in `part`: counted in
/// `comparison`; with `repair`, a match not yet flagged is flagged and a
/// missing or stale one is sent. `false`: the sender stopped (its error is
/// reported).
async fn compare_document(
    ctx: &Ctx<'_>,
    now: DateTime,
    part: Part,
    doc: &Document,
    meili: &mut Digests,
    comparison: &mut Comparison,
    repair: &mut Option<Repair<'_>>,
) -> Result<bool, ReconcileError> {
    let rules = &ctx.opts.rules;
    let meili_id = mongo::meili_id(ctx.collection, doc);
    // The page is the searchable documents at `now` (the same rule).
    let Some(branch) = searchable::searchable_branch(rules, ctx.collection, doc, now) else {
        return Ok(true);
    };
    if !part.holds(meili_id.as_deref()) {
        return Ok(true);
    }
    comparison.mongo_indexable += 1;
    // Marked indexed at the current schema version; a flagged one of
    // another version is pending work too (it is sent again).
    let processed = markers::is_processed(rules, doc);
    let found = meili_id.as_deref().and_then(|id| meili.find(id_hash(id)));
    let same = found.is_some_and(|(_, d)| d == digest(&mongo::to_meili(ctx.collection, doc)));
    if let Some((i, _)) = found {
        meili.mark_seen(i);
    }
    let shown = || {
        meili_id.clone().unwrap_or_else(|| {
            let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
            format!("_id {}", id.into_relaxed_extjson())
        })
    };
    match (found, same) {
        (Some(_), true) => {
            comparison.matching += 1;
            if let Some(r) = repair.as_mut().filter(|_| !processed) {
                let version = mongo::DocVersion::of(doc);
                r.to_flag.push(BatchDoc::new(&version, branch, meili_id));
                if r.to_flag.len() >= mongo::STATEMENTS_PER_COMMAND {
                    r.flag(ctx).await?;
                }
            }
            return Ok(true);
        }
        (Some(_), false) => comparison.stale.note(&shown(), processed),
        (None, _) => comparison.missing.note(&shown(), processed),
    }
    match repair.as_mut() {
        Some(r) => r.resend(ctx, doc, branch, markers::is_flagged(doc)).await,
        None => Ok(true),
    }
}

/// Bytes one Meilisearch document takes in [`Digests`] (two hashes and a
/// bit, rounded up).
const BYTES_PER_DOCUMENT: usize = 17;

/// The partition a comparison pass covers.
#[derive(Clone, Copy, Debug)]
struct Part {
    partitions: Partitions,
    index: u64,
}

impl Part {
    /// Whether the document with Meilisearch id `id` belongs to this
    /// partition; a MongoDB document without one is handled with the first.
    fn holds(self, id: Option<&str>) -> bool {
        id.map_or(0, |id| self.partitions.of(id_hash(id))) == self.index
    }
}

/// Waits for the tasks already enqueued on the index and for pending index
/// swaps (e.g. left by a process that died), so the index is read settled.
async fn wait_for_pending_tasks(ctx: &Ctx<'_>) -> Result<(), ReconcileError> {
    let index = &ctx.uid;
    let queries = [
        format!("statuses=enqueued,processing&indexUids={index}&limit=1000"),
        "statuses=enqueued,processing&types=indexSwap&limit=1000".to_string(),
    ];
    for query in queries {
        let answer = ctx.meili.tasks(&query).await?;
        let tasks = answer["results"].as_array().into_iter().flatten();
        for uid in tasks.filter_map(|t| t["uid"].as_u64()) {
            ctx.meili.wait_for_task(uid, ctx.guard).await?;
        }
    }
    Ok(())
}

/// Pass 1: the sorted `(id hash, digest)` of every Meilisearch document of
/// the partition (`total` documents in the index).
async fn read_meili_digests(
    ctx: &Ctx<'_>,
    part: Part,
    total: u64,
) -> Result<Digests, ReconcileError> {
    let pk = ctx.collection.primary_key();
    let fields: Vec<&str> = ctx.collection.fields().collect();
    let (meili, uid) = (ctx.meili, &ctx.uid);
    ctx.phase("compare: read meilisearch", total);
    let mut entries = Vec::with_capacity((total / part.partitions.0) as usize);
    let mut offset = 0;
    loop {
        let page = meili
            .documents_with_fields(uid, &fields, offset, MEILI_PAGE)
            .await?;
        if page.is_empty() {
            break;
        }
        offset += page.len() as u64;
        ctx.advance(page.len() as u64);
        let ids = page
            .iter()
            .filter_map(|doc| Some((meili::id_string(&doc[pk])?, doc)));
        for (id, doc) in ids.filter(|(id, _)| part.holds(Some(id))) {
            entries.push((id_hash(&id), digest(&meili_shape(ctx.collection, doc))));
        }
    }
    Ok(Digests::new(entries))
}

/// The state of a repairing pass 2.
struct Repair<'s> {
    skip: &'s HashSet<String>,
    tx: mpsc::Sender<Batch>,
    /// Flagged documents to send: their flags are cleared before the batch goes.
    to_clear: Vec<Bson>,
    /// Matching unflagged documents to flag.
    to_flag: Vec<BatchDoc>,
    batch: Batch,
    /// What it did itself (the sender reports the rest).
    done: Tally,
}

impl Repair<'_> {
    /// Sets the flags of the matching documents collected so far.
    async fn flag(&mut self, ctx: &Ctx<'_>) -> Result<(), ReconcileError> {
        self.done.add(ack::acknowledge(ctx, &self.to_flag).await?);
        self.to_flag.clear();
        Ok(())
    }

    /// Clears the flags collected so far, then hands the batch to the sender.
    /// `false`: the sender stopped (its error is reported).
    async fn send(&mut self, ctx: &Ctx<'_>) -> Result<bool, ReconcileError> {
        self.done.flags_cleared +=
            mongo::clear_flags(ctx.db, ctx.collection, &self.to_clear, ctx.guard).await?;
        self.to_clear.clear();
        if self.batch.is_empty() {
            return Ok(true);
        }
        let batch = std::mem::take(&mut self.batch);
        Ok(self.tx.send(batch).await.is_ok())
    }

    /// A missing or stale document: cleared if flagged, sent unless skipped.
    async fn resend(
        &mut self,
        ctx: &Ctx<'_>,
        doc: &Document,
        branch: Retention,
        flagged: bool,
    ) -> Result<bool, ReconcileError> {
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        let skipped = self.skip.contains(&id_key(&id));
        if flagged {
            self.to_clear.push(id);
        }
        if skipped {
            return Ok(true);
        }
        let line = ndjson_line(ctx.collection, doc)?;
        if self.batch.is_full_for(line.len(), ctx.opts) && !self.send(ctx).await? {
            return Ok(false);
        }
        self.batch.push_document(ctx.collection, doc, branch, &line);
        Ok(true)
    }
}

/// Pass 2: every indexable MongoDB document against the digests; repairs
/// as it goes when given a [`Repair`], which it drops at the end (closing
/// the sender's channel).
async fn compare_mongo(
    ctx: &Ctx<'_>,
    now: DateTime,
    part: Part,
    meili: &mut Digests,
    comparison: &mut Comparison,
    mut repair: Option<Repair<'_>>,
) -> Result<Tally, ReconcileError> {
    let page_size = ctx.opts.batch_docs.max(1);
    let mut after: Option<Bson> = None;
    loop {
        let page = ctx.read_page(None, now, after.as_ref()).await?;
        let full = page.len() == page_size;
        after = page.last().and_then(mongo::raw_id);
        for raw in &page {
            let doc = &mongo::parse(raw)?;
            if !compare_document(ctx, now, part, doc, meili, comparison, &mut repair).await? {
                return Ok(Tally::default());
            }
        }
        ctx.advance(page.len() as u64);
        if !full {
            break;
        }
    }
    let Some(mut r) = repair else {
        return Ok(Tally::default());
    };
    r.flag(ctx).await?;
    r.send(ctx).await?;
    Ok(r.done)
}

/// Pass 3: names the Meilisearch documents pass 2 never saw.
async fn name_unexpected(
    ctx: &Ctx<'_>,
    meili: &Digests,
    comparison: &mut Comparison,
) -> Result<Vec<String>, ReconcileError> {
    let unseen = meili.unseen();
    if unseen == 0 {
        return Ok(Vec::new());
    }
    ctx.phase("compare: name unexpected", comparison.meili_documents);
    let mut unexpected = Vec::new();
    let mut pages = IdPages::default();
    while (unexpected.len() as u64) < unseen {
        let Some(ids) = pages.next(ctx).await? else {
            break;
        };
        ctx.advance(ids.len() as u64);
        for id in ids.into_iter().filter(|id| meili.is_unseen(id_hash(id))) {
            comparison.unexpected.note(&id, false);
            unexpected.push(id);
        }
    }
    Ok(unexpected)
}

/// The Meilisearch side, compactly: sorted `(id hash, digest)` pairs (16
/// bytes per document) and one seen-bit per document.
type Digests = Seen<u64>;

/// A Meilisearch document restricted to the fields we send.
fn meili_shape(collection: mongo::Collection, doc: &Value) -> Map<String, Value> {
    collection
        .fields()
        .filter_map(|f| doc.get(f).map(|v| (f.to_string(), v.clone())))
        .collect()
}

/// A 64-bit digest of a document in canonical form: serde_json hashes an
/// object's entries in sorted key order and every value tagged with its JSON
/// type, so equal documents have equal digests whatever order their fields
/// came in.
pub(crate) fn digest(doc: &Map<String, Value>) -> u64 {
    let mut hasher = DefaultHasher::new();
    doc.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn digests_ignore_field_order_and_see_every_value() {
        let a = map(json!({"messageId": "m1", "user": "u", "text": "hi", "tags": ["a", "b"]}));
        let b = map(json!({"tags": ["a", "b"], "text": "hi", "user": "u", "messageId": "m1"}));
        assert_eq!(digest(&a), digest(&b));
        for other in [
            json!({"messageId": "m1", "user": "u", "text": "hi!", "tags": ["a", "b"]}),
            json!({"messageId": "m1", "user": "u", "text": "hi", "tags": ["b", "a"]}),
            json!({"messageId": "m1", "user": "u", "tags": ["a", "b"]}),
            json!({"messageId": "m1", "user": "u", "text": null, "tags": ["a", "b"]}),
            json!({"messageId": "m1", "user": "u", "text": "hi", "tags": ["ab"]}),
            json!({"messageId": 1, "user": "u", "text": "hi", "tags": ["a", "b"]}),
        ] {
            assert_ne!(digest(&a), digest(&map(other.clone())), "{other}");
        }
    }

    #[test]
    fn the_meilisearch_side_keeps_only_the_fields_we_send() {
        let doc = json!({"messageId": "m1", "user": "u", "_vectors": {}, "extra": 1});
        assert_eq!(
            Value::Object(meili_shape(mongo::Collection::Messages, &doc)),
            json!({"messageId": "m1", "user": "u"})
        );
    }

    #[test]
    fn digests_find_ids_and_count_the_unseen() {
        let mut d = Digests::new(vec![
            (id_hash("b"), 2),
            (id_hash("a"), 1),
            (id_hash("c"), 3),
        ]);
        assert_eq!(d.len(), 3);
        let (i, digest) = d.find(id_hash("a")).unwrap();
        assert_eq!(digest, 1);
        assert!(d.find(id_hash("z")).is_none());
        assert_eq!(d.unseen(), 3);
        d.mark_seen(i);
        assert!(!d.is_unseen(id_hash("a")) && d.is_unseen(id_hash("b")));
        assert_eq!(d.unseen(), 2);
    }

    #[test]
    fn differences_count_flags_and_keep_a_few_examples() {
        let mut diff = Difference::flaggable();
        for i in 0..8 {
            diff.note(&format!("m{i}"), i % 2 == 0);
        }
        assert_eq!(diff.count, 8);
        assert_eq!(diff.flagged, Some(4));
        assert_eq!(diff.examples.len(), EXAMPLES);
    }
}
