//! Every write of LibreChat's markers on the chat collections, each fenced
//! by the lease's [`Guard`] and retried as `flag_retry` says.
//!
//! A document is marked indexed only for an exact version
//! ([`set_flags_if_unchanged`]): one update statement per document,
//! matching its `_id`, the exact `updatedAt` value and LibreChat version
//! token that were read, and the retention branch it was read in (see
//! docs/design.md, "Version-exact acknowledgement"). The statements of many
//! documents travel in one raw `update` command (every MongoDB version has
//! it; the driver's `bulk_write` needs 8.0). Per-document filters never use
//! `$or`: some servers then scan the collection for every statement.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use mongodb::bson::{doc, rawdoc, Bson, DateTime, Document, RawArrayBuf, RawDocumentBuf};
use mongodb::error::ErrorKind;
use mongodb::Database;

use super::error::{mongo_err, took_too_long, MongoError, MAX_TIME_EXPIRED};
use super::{after_id, count_field, handle, read_all, Collection, FLAG, VERSION_FIELD};
use crate::flag_retry::{self, Attempt};
use crate::lease::Guard;
use crate::librechat::markers::{self, VERSION_TOKEN};
use crate::librechat::searchable::{self, Retention};
use crate::librechat::Rules;

/// Update statements per `update` command (well under the 100,000 a command
/// may hold and the 16 MiB a message may weigh).
pub const STATEMENTS_PER_COMMAND: usize = 1_000;

/// A flag write's attempt, classified for [`flag_retry::with_retries`].
fn attempt_err(what: &str) -> impl FnOnce(mongodb::error::Error) -> Attempt<MongoError> + '_ {
    move |e| {
        let transient = flag_retry::is_transient(&e);
        let error = mongo_err(what)(e);
        if transient {
            Attempt::Transient(error)
        } else {
            Attempt::Final(error)
        }
    }
}

/// One version of one document: its `_id`, and the exact values of
/// `updatedAt` and of LibreChat's version token `_meiliIndexVersion` read
/// with it (`None`: it had none).
#[derive(Clone, Debug, PartialEq)]
pub struct DocVersion {
    pub(crate) id: Bson,
    pub(crate) updated_at: Option<Bson>,
    pub(crate) token: Option<Bson>,
}

impl DocVersion {
    /// The version of a document as read (it must have been read with its
    /// `_id`, `updatedAt` and `_meiliIndexVersion`).
    pub fn of(doc: &Document) -> DocVersion {
        DocVersion {
            id: doc.get("_id").cloned().unwrap_or(Bson::Null),
            updated_at: doc.get(VERSION_FIELD).cloned(),
            token: doc.get(VERSION_TOKEN).cloned(),
        }
    }

    /// The filter that matches this document only while it still has this
    /// version: `_id`, `updatedAt` and `_meiliIndexVersion` equal to the
    /// values read. A missing value must stay missing and a `null` be
    /// matched by type (`updatedAt: null` would also match a document whose
    /// `updatedAt` was since removed).
    fn filter(&self) -> Document {
        let exactly = |value: &Option<Bson>| match value {
            None => Bson::Document(doc! { "$exists": false }),
            Some(Bson::Null) => Bson::Document(doc! { "$type": "null" }),
            Some(value) => Bson::Document(doc! { "$eq": value.clone() }),
        };
        doc! {
            "_id": self.id.clone(),
            VERSION_FIELD: exactly(&self.updated_at),
            VERSION_TOKEN: exactly(&self.token),
        }
    }
}

/// What a batch of update statements did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Updated {
    /// Statements whose filter matched a document.
    pub matched: u64,
    /// Documents actually changed.
    modified: u64,
}

/// Marks indexed (LibreChat's markers at the current schema version,
/// [`markers::indexed`]) each document that still has the version given and
/// is still searchable in the retention branch it was read in, at server
/// time `now`: one statement per document, filter `_id`, the exact
/// `updatedAt` and version token read, and the branch's conditions
/// (`searchable::branch_filter`, no `$or`). Returns how many statements
/// matched: fewer than `versions.len()` means some document was changed,
/// deleted or made unsearchable since it was read (those keep the markers
/// the application gave them). Fenced by the guard before each command.
pub async fn set_flags_if_unchanged(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    versions: &[(DocVersion, Retention)],
    now: DateTime,
    guard: &Guard,
) -> Result<Updated, MongoError> {
    let update = markers::indexed(rules);
    let statements = versions.iter().map(|(version, branch)| {
        let mut filter = version.filter();
        filter.extend(searchable::branch_filter(rules, collection, *branch, now));
        (filter, update.clone())
    });
    update_each(db, collection, statements, "set flags", guard).await
}

