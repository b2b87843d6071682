//! What the indexer sends: a [`Batch`] of NDJSON lines, in `_id` order, with
//! the compact [`BatchDoc`] of each document (what its acknowledgement
//! needs once the NDJSON is dropped). Below the sender (`send`), the
//! acknowledgement (`ack`), poison isolation (`rejects`) and every feed
//! (`sync`, `apply`, `exact`).

use std::ops::Range;

use bytes::Bytes;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document};
use uuid::Uuid;

use super::error::ReconcileError;
use super::options::SyncOptions;
use crate::librechat::searchable::Retention;
use crate::mongo::{self, DocVersion};

/// One document of a batch: what its acknowledgement needs — its version
/// (`_id`, `updatedAt`, LibreChat's version token) and the retention branch
/// it was read in. LibreChat's own documents — an ObjectId `_id`, a date
/// `updatedAt`, no token or an ObjectId's hex, and a UUID
/// `messageId`/`conversationId` — are held inline in 56 bytes with no
/// allocation, and packed smaller still while they wait in flight
/// ([`super::packed`]); anything else is boxed and converts back exactly as
/// well.
#[derive(Clone, Debug)]
pub(crate) enum BatchDoc {
    Typical {
        id: ObjectId,
        token: Option<ObjectId>,
        branch: Retention,
        updated_at: mongodb::bson::DateTime,
        meili_id: Uuid,
    },
    Other(Box<OtherDoc>),
}

/// A [`BatchDoc`] that is not [`BatchDoc::Typical`].
#[derive(Clone, Debug)]
pub(crate) struct OtherDoc {
    version: DocVersion,
    branch: Retention,
    meili_id: Option<Box<str>>,
}

impl BatchDoc {
    /// A document sent at `version`, read in retention branch `branch`.
    pub(crate) fn new(
        version: &DocVersion,
        branch: Retention,
        meili_id: Option<String>,
    ) -> BatchDoc {
        let token = match &version.token {
            None => Some(None),
            Some(Bson::String(text)) => canonical_object_id(text).map(Some),
            Some(_) => None,
        };
        if let (Bson::ObjectId(id), Some(Bson::DateTime(updated_at)), Some(token), Some(uuid)) = (
            &version.id,
            &version.updated_at,
            token,
            meili_id.as_deref().and_then(canonical_uuid),
        ) {
            return BatchDoc::Typical {
                id: *id,
                token,
                branch,
                updated_at: *updated_at,
                meili_id: uuid,
            };
        }
        BatchDoc::Other(Box::new(OtherDoc {
            version: version.clone(),
            branch,
            meili_id: meili_id.map(String::into_boxed_str),
        }))
    }

    /// Its `_id` and the `updatedAt` and version token that were read and sent.
    pub(crate) fn version(&self) -> DocVersion {
        match self {
            BatchDoc::Typical {
                id,
                token,
                updated_at,
                ..
            } => DocVersion {
                id: Bson::ObjectId(*id),
                updated_at: Some(Bson::DateTime(*updated_at)),
                token: token.map(|token| Bson::String(token.to_hex())),
            },
            BatchDoc::Other(doc) => doc.version.clone(),
        }
    }

    /// The retention branch it was read in (what its acknowledgement checks
    /// again at MongoDB's time).
    pub(crate) fn branch(&self) -> Retention {
        match self {
            BatchDoc::Typical { branch, .. } => *branch,
            BatchDoc::Other(doc) => doc.branch,
        }
    }

    /// The `_id`.
    pub(crate) fn mongo_id(&self) -> Bson {
        match self {
            BatchDoc::Typical { id, .. } => Bson::ObjectId(*id),
            BatchDoc::Other(doc) => doc.version.id.clone(),
        }
    }

    /// The Meilisearch id, when the document has one.
    pub(crate) fn meili_id(&self) -> Option<String> {
        match self {
            BatchDoc::Typical { meili_id, .. } => Some(meili_id.hyphenated().to_string()),
            BatchDoc::Other(doc) => doc.meili_id.as_deref().map(str::to_string),
        }
    }
}

/// `text` as an ObjectId, when it is one's hex the way it prints back (lower
/// case: how LibreChat writes its version tokens).
fn canonical_object_id(text: &str) -> Option<ObjectId> {
    let id = ObjectId::parse_str(text).ok()?;
    (id.to_hex() == text).then_some(id)
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
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) docs: Vec<BatchDoc>,
    /// End of each document's line in `payload`.
    offsets: Vec<usize>,
    payload: Vec<u8>,
}

impl Batch {
    /// Adds a MongoDB document (read with its version fields, searchable in
    /// retention branch `branch`) as the line Meilisearch gets.
    pub(crate) fn push_document(
        &mut self,
        collection: mongo::Collection,
        doc: &Document,
        branch: Retention,
        line: &[u8],
    ) {
        let meili_id = mongo::meili_id(collection, doc);
        let doc = BatchDoc::new(&DocVersion::of(doc), branch, meili_id);
        self.docs.push(doc);
        self.payload.extend_from_slice(line);
        self.offsets.push(self.payload.len());
    }

