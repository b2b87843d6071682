//! Version-exact acknowledgement and in-flight changes (docs/design.md,
//! "Version-exact acknowledgement" and "Documents changed while in flight").
//!
//! After a batch's task succeeded, each accepted document is marked indexed
//! (LibreChat's markers) by one update statement that matches its `_id`,
//! the exact `updatedAt` value and LibreChat version token that were read
//! and sent, and the conditions of the retention branch it was read in at
//! MongoDB's current time ([`mongo::set_flags_if_unchanged`]). Nothing is
//! compared with any clock: a statement matches only the version that
//! Meilisearch now holds, so application clocks cannot make it flag another.
//!
//! The reply says how many statements matched. When a chunk's statements did
//! not all match, its documents are read back — by `_id` range when they
//! came from a pass in `_id` order, by `_id` list when they are scattered
//! (follow mode; `Ctx::read_back`) — and each sent document is classified:
//! - gone, or no longer searchable → deleted from Meilisearch (by its
//!   Meilisearch id, the task awaited) and, if still there, marked removed
//!   (LibreChat's cleanup markers, for the version read back): the version
//!   we just added must not stay searchable;
//! - another version → its flag cleared (whatever set it: LibreChat's own
//!   save hook may have indexed the newer version and set the flag before
//!   our older batch landed on top of it), so indexing sends it again;
//! - same version, searchable but not marked (it moved to another branch
//!   of the retention filter without a new version) → sent again, like a
//!   changed one;
//! - same version, marked → it matched; nothing to do.
//!
//! What an acknowledgement did is a [`Tally`], as is what every step built
//! on it did (the sender, an indexing pass, a repairing comparison): one
//! set of counters, added up into a collection's summary.

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};
use mongodb::bson::{Bson, DateTime, Document};

use super::batch::BatchDoc;
use super::ctx::Ctx;
use super::error::ReconcileError;
use super::rejects::Rejected;
use crate::librechat::{markers, searchable, Rules};
use crate::mongo::{self, id_key, DocVersion};

/// What sending and acknowledging documents did: what an acknowledgement,
/// a sender, an indexing pass or a repairing comparison did, added up into
/// a collection's summary.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Documents Meilisearch confirmed.
    pub(crate) indexed: u64,
    /// Documents deleted from Meilisearch: deleted or made unindexable in
    /// MongoDB while their batch was in flight (or, comparing, unexpected).
    pub(crate) deleted: u64,
    /// Flags set (or found set) for the exact version sent; a summary
    /// counts only those the exact comparison set on documents the index
    /// already held.
    pub(crate) flags_set: u64,
    /// Flags cleared: the document changed (or became unindexable) while in flight.
    pub(crate) flags_cleared: u64,
    pub(crate) rejected: Vec<Rejected>,
    /// The `_id`s of the documents that changed while in flight (still
    /// indexable, another version): to be sent again.
    pub(crate) changed: Vec<Bson>,
    /// More changed documents than are worth keeping `_id`s of (see
    /// `send::max_changed_ids`): some are not in `changed`.
    pub(crate) changed_overflowed: bool,
}

impl Tally {
    /// Adds what `other` did.
    pub(crate) fn add(&mut self, other: Tally) {
        self.indexed += other.indexed;
        self.deleted += other.deleted;
        self.flags_set += other.flags_set;
        self.flags_cleared += other.flags_cleared;
        self.rejected.extend(other.rejected);
        self.changed.extend(other.changed);
        self.changed_overflowed |= other.changed_overflowed;
    }
}

