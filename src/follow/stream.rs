//! The change stream follow mode reads: one stream on the database,
//! filtered to the chat collections and to the changes that matter, with
//! `fullDocument: updateLookup` (the document as it is when the event is
//! read, or nothing when it is gone) and, where the collections keep them,
//! pre-images (`fullDocumentBeforeChange: whenAvailable`: how a delete names
//! the Meilisearch document it removes).
//!
//! Also here: where a stream starts (a resume token saved in the lease, or a
//! point taken before a reconciliation), what its errors mean for following
//! (not supported here at all / the resume point is gone / try again later),
//! and the task that reads it into a bounded channel. While the owner does
//! something else (a periodic reconciliation) the channel fills and the
//! reader stops asking: the server keeps the events.

use std::time::{Duration, Instant};

use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType, ResumeToken};
use mongodb::change_stream::ChangeStream;
use mongodb::error::ErrorKind;
use mongodb::options::{FullDocumentBeforeChangeType, FullDocumentType};
use mongodb::Database;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use super::latency::DocTimes;
use crate::config::PreImages;
use crate::lease::Guard;
use crate::librechat::{markers, Rules};
use crate::mongo::{self, Collection, MongoError};
use crate::reconcile::ReconcileError;

/// What a stream error means for following.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum StreamError {
    /// The server cannot serve this change stream at all (a standalone
    /// MongoDB, a server without change streams, a user without the
    /// privilege): `run` falls back to interval-only reconciliation.
    #[error("{0}")]
    Unsupported(NoChangeStreams),
    /// The resume point is no longer usable (no longer in the oplog, or not
    /// a valid token): reconcile fully, then follow from a fresh point.
    #[error("{0}")]
    ResumePointLost(String),
    /// Anything else (network, failover, ...): the run fails and is retried.
    #[error(transparent)]
    Mongo(#[from] MongoError),
}

impl From<StreamError> for ReconcileError {
    fn from(error: StreamError) -> Self {
        match error {
            StreamError::Mongo(e) => e.into(),
            other => ReconcileError::Other(other.to_string()),
        }
    }
}

/// Server error codes that say a resume point is gone: ChangeStreamHistoryLost,
/// ChangeStreamFatalError, InvalidResumeToken, CappedPositionLost.
const RESUME_POINT_LOST: [i32; 4] = [286, 280, 260, 136];

/// Server error codes that are transient however they are labelled: the
/// NotPrimary family, shutdown, interruption, timeouts, network.
const TRANSIENT: [i32; 14] = [
    6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 50, 43,
];

/// What an error of the server means for following (`resuming`: the stream
/// was opened from a saved resume token).
pub(crate) fn classify(error: &mongodb::error::Error, resuming: bool) -> StreamError {
    let transient = || StreamError::Mongo(mongo::failed("change stream", error));
    let ErrorKind::Command(command) = &*error.kind else {
        return transient();
    };
    let (code, message) = (command.code, &command.message);
    let detail = format!("{message} (code {code} {})", command.code_name);
    let transient_label = ["ResumableChangeStreamError", "RetryableReadError"]
        .iter()
        .any(|label| error.contains_label(label));
    if RESUME_POINT_LOST.contains(&code)
        || (resuming && code == 9 && message.contains("resume token"))
    {
        StreamError::ResumePointLost(detail)
    } else if TRANSIENT.contains(&code) || transient_label {
        transient()
    } else {
        StreamError::Unsupported(NoChangeStreams::from_server(code, message, detail))
    }
}

/// How the stream is opened.
#[derive(Clone, Debug)]
pub(crate) struct StreamConfig {
    /// Ask for pre-images (`whenAvailable`).
    pub(crate) pre_images: bool,
    /// How long the server holds an empty `getMore` (also how often an idle
    /// stream says it has nothing more).
    pub(crate) max_await: Duration,
    /// Changes read ahead of the owner.
    pub(crate) capacity: usize,
    /// LibreChat's rules (the schema version acknowledgements write).
    pub(crate) rules: Rules,
}

/// The filter: changes to documents of the chat collections, and whatever
/// invalidates following them (a drop or rename of one of them, a dropped
/// database) — but not updates that only mark a document indexed (any of
/// `markers::acknowledgement_shapes`): those are acknowledgements (ours,
/// after every document sent, or LibreChat's save hook's) and ask for no
/// work; filtering them on the server spares a lookup each. (An update that
/// clears the flag still comes: it asks for a re-send.)
fn pipeline(rules: &Rules) -> Vec<Document> {
    let names: Vec<&str> = Collection::ALL.iter().map(|c| c.name()).collect();
    vec![doc! { "$match": {
        "$or": [
            {
                "ns.coll": { "$in": &names },
                "operationType": { "$in": ["insert", "update", "replace", "delete", "drop", "rename"] },
            },
            { "operationType": "rename", "to.coll": { "$in": &names } },
            { "operationType": { "$in": ["dropDatabase", "invalidate"] } },
        ],
        "$nor": [ {
            "operationType": "update",
            "updateDescription.updatedFields": { "$in": markers::acknowledgement_shapes(rules) },
            "updateDescription.removedFields": { "$size": 0 },
        } ],
    } }]
}