    pub(crate) fn len(&self) -> usize {
        self.docs.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Whether adding a line of `line_len` bytes must start a new batch.
    pub(crate) fn is_full_for(&self, line_len: usize, opts: &SyncOptions) -> bool {
        !self.is_empty()
            && (self.len() >= opts.batch_docs || self.payload.len() + line_len > opts.batch_bytes)
    }

    /// The NDJSON of documents `range`, copied (bisecting a refused batch).
    pub(crate) fn payload_of(&self, range: Range<usize>) -> Bytes {
        // Where the lines of the first `n` documents end.
        let end = |n: usize| n.checked_sub(1).map_or(0, |last| self.offsets[last]);
        Bytes::copy_from_slice(&self.payload[end(range.start)..end(range.end)])
    }

    /// Splits the batch, without copying, into its NDJSON, to be enqueued
    /// (freed as soon as the request that sends it ends), and its documents,
    /// which are all a task waiting its turn in Meilisearch keeps
    /// (`packed::Packed`).
    pub(super) fn into_payload_and_docs(mut self) -> (Bytes, Vec<BatchDoc>) {
        // `Bytes` keeps a vector's spare capacity for as long as the request.
        self.payload.shrink_to_fit();
        (Bytes::from(self.payload), self.docs)
    }

    /// Gives back the slack a finished batch's vectors grew (up to as much
    /// again as they hold), which would otherwise wait in the queues with it.
    pub(super) fn shrink_to_fit(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn payload_slices_are_whole_lines_and_batches_remember_versions() {
        let mut b = Batch::default();
        for i in 0..3 {
            let d =
                doc! { "_id": i, "messageId": format!("m{i}"), "user": "u", "updatedAt": i * 10 };
            let line = ndjson_line(mongo::Collection::Messages, &d).unwrap();
            b.push_document(mongo::Collection::Messages, &d, Retention::Legacy, &line);
        }
        assert_eq!(
            &*b.payload_of(1..2),
            b"{\"messageId\":\"m1\",\"user\":\"u\"}\n"
        );
        assert_eq!(b.payload_of(0..3).len(), b.payload.len());
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
        let token = ObjectId::new().to_hex();
        let tokens = [
            None,
            Some(Bson::String(token.clone())),
            Some(Bson::String(token.to_uppercase())),
            Some(Bson::String("not-a-token".into())),
            Some(Bson::ObjectId(oid)),
            Some(Bson::Null),
        ];
        let branches = [Retention::Permanent, Retention::Expiring, Retention::Legacy];
        for id in &values {
            for updated_at in values.iter().map(|v| Some(v.clone())).chain([None]) {
                for meili_id in &meili_ids {
                    for (token, branch) in tokens.iter().zip(branches.iter().cycle()) {
                        let version = DocVersion {
                            id: id.clone(),
                            updated_at: updated_at.clone(),
                            token: token.clone(),
                        };
                        let sent = BatchDoc::new(&version, *branch, meili_id.clone());
                        assert_eq!(sent.version(), version);
                        assert_eq!(sent.branch(), *branch);
                        assert_eq!(sent.mongo_id(), *id);
                        assert_eq!(sent.meili_id(), *meili_id);
                    }
                }
            }
        }
    }

    #[test]
    fn librechats_documents_wait_in_flight_in_56_bytes_without_allocating() {
        let uuid = || Some(Uuid::new_v4().hyphenated().to_string());
        let mut version = DocVersion {
            id: Bson::ObjectId(ObjectId::new()),
            updated_at: Some(Bson::DateTime(mongodb::bson::DateTime::now())),
            token: None,
        };
        // Written with search off (no token) or through LibreChat's models.
        let sent = BatchDoc::new(&version, Retention::Legacy, uuid());
        assert!(matches!(sent, BatchDoc::Typical { .. }), "{sent:?}");
        version.token = Some(Bson::String(ObjectId::new().to_hex()));
        let sent = BatchDoc::new(&version, Retention::Expiring, uuid());
        assert!(matches!(sent, BatchDoc::Typical { .. }), "{sent:?}");
        let other = BatchDoc::new(&version, Retention::Permanent, Some("not-a-uuid".into()));
        assert!(matches!(other, BatchDoc::Other(_)), "{other:?}");
        assert_eq!(std::mem::size_of::<BatchDoc>(), 56);
    }

    #[test]
    fn batches_are_cut_by_count_and_bytes() {
        let opts = SyncOptions {
            batch_docs: 2,
            batch_bytes: 30,
            ..Default::default()
        };
        let mut b = Batch::default();
        assert!(!b.is_full_for(1000, &opts), "an empty batch takes any line");
        b.push_document(
            mongo::Collection::Messages,
            &doc! { "_id": 1 },
            Retention::Legacy,
            &[b'x'; 20],
        );
        assert!(b.is_full_for(11, &opts));
        assert!(!b.is_full_for(10, &opts));
        b.push_document(
            mongo::Collection::Messages,
            &doc! { "_id": 2 },
            Retention::Legacy,
            b"y",
        );
        assert!(b.is_full_for(1, &opts));
    }
}