/// Flags `docs` (sent and accepted by Meilisearch, in ascending `_id`
/// order) version-exactly, and handles those that changed in between: one
/// command per chunk of at most [`mongo::STATEMENTS_PER_COMMAND`]
/// documents, up to `sync.ack_writers` of them side by side. The chunks hold other
/// documents, so their statements, read-backs and repairs never meet; on a
/// server that works in parallel each runs on a core of its own.
pub(crate) async fn acknowledge(ctx: &Ctx<'_>, docs: &[BatchDoc]) -> Result<Tally, ReconcileError> {
    // The futures are made first: a stream that maps by a closure over
    // borrowed chunks is not `Send` for every lifetime (rust#102211).
    let writers = ctx.opts.ack_writers.max(1);
    let commands: Vec<_> = docs
        .chunks(statements_per_command(docs.len(), writers))
        .map(|chunk| acknowledge_chunk(ctx, chunk))
        .collect();
    let mut chunks = futures::stream::iter(commands).buffer_unordered(writers);
    let mut acked = Tally::default();
    while let Some(chunk) = chunks.try_next().await? {
        acked.add(chunk);
    }
    super::test_hook::pause_after("acknowledged").await;
    Ok(acked)
}

/// How many statements each of [`acknowledge`]'s commands carries for
/// `docs` documents and `writers` writers: at most
/// [`mongo::STATEMENTS_PER_COMMAND`], in a number of commands that is a
/// multiple of `writers`, as even as can be. The writers then take the
/// commands in rounds that keep every one of them busy to the end — cut into
/// full commands and a remainder, the remainder would be written by one
/// writer alone while the others wait (e.g. 8 × 1,000 + 644 statements:
/// the 644 written alone). A batch smaller than the
/// writers' commands is split between them too (an incremental run's, a
/// micro-batch of follow mode) — unless it holds fewer than
/// [`ONE_COMMAND_BELOW`] documents: each part costs a clock read and a
/// command of its own, more than so few statements gain from a second
/// writer (and a server that answers one request at a time runs them one
/// after the other, while follow mode enqueues nothing new meanwhile).
fn statements_per_command(docs: usize, writers: usize) -> usize {
    if docs < ONE_COMMAND_BELOW {
        return docs.max(1);
    }
    let commands = docs.div_ceil(mongo::STATEMENTS_PER_COMMAND).max(1);
    docs.div_ceil(commands.next_multiple_of(writers.max(1)))
        .max(1)
}

/// Below this many documents an acknowledgement is one command.
const ONE_COMMAND_BELOW: usize = 100;

/// One command's worth of [`acknowledge`].
async fn acknowledge_chunk(ctx: &Ctx<'_>, chunk: &[BatchDoc]) -> Result<Tally, ReconcileError> {
    let started = std::time::Instant::now();
    let now = mongo::server_time(ctx.db).await?;
    let versions: Vec<_> = chunk.iter().map(|d| (d.version(), d.branch())).collect();
    let (db, rules, guard) = (ctx.db, &ctx.opts.rules, ctx.guard);
    let updated =
        mongo::set_flags_if_unchanged(db, rules, ctx.collection, &versions, now, guard).await?;
    tracing::debug!(index = %ctx.uid, docs = chunk.len(), matched = updated.matched,
        ms = started.elapsed().as_millis() as u64, "acknowledged");
    let mut acked = if updated.matched < chunk.len() as u64 {
        handle_changed(ctx, chunk, now).await?
    } else {
        Tally::default()
    };
    acked.flags_set = updated.matched;
    Ok(acked)
}

/// How a sent document stands when read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Gone,
    Unindexable,
    Changed,
    Unchanged,
}

fn fate(
    rules: &Rules,
    collection: mongo::Collection,
    sent: &BatchDoc,
    now_state: Option<&Document>,
    now: DateTime,
) -> Fate {
    match now_state {
        None => Fate::Gone,
        Some(state) if !searchable::is_searchable(rules, collection, state, now) => {
            Fate::Unindexable
        }
        Some(state) if DocVersion::of(state) != sent.version() => Fate::Changed,
        // The statement did not match this version: its retention branch
        // moved without a new version. Sent again, it is marked in its own.
        Some(state) if !markers::is_processed(rules, state) => Fate::Changed,
        Some(_) => Fate::Unchanged,
    }
}