/// Clears the flag of the given documents (those that have it set): one
/// statement per `_id`, whatever the version — always safe, it only makes
/// indexing send the document again. Returns how many were cleared.
pub(crate) async fn clear_flags(
    db: &Database,
    collection: Collection,
    ids: &[Bson],
    guard: &Guard,
) -> Result<u64, MongoError> {
    let statements = ids
        .iter()
        .map(|id| (doc! { "_id": id.clone(), FLAG: true }, markers::unindexed()));
    let updated = update_each(db, collection, statements, "clear flags", guard).await?;
    Ok(updated.modified)
}

/// Marks removed (LibreChat's cleanup markers, [`markers::removed`]) each
/// of the given versions that is still the document's version: documents
/// found not searchable and deleted from Meilisearch. Version-exact, so a
/// document saved (and perhaps indexed by LibreChat's hook) since it was
/// judged keeps its markers. Returns how many were marked.
pub(crate) async fn mark_removed(
    db: &Database,
    collection: Collection,
    versions: &[DocVersion],
    guard: &Guard,
) -> Result<u64, MongoError> {
    let statements = versions
        .iter()
        .map(|version| (version.filter(), markers::removed()));
    let updated = update_each(db, collection, statements, "mark removed", guard).await?;
    Ok(updated.matched)
}

/// Runs update statements (filter, update) as raw `update` commands of at most
/// [`STATEMENTS_PER_COMMAND`] statements (unordered), checking the guard
/// before each command. A write error or write-concern error in a reply is
/// an error: no flag write is silently lost.
///
/// A command the server stops for taking too long (code 50,
/// `MaxTimeMSExpired`: DocumentDB-based servers end every statement after
/// 10 s, and with LibreChat's ~20 indexes on a collection one document's
/// update can cost it several milliseconds on a busy machine) is split in
/// halves, each sent again — the statements are idempotent, and each
/// `matched` still counts every statement of the command once. One
/// statement alone that takes too long is a transient failure, retried.
///
/// The statements are held as the bytes they are sent as: a statement held
/// as a `Document` costs an ordered map and a string per field, several KiB
/// for a version-exact one, and up to `sync.ack_writers` commands of 1,000
/// are built at once per collection.
async fn update_each(
    db: &Database,
    collection: Collection,
    statements: impl Iterator<Item = (Document, Document)>,
    what: &str,
    guard: &Guard,
) -> Result<Updated, MongoError> {
    let statements = statements
        .map(|(q, u)| RawDocumentBuf::from_document(&doc! { "q": q, "u": u }))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| MongoError::new("build an update statement", e.to_string()))?;
    let mut total = Updated::default();
    let mut rest: &[RawDocumentBuf] = &statements;
    // The halves of commands the server stopped, a stack: the first half on top.
    let mut pending = Vec::new();
    loop {
        let chunk = match pending.pop() {
            Some(chunk) => chunk,
            None if rest.is_empty() => return Ok(total),
            None => {
                let (chunk, more) = rest.split_at(rest.len().min(COMMAND_SIZE.current()));
                rest = more;
                chunk
            }
        };
        let single = chunk.len() == 1;
        let updates: RawArrayBuf = chunk.iter().cloned().collect();
        let command = rawdoc! { "update": collection.name(), "updates": updates, "ordered": false };
        let started = std::time::Instant::now();
        let sent = flag_retry::with_retries(what, guard, || async {
            let reply = match db.run_raw_command(command.clone()).await {
                Ok(reply) => reply,
                Err(error) if took_too_long(&error) && !single => return Ok(None),
                Err(error) => return Err(attempt_err(what)(error)),
            };
            match update_reply(&reply, what) {
                Err(Attempt::Final(_)) if reply_took_too_long(&reply) => {
                    if single {
                        let detail = "one statement took longer than the server allows";
                        Err(Attempt::Transient(MongoError::new(what, detail)))
                    } else {
                        Ok(None)
                    }
                }
                other => other.map(Some),
            }
        })
        .await?;
        match sent {
            Some(updated) => {
                COMMAND_SIZE.observe(chunk.len(), started.elapsed());
                total.matched += updated.matched;
                total.modified += updated.modified;
            }
            None => {
                tracing::debug!(statements = chunk.len(), %what,
                    "the server stopped an update command for taking too long: sending it in halves");
                COMMAND_SIZE.stopped(chunk.len());
                let (first, second) = chunk.split_at(chunk.len() / 2);
                pending.extend([second, first]);
            }
        }
    }
}

/// Statements per `update` command, adapted to how long the server takes:
/// at most [`STATEMENTS_PER_COMMAND`], halved when a command took longer
/// than [`SLOW_COMMAND`] or was stopped for taking too long, doubled again
/// after one well under it. So a server whose statement limit a command of
/// 1,000 updates would break (DocumentDB's 10 s, with LibreChat's indexes
/// on a busy machine) gets commands it can finish, without paying the limit
/// for each of them. One per process: every collection's writes go to the
/// same server.
struct CommandSize(AtomicUsize);