/// Opens the stream (after `after`, when given).
async fn watch(
    db: &Database,
    after: Option<ResumeToken>,
    config: &StreamConfig,
) -> Result<ChangeStream<ChangeStreamEvent<Document>>, StreamError> {
    let resuming = after.is_some();
    let mut watch = db
        .watch()
        .pipeline(pipeline(&config.rules))
        .full_document(FullDocumentType::UpdateLookup)
        .max_await_time(config.max_await)
        .resume_after(after);
    if config.pre_images {
        watch = watch.full_document_before_change(FullDocumentBeforeChangeType::WhenAvailable);
    }
    watch.await.map_err(|e| classify(&e, resuming))
}

/// Whether this server serves the stream at all (opened and closed, reads
/// nothing). `Err(Mongo)` means it could not be told.
pub(crate) async fn probe(db: &Database) -> Result<(), StreamError> {
    let config = StreamConfig {
        pre_images: false,
        max_await: Duration::from_millis(100),
        capacity: 1,
        rules: Rules::default(),
    };
    watch(db, None, &config).await.map(drop)
}

/// A resume token taken now, before a reconciliation begins: following
/// from it afterwards replays every change made since, so nothing that
/// happened while the reconciliation ran is missed.
pub(crate) async fn starting_point(
    db: &Database,
    config: &StreamConfig,
) -> Result<Document, StreamError> {
    let mut stream = watch(db, None, config).await?;
    // Servers since MongoDB 4.0.7 answer the opening with a token; older
    // ones give one with the first `getMore` (an event read here is before
    // the reconciliation, which covers it).
    if stream.resume_token().is_none() {
        stream
            .next_if_any()
            .await
            .map_err(|e| classify(&e, false))?;
    }
    stream
        .resume_token()
        .and_then(|token| token_document(&token))
        .ok_or_else(|| {
            StreamError::Unsupported(NoChangeStreams {
                refusal: Refusal::Other,
                answer: "the server gives change streams no resume token".into(),
            })
        })
}

/// Opens the stream after `token` and starts reading it.
pub(crate) async fn open(
    db: &Database,
    token: &Document,
    config: &StreamConfig,
) -> Result<Reader, StreamError> {
    let after = resume_token(token).map_err(StreamError::ResumePointLost)?;
    let stream = watch(db, Some(after), config).await?;
    let (tx, rx) = mpsc::channel(config.capacity.max(1));
    let task = AbortOnDropHandle::new(tokio::spawn(read(stream, tx, config.rules.clone())));
    Ok(Reader { rx, _task: task })
}

/// The resume token as stored in the lease document.
pub(crate) fn token_document(token: &ResumeToken) -> Option<Document> {
    mongodb::bson::to_document(token).ok()
}

fn resume_token(doc: &Document) -> Result<ResumeToken, String> {
    mongodb::bson::from_bson(Bson::Document(doc.clone()))
        .map_err(|e| format!("the saved resume token does not parse: {e}"))
}

/// The collections whose deletes come with pre-images, per
/// `follow.pre_images`: under `auto` those that have them enabled, under
/// `enable` the same after turning them on (`collMod`, fenced by the guard;
/// a refusal is logged and that collection goes without), under `off` none.
/// Pre-images are asked for when the list is not empty.
pub(crate) async fn prepare_pre_images(
    db: &Database,
    mode: PreImages,
    guard: &Guard,
) -> Result<Vec<Collection>, MongoError> {
    if mode == PreImages::Enable {
        for collection in Collection::ALL {
            guard.check()?;
            let enable = doc! {
                "collMod": collection.name(),
                "changeStreamPreAndPostImages": { "enabled": true },
            };
            if let Err(error) = db.run_command(enable).await {
                tracing::warn!(collection = collection.name(), error = %error,
                    "could not enable pre-images (follow.pre_images = enable needs the collMod privilege and an existing collection); \
                     deletes there are repaired by the id-set comparison instead");
            }
        }
    }
    if mode == PreImages::Off {
        return Ok(Vec::new());
    }
    let enabled = mongo::collections_with_pre_images(db).await?;
    for collection in Collection::ALL {
        let has = enabled.contains(&collection);
        let line = match has {
            true => "deletes reach Meilisearch through the stream (pre-images)",
            false => "no pre-images: deletes reach Meilisearch through the id-set comparison (follow.orphan_check_every)",
        };
        tracing::info!(collection = collection.name(), pre_images = has, "{line}");
    }
    Ok(enabled)
}