/// Reads back a chunk whose statements did not all match and repairs what
/// changed while it was in flight (see the module documentation).
async fn handle_changed(
    ctx: &Ctx<'_>,
    chunk: &[BatchDoc],
    now: DateTime,
) -> Result<Tally, ReconcileError> {
    let rules = &ctx.opts.rules;
    let mut states: HashMap<String, Document> = HashMap::new();
    for run in same_type_runs(chunk) {
        let ids: Vec<Bson> = run.iter().map(|d| d.mongo_id()).collect();
        let found = mongo::read_states(ctx.db, rules, ctx.collection, &ids, ctx.read_back).await?;
        let key = |s: &Document| id_key(s.get("_id").unwrap_or(&Bson::Null));
        states.extend(found.into_iter().map(|s| (key(&s), s)));
    }
    let (mut to_delete, mut to_mark_removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    let mut gone = 0;
    for doc in chunk {
        let state = states.get(&id_key(&doc.mongo_id()));
        match fate(rules, ctx.collection, doc, state, now) {
            Fate::Gone => gone += 1,
            Fate::Unindexable => to_mark_removed.extend(state.map(DocVersion::of)),
            Fate::Changed => {
                changed.push(doc.mongo_id());
                continue;
            }
            Fate::Unchanged => continue,
        }
        to_delete.extend(doc.meili_id());
    }
    tracing::info!(index = %ctx.uid, deleted = gone, unindexable = to_mark_removed.len(),
        changed = changed.len(),
        "documents changed while their batch was in flight: removing what must not be searchable, re-sending what changed");
    let deleted = ctx.delete_documents(&to_delete).await?;
    let flags_cleared = mongo::clear_flags(ctx.db, ctx.collection, &changed, ctx.guard).await?
        + mongo::mark_removed(ctx.db, ctx.collection, &to_mark_removed, ctx.guard).await?;
    Ok(Tally {
        deleted,
        flags_cleared,
        changed,
        ..Tally::default()
    })
}

/// Consecutive documents whose `_id`s have the same BSON type: a range query
/// only matches values of the bound's type, so each run is read back by its
/// own range.
pub(crate) fn same_type_runs(chunk: &[BatchDoc]) -> impl Iterator<Item = &[BatchDoc]> {
    let id_type = |d: &BatchDoc| d.mongo_id().element_type();
    chunk.chunk_by(move |a, b| id_type(a) == id_type(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    fn sent(id: Bson, updated_at: Option<Bson>) -> BatchDoc {
        sent_with_token(id, updated_at, None)
    }

    fn sent_with_token(id: Bson, updated_at: Option<Bson>, token: Option<Bson>) -> BatchDoc {
        let version = DocVersion {
            id,
            updated_at,
            token,
        };
        BatchDoc::new(&version, searchable::Retention::Legacy, Some("m".into()))
    }

    #[test]
    fn commands_are_even_and_keep_every_writer_busy_to_the_end() {
        let most = mongo::STATEMENTS_PER_COMMAND;
        for writers in 1..=8 {
            for docs in (1..=9 * most)
                .step_by(37)
                .chain([1, most, 8_644, 9 * most + 1])
            {
                let per = statements_per_command(docs, writers);
                assert!(
                    (1..=most).contains(&per),
                    "{docs} docs, {writers} writers: {per}"
                );
                let sizes: Vec<usize> = (0..docs)
                    .collect::<Vec<_>>()
                    .chunks(per)
                    .map(<[usize]>::len)
                    .collect();
                if docs >= writers * most {
                    // Whole rounds, every writer busy in each, and no
                    // command much shorter than the others.
                    assert_eq!(
                        sizes.len() % writers,
                        0,
                        "{docs} docs, {writers} writers: {sizes:?}"
                    );
                    let shortest = sizes.iter().min().copied().unwrap_or(0);
                    assert!(
                        per - shortest <= sizes.len(),
                        "{docs} docs, {writers} writers: {sizes:?}"
                    );
                } else if docs < ONE_COMMAND_BELOW {
                    // Too few to gain from a second writer: one command.
                    assert_eq!(sizes.len(), 1, "{docs} docs, {writers} writers");
                } else {
                    // Less than a full command each: split between them.
                    assert!(
                        sizes.len() <= writers,
                        "{docs} docs, {writers} writers: {sizes:?}"
                    );
                    assert_eq!(per, docs.div_ceil(writers));
                }
            }
        }
        // The case that prompted it: a 1% backlog of 1M, two writers.
        assert_eq!(statements_per_command(8_644, 2), 865);
        assert_eq!(statements_per_command(2_000, 2), 1_000);
        assert_eq!(statements_per_command(500, 2), 250);
        assert_eq!(statements_per_command(99, 2), 99);
        assert_eq!(statements_per_command(100, 2), 50);
        assert_eq!(statements_per_command(0, 2), 1);
    }

    #[test]
    fn read_back_documents_are_classified_by_version_and_searchability() {
        let rules = Rules::default();
        let now = DateTime::from_millis(1_000);
        let at = Bson::DateTime(DateTime::from_millis(500));
        let later = Bson::DateTime(DateTime::from_millis(400)); // an app clock behind
        let m = mongo::Collection::Messages;
        let fate = |sent: &BatchDoc, state: Option<&Document>| fate(&rules, m, sent, state, now);
        let marked = |mut d: Document| {
            d.insert("_meiliIndex", true);
            d.insert("_meiliIndexSchemaVersion", 1);
            d
        };
        let doc_sent = sent(Bson::Int32(1), Some(at.clone()));
        assert_eq!(fate(&doc_sent, None), Fate::Gone);
        let same = marked(doc! { "_id": 1, "updatedAt": at.clone(), "user": "u" });
        assert_eq!(fate(&doc_sent, Some(&same)), Fate::Unchanged);
        let unmarked =
            doc! { "_id": 1, "updatedAt": at.clone(), "user": "u", "isTemporary": false };
        assert_eq!(
            fate(&doc_sent, Some(&unmarked)),
            Fate::Changed,
            "same version, statement unmatched"
        );
        let edited = doc! { "_id": 1, "updatedAt": later, "user": "u" };
        assert_eq!(fate(&doc_sent, Some(&edited)), Fate::Changed);
        let temporary =
            doc! { "_id": 1, "updatedAt": at.clone(), "user": "u", "isTemporary": true };
        assert_eq!(fate(&doc_sent, Some(&temporary)), Fate::Unindexable);
        let expired = doc! { "_id": 1, "updatedAt": at.clone(), "user": "u", "isTemporary": false, "expiredAt": now };
        assert_eq!(fate(&doc_sent, Some(&expired)), Fate::Unindexable);
        let subagent = doc! { "_id": 1, "updatedAt": at.clone(), "user": "u", "subagentTask": {} };
        assert_eq!(fate(&doc_sent, Some(&subagent)), Fate::Unindexable);
        // No updatedAt sent, one now: another version.
        let doc_sent = sent(Bson::Int32(1), None);
        let stamped = marked(doc! { "_id": 1, "updatedAt": 5, "user": "u" });
        assert_eq!(fate(&doc_sent, Some(&stamped)), Fate::Changed);
        let unstamped = marked(doc! { "_id": 1, "user": "u" });
        assert_eq!(fate(&doc_sent, Some(&unstamped)), Fate::Unchanged);
        // The same updatedAt with another version token (two saves in one
        // millisecond through LibreChat's models): another version.
        let token = |t: &str| Some(Bson::String(t.into()));
        let doc_sent = sent_with_token(Bson::Int32(1), Some(at.clone()), token("a"));
        let resaved = marked(
            doc! { "_id": 1, "updatedAt": at.clone(), "_meiliIndexVersion": "b", "user": "u" },
        );
        assert_eq!(fate(&doc_sent, Some(&resaved)), Fate::Changed);
        let same =
            marked(doc! { "_id": 1, "updatedAt": at, "_meiliIndexVersion": "a", "user": "u" });
        assert_eq!(fate(&doc_sent, Some(&same)), Fate::Unchanged);
    }

    #[test]
    fn ranges_never_mix_id_types() {
        let docs = [
            sent(Bson::Int32(1), None),
            sent(Bson::Int32(2), None),
            sent(Bson::String("a".into()), None),
            sent(Bson::Int32(3), None),
        ];
        let lens: Vec<usize> = same_type_runs(&docs).map(<[BatchDoc]>::len).collect();
        assert_eq!(lens, vec![2, 1, 1]);
    }
}