/// A command taking longer than this makes the next ones smaller.
const SLOW_COMMAND: std::time::Duration = std::time::Duration::from_secs(3);

static COMMAND_SIZE: CommandSize = CommandSize(AtomicUsize::new(STATEMENTS_PER_COMMAND));

impl CommandSize {
    fn current(&self) -> usize {
        self.0.load(Relaxed).max(1)
    }

    fn observe(&self, size: usize, took: std::time::Duration) {
        if took > SLOW_COMMAND {
            self.stopped(size);
        } else if took < SLOW_COMMAND / 4 && size >= self.current() {
            let grown = (size * 2).min(STATEMENTS_PER_COMMAND);
            let _ = self
                .0
                .fetch_update(Relaxed, Relaxed, |now| (now < grown).then_some(grown));
        }
    }

    fn stopped(&self, size: usize) {
        self.0.fetch_min((size / 2).max(1), Relaxed);
    }
}

/// Whether an `update` reply's write errors say the server stopped it for
/// taking too long.
fn reply_took_too_long(reply: &Document) -> bool {
    reply.get_array("writeErrors").is_ok_and(|errors| {
        errors.iter().filter_map(Bson::as_document).any(|e| {
            matches!(e.get("code"), Some(Bson::Int32(MAX_TIME_EXPIRED)))
                || matches!(e.get("code"), Some(&Bson::Int64(code)) if code == i64::from(MAX_TIME_EXPIRED))
        })
    })
}

/// The counts of an `update` command's reply, or its first write error (not
/// worth another attempt), or its write-concern error (applied, unconfirmed:
/// sent again, which is harmless).
fn update_reply(reply: &Document, what: &str) -> Result<Updated, Attempt<MongoError>> {
    let failed = |detail: String| Attempt::Final(MongoError::new(what, detail));
    if let Ok(errors) = reply.get_array("writeErrors") {
        if let Some(first) = errors.first().and_then(Bson::as_document) {
            let code = first.get("code").map_or(String::new(), ToString::to_string);
            let message = first.get_str("errmsg").unwrap_or("(no message)");
            let n = errors.len();
            let detail = format!("{n} of the statements failed; the first: code {code}: {message}");
            return Err(failed(detail));
        }
    }
    if let Ok(error) = reply.get_document("writeConcernError") {
        let message = error.get_str("errmsg").unwrap_or("(no message)");
        let detail = format!("write concern error: {message}");
        return Err(Attempt::Transient(MongoError::new(what, detail)));
    }
    let count =
        |field| count_field(reply, field).map_err(|_| failed(format!("no {field} in the reply")));
    Ok(Updated {
        matched: count("n")?,
        modified: count("nModified").unwrap_or(0),
    })
}

/// Marks removed ([`markers::removed`]) every flagged document that is not
/// searchable at `now`: it must not be in Meilisearch (the caller has
/// removed what Meilisearch held of it), so it cannot be "indexed".
pub(crate) async fn clear_flags_of_unindexable(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    now: DateTime,
    guard: &Guard,
) -> Result<u64, MongoError> {
    let filter = doc! { FLAG: true, "$nor": [ searchable::filter(rules, collection, now) ] };
    let handle = handle(db, collection);
    flag_retry::with_retries("clear flags", guard, || async {
        let update = handle.update_many(filter.clone(), markers::removed());
        let result = update.await.map_err(attempt_err("clear flags"))?;
        Ok(result.modified_count)
    })
    .await
}

/// Clears the flags of the next `batch` flagged documents after `after` (by
/// `_id`), in one range update. Returns how many were cleared and the last
/// `_id` of the range (`None` once no flagged document is left). Resumable:
/// a rerun simply finds the documents still flagged.
pub(crate) async fn reset_flags_batch(
    db: &Database,
    collection: Collection,
    after: Option<&Bson>,
    batch: usize,
    guard: &Guard,
) -> Result<(u64, Option<Bson>), MongoError> {
    let handle = handle(db, collection);
    let mut batch = batch.max(1);
    loop {
        // The last `_id` of the next `batch` flagged documents bounds the range.
        let find = handle
            .find(after_id(doc! { FLAG: true }, after))
            .sort(doc! { "_id": 1 })
            .skip(batch.saturating_sub(1) as u64)
            .limit(1)
            .projection(doc! { "_id": 1 });
        let page = read_all(find, "reset flags").await?;
        let upper = page.first().and_then(|d| d.get("_id").cloned());
        let mut range = doc! {};
        range.extend(after.map(|after| ("$gt".into(), after.clone())));
        range.extend(upper.clone().map(|upper| ("$lte".into(), upper)));
        let mut update_filter = doc! { FLAG: true };
        if !range.is_empty() {
            update_filter.insert("_id", range);
        }
        let cleared = flag_retry::with_retries("reset flags", guard, || async {
            let update =
                handle.update_many(update_filter.clone(), doc! { "$set": { FLAG: false } });
            match update.await {
                Ok(result) => Ok(Some(result.modified_count)),
                Err(error) if batch > 1 && update_took_too_long(&error) => Ok(None),
                Err(error) => Err(attempt_err("reset flags")(error)),
            }
        })
        .await?;
        if let Some(cleared) = cleared {
            return Ok((cleared, upper));
        }
        // The server stopped the update for taking too long (code 50, see
        // `update_each`): a smaller range.
        tracing::debug!(
            batch,
            "resetting flags took the server too long: halving the range"
        );
        batch = (batch / 2).max(1);
    }
}