/// The kind of change to one document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Insert,
    Update,
    Replace,
    Delete,
}

impl Op {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Replace => "replace",
            Op::Delete => "delete",
        }
    }
}

/// One change to one document of a chat collection.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) collection: Collection,
    pub(crate) op: Op,
    /// `documentKey._id`.
    pub(crate) id: Bson,
    /// The document as it was when the event was read (`updateLookup`);
    /// `None` when it is gone.
    pub(crate) full: Option<Document>,
    /// The Meilisearch id, from the document or its pre-image, when known.
    pub(crate) meili_id: Option<String>,
    /// `Some(true)`: an update that only marked the document indexed (an
    /// acknowledgement, ours or LibreChat's save hook's); `Some(false)`:
    /// one that only cleared its flag or recorded its removal
    /// (`markers::marker_only_update`).
    pub(crate) flag_only: Option<bool>,
    /// An update that changed a field of the document's Meilisearch form
    /// without LibreChat's markers (no new version token, the flag left as
    /// it was): made around LibreChat's save hooks (its own
    /// `updateMessageText` is a plain `updateOne`; an admin script), so a
    /// flag set earlier does not vouch for this version.
    pub(crate) around_hooks: bool,
    /// Where to resume after this change.
    pub(crate) token: Document,
    /// When MongoDB applied it (`wallTime`, else `clusterTime`) and when
    /// the reader received it (the end of its delivery, for the latency
    /// breakdown).
    pub(crate) times: DocTimes,
}

/// What the reader hands the owner, in stream order.
#[derive(Debug)]
pub(crate) enum StreamItem {
    Change(Box<Change>),
    /// The server had nothing more; everything up to `token` (when given)
    /// was handed over.
    CaughtUp(Option<Document>),
    /// A collection was dropped or renamed, or the database dropped: follow
    /// again from a full reconciliation.
    Restart(String),
    Failed(StreamError),
}

/// The reading side of an open stream; dropping it stops the reader.
pub(crate) struct Reader {
    rx: mpsc::Receiver<StreamItem>,
    _task: AbortOnDropHandle<()>,
}

impl Reader {
    /// The next item; `None` only if the reader stopped without saying why.
    pub(crate) async fn recv(&mut self) -> Option<StreamItem> {
        self.rx.recv().await
    }

    /// Whether more items are already waiting: the reader has read past
    /// the point its last item described.
    pub(crate) fn has_queued(&self) -> bool {
        !self.rx.is_empty()
    }
}

async fn read(
    mut stream: ChangeStream<ChangeStreamEvent<Document>>,
    tx: mpsc::Sender<StreamItem>,
    rules: Rules,
) {
    loop {
        let item = match stream.next_if_any().await {
            Ok(Some(event)) => match convert(event, &rules) {
                Some(item) => item,
                None => continue,
            },
            Ok(None) => {
                StreamItem::CaughtUp(stream.resume_token().and_then(|t| token_document(&t)))
            }
            Err(error) => StreamItem::Failed(classify(&error, true)),
        };
        // A restart or a failure is the stream's last item.
        let last = matches!(item, StreamItem::Restart(_) | StreamItem::Failed(_));
        if tx.send(item).await.is_err() || last {
            return;
        }
    }
}