/// Whether an `update_many` failed because the server stopped it for
/// taking too long (a command error or a write error with code 50).
fn update_took_too_long(error: &mongodb::error::Error) -> bool {
    took_too_long(error)
        || matches!(&*error.kind, ErrorKind::Write(mongodb::error::WriteFailure::WriteError(e)) if e.code == MAX_TIME_EXPIRED)
}

/// Marks removed ([`markers::removed`]) each of `ids` that still carries
/// the exclusion path: Meilisearch has just been told to delete them, and a
/// document that lost the path since (and may have been indexed) is left
/// alone. Returns how many were marked.
pub(crate) async fn mark_excluded_removed(
    db: &Database,
    rules: &Rules,
    collection: Collection,
    ids: &[Bson],
    guard: &Guard,
) -> Result<u64, MongoError> {
    let Some(path) = rules.exclusion_path(collection) else {
        return Ok(0);
    };
    let filter = |id: &Bson| doc! { "_id": id.clone(), path: { "$exists": true } };
    let statements = ids.iter().map(|id| (filter(id), markers::removed()));
    let updated = update_each(db, collection, statements, "mark removed", guard).await?;
    Ok(updated.matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_filter_matches_the_exact_values_read() {
        let at = DateTime::from_millis(5);
        let v = DocVersion::of(&doc! { "_id": 1, "updatedAt": at, "text": "x" });
        assert_eq!(
            v.filter(),
            doc! { "_id": 1, "updatedAt": { "$eq": at }, VERSION_TOKEN: { "$exists": false } }
        );
        let v = DocVersion::of(&doc! { "_id": 2, VERSION_TOKEN: "abc" });
        assert_eq!(
            v.filter(),
            doc! { "_id": 2, "updatedAt": { "$exists": false }, VERSION_TOKEN: { "$eq": "abc" } }
        );
        let v =
            DocVersion::of(&doc! { "_id": 3, "updatedAt": Bson::Null, VERSION_TOKEN: Bson::Null });
        assert_eq!(
            v.filter(),
            doc! { "_id": 3, "updatedAt": { "$type": "null" }, VERSION_TOKEN: { "$type": "null" } }
        );
    }

    #[test]
    fn a_reply_stopped_for_taking_too_long_is_told_apart() {
        let stopped = doc! { "ok": 1.0, "n": 0, "writeErrors": [ { "index": 0, "code": 50, "errmsg": "command timeout" } ] };
        assert!(reply_took_too_long(&stopped));
        let other = doc! { "ok": 1.0, "n": 0, "writeErrors": [ { "index": 0, "code": 66, "errmsg": "immutable" } ] };
        assert!(!reply_took_too_long(&other));
        assert!(!reply_took_too_long(&doc! { "ok": 1.0, "n": 3 }));
    }

    #[test]
    fn update_replies_count_or_fail() {
        let ok = doc! { "ok": 1.0, "n": 3, "nModified": 2 };
        assert!(matches!(
            update_reply(&ok, "x"),
            Ok(Updated {
                matched: 3,
                modified: 2
            })
        ));
        let failed = doc! { "ok": 1.0, "n": 1, "writeErrors": [ { "index": 0, "code": 66, "errmsg": "immutable" } ] };
        let Err(Attempt::Final(error)) = update_reply(&failed, "set flags") else {
            panic!("a write error is final");
        };
        let error = error.to_string();
        assert!(
            error.contains("set flags") && error.contains("immutable"),
            "{error}"
        );
        // Applied but not confirmed: worth sending again.
        let concern = doc! { "ok": 1.0, "n": 1, "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
        assert!(matches!(
            update_reply(&concern, "x"),
            Err(Attempt::Transient(_))
        ));
    }
}