/// The event as the owner gets it (`None`: not one to follow).
fn convert(event: ChangeStreamEvent<Document>, rules: &Rules) -> Option<StreamItem> {
    let op = match &event.operation_type {
        OperationType::Insert => Op::Insert,
        OperationType::Update => Op::Update,
        OperationType::Replace => Op::Replace,
        OperationType::Delete => Op::Delete,
        OperationType::Drop
        | OperationType::Rename
        | OperationType::DropDatabase
        | OperationType::Invalidate => {
            let ns = event.ns.as_ref();
            let ns = ns.map(|ns| format!("{}.{}", ns.db, ns.coll.as_deref().unwrap_or("*")));
            let what = &event.operation_type;
            return Some(StreamItem::Restart(format!(
                "{what:?} {}",
                ns.unwrap_or_default()
            )));
        }
        _ => return None,
    };
    let collection = event
        .ns
        .as_ref()
        .and_then(|ns| ns.coll.as_deref())
        .and_then(Collection::named);
    let id = event
        .document_key
        .as_ref()
        .and_then(|key| key.get("_id"))
        .cloned();
    let (Some(collection), Some(id), Some(token)) = (collection, id, token_document(&event.id))
    else {
        tracing::warn!(?event.ns, ?event.document_key, "a change without a collection, _id or token: ignored");
        return None;
    };
    let meili_id = [&event.full_document, &event.full_document_before_change]
        .into_iter()
        .flatten()
        .find_map(|d| mongo::meili_id(collection, d));
    let update = event.update_description.as_ref();
    let flag_only = update
        .filter(|change| change.truncated_arrays.as_ref().is_none_or(Vec::is_empty))
        .and_then(|change| {
            markers::marker_only_update(rules, &change.updated_fields, &change.removed_fields)
        });
    let around_hooks = op == Op::Update
        && update.is_some_and(|change| {
            edited_around_hooks(collection, &change.updated_fields, &change.removed_fields)
        });
    let cluster_time = event.cluster_time;
    let cluster_time = cluster_time.map(|ts| DateTime::from_millis(i64::from(ts.time) * 1000));
    Some(StreamItem::Change(Box::new(Change {
        collection,
        op,
        id,
        full: event.full_document,
        meili_id,
        flag_only,
        around_hooks,
        token,
        times: DocTimes {
            written: event.wall_time.or(cluster_time),
            received: Instant::now(),
        },
    })))
}

/// Whether an update (its `updatedFields` and `removedFields`) changed a
/// field the document's Meilisearch form is built from without touching
/// LibreChat's markers: every save through LibreChat's models writes a new
/// version token and clears the flag, so such an update went around them.
fn edited_around_hooks(collection: Collection, updated: &Document, removed: &[String]) -> bool {
    let touched = |field: &str| {
        updated.keys().chain(removed.iter()).any(|k| {
            k == field
                || k.strip_prefix(field)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    };
    collection.fields().any(touched) && !touched(markers::FLAG) && !touched(markers::VERSION_TOKEN)
}

/// What kind of server answered that it serves no change streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A standalone `mongod` (LibreChat's stock `mongod --noauth`): change
    /// streams need a replica set (code 40573).
    Standalone,
    /// A server that does not implement change streams at all (DocumentDB
    /// answers code 115 `CommandNotSupported`; older servers name an
    /// unknown `$changeStream` stage, code 40324).
    NotImplemented,
    /// The user may not open a change stream (code 13 `Unauthorized`).
    NotPermitted,
    /// Any other refusal.
    Other,
}

/// A server's answer that it serves no change streams here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{answer}")]
pub struct NoChangeStreams {
    pub(crate) refusal: Refusal,
    /// The server's answer (`message (code N Name)`).
    pub(crate) answer: String,
}

impl NoChangeStreams {
    /// Classifies the server's refusal by its code and message.
    pub fn from_server(code: i32, message: &str, answer: String) -> Self {
        let message = message.to_ascii_lowercase();
        let refusal = match code {
            40573 => Refusal::Standalone,
            _ if message.contains("replica set") => Refusal::Standalone,
            13 => Refusal::NotPermitted,
            115 | 40324 => Refusal::NotImplemented,
            _ if message.contains("not supported") || message.contains("not implemented") => {
                Refusal::NotImplemented
            }
            _ => Refusal::Other,
        };
        NoChangeStreams { refusal, answer }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_around_librechat_s_hooks_are_told_from_its_saves() {
        let m = Collection::Messages;
        let around = |updated: Document, removed: &[&str]| {
            let removed: Vec<String> = removed.iter().map(|s| s.to_string()).collect();
            edited_around_hooks(m, &updated, &removed)
        };
        // LibreChat's updateMessageText: a plain updateOne.
        assert!(around(doc! { "text": "new", "updatedAt": 1 }, &[]));
        assert!(around(doc! { "content.0.text": "new" }, &[]));
        assert!(around(doc! {}, &["sender"]));
        // A save through its models: a new token and the flag cleared.
        assert!(!around(
            doc! { "text": "new", "_meiliIndex": false, "_meiliIndexVersion": "x" },
            &[]
        ));
        assert!(!around(
            doc! { "text": "new", "_meiliIndexVersion": "x" },
            &[]
        ));
        // Fields the form is not built from.
        assert!(!around(doc! { "tokenCount": 5, "textual": 1 }, &[]));
        assert!(edited_around_hooks(
            Collection::Conversations,
            &doc! { "title": "t" },
            &[]
        ));
    }

    #[test]
    fn tokens_round_trip_through_the_lease_document() {
        let doc = doc! { "_data": "8263A1B2C3000000012B0229296E04" };
        let token = resume_token(&doc).unwrap();
        assert_eq!(token_document(&token), Some(doc));
    }
}
