//! A sent batch's documents packed while they wait for their task and their
//! acknowledgement (docs/design.md §4.6, Memory).
//!
//! Up to `sync.max_bytes_in_flight` worth of documents wait in flight at
//! once, so what each one holds there sets how much a large run's memory
//! stands above a small one's. A [`BatchDoc`] of LibreChat's shape is 56
//! bytes; packed it is about 22 (26 with a version token, 27 where no two
//! `_id`s share their process bytes, as the benchmark seeder's): the `_id` and the
//! token as differences from the document before and from the `_id` (a
//! batch is read in `_id` order, and ObjectIds made by one process share
//! their middle five bytes and count up), `updatedAt` as its distance from
//! the `_id`'s second, as variable-length integers, and the Meilisearch
//! UUID's 16 bytes as they are. Any other document is kept as it is, beside.
//! Unpacking gives back exactly the documents packed, in their order.

use integer_encoding::VarInt;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::DateTime;
use uuid::Uuid;

use super::batch::BatchDoc;
use crate::librechat::searchable::Retention;

/// Set when the document is kept as it is in [`Packed::others`].
const OTHER: u8 = 1;
/// The two bits of the retention branch ([`BRANCHES`]).
const BRANCH_SHIFT: u8 = 1;
const BRANCH_MASK: u8 = 0b11 << BRANCH_SHIFT;
/// Set when the document has a version token.
const HAS_TOKEN: u8 = 1 << 3;
/// Set when the `_id`'s process bytes are the previous `_id`'s.
const SAME_PROCESS: u8 = 1 << 4;
/// Set when the token's process bytes are the `_id`'s.
const TOKEN_SAME_PROCESS: u8 = 1 << 5;

/// An ObjectId's parts: a big-endian second, five process bytes, a
/// big-endian 24-bit counter. A batch's first `_id` is told apart from the
/// default, all zeros.
#[derive(Default)]
struct IdParts {
    seconds: u32,
    process: [u8; 5],
    counter: u32,
}

impl IdParts {
    fn of(id: &ObjectId) -> IdParts {
        let b = id.bytes();
        IdParts {
            seconds: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            process: [b[4], b[5], b[6], b[7], b[8]],
            counter: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        }
    }

    fn id(&self) -> ObjectId {
        let s = self.seconds.to_be_bytes();
        let p = self.process;
        let c = self.counter.to_be_bytes();
        ObjectId::from_bytes([
            s[0], s[1], s[2], s[3], p[0], p[1], p[2], p[3], p[4], c[1], c[2], c[3],
        ])
    }
}

/// Documents of one batch, packed, in their order.
#[derive(Debug)]
pub(crate) struct Packed {
    bytes: Vec<u8>,
    /// Documents not of LibreChat's shape, in their order among the others.
    others: Vec<BatchDoc>,
    len: usize,
}

impl Packed {
    /// Packs `docs`, keeping their order.
    pub(crate) fn pack(docs: Vec<BatchDoc>) -> Packed {
        let mut packed = Packed {
            bytes: Vec::with_capacity(docs.len() * 24),
            others: Vec::new(),
            len: docs.len(),
        };
        let mut previous = IdParts::default();
        for doc in docs {
            let BatchDoc::Typical {
                id,
                token,
                branch,
                updated_at,
                meili_id,
            } = doc
            else {
                packed.bytes.push(OTHER);
                packed.others.push(doc);
                continue;
            };
            let parts = IdParts::of(&id);
            let token_parts = token.as_ref().map(IdParts::of);
            let mut header = (branch as u8) << BRANCH_SHIFT;
            if parts.process == previous.process {
                header |= SAME_PROCESS;
            }
            if let Some(t) = &token_parts {
                header |= HAS_TOKEN;
                if t.process == parts.process {
                    header |= TOKEN_SAME_PROCESS;
                }
            }
            let out = &mut packed.bytes;
            out.push(header);
            push_var(out, i64::from(parts.seconds) - i64::from(previous.seconds));
            if header & SAME_PROCESS == 0 {
                out.extend_from_slice(&parts.process);
            }
            push_var(out, i64::from(parts.counter) - i64::from(previous.counter));
            let id_millis = i64::from(parts.seconds) * 1000;
            push_var(out, updated_at.timestamp_millis().wrapping_sub(id_millis));
            if let Some(t) = &token_parts {
                push_var(out, i64::from(t.seconds) - i64::from(parts.seconds));
                if header & TOKEN_SAME_PROCESS == 0 {
                    out.extend_from_slice(&t.process);
                }
                out.extend_from_slice(&t.counter.to_be_bytes()[1..]);
            }
            out.extend_from_slice(meili_id.as_bytes());
            previous = parts;
        }
        packed.bytes.shrink_to_fit();
        packed.others.shrink_to_fit();
        packed
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The documents packed, in their order.
    pub(crate) fn unpack(self) -> Vec<BatchDoc> {
        let mut docs = Vec::with_capacity(self.len);
        let mut others = self.others.into_iter();
        let mut input = Reader(&self.bytes);
        let mut previous = IdParts::default();
        while !input.0.is_empty() {
            let header = input.take::<1>()[0];
            if header & OTHER != 0 {
                docs.push(others.next().expect("an unpacked document kept beside"));
                continue;
            }
            let seconds = input.var().wrapping_add(i64::from(previous.seconds)) as u32;
            let process = if header & SAME_PROCESS != 0 {
                previous.process
            } else {
                input.take::<5>()
            };
            let counter = input.var().wrapping_add(i64::from(previous.counter)) as u32;
            let parts = IdParts {
                seconds,
                process,
                counter,
            };
            let id_millis = i64::from(seconds) * 1000;
            let updated_at = DateTime::from_millis(input.var().wrapping_add(id_millis));
            let token = (header & HAS_TOKEN != 0).then(|| {
                let seconds = input.var().wrapping_add(i64::from(seconds)) as u32;
                let process = if header & TOKEN_SAME_PROCESS != 0 {
                    process
                } else {
                    input.take::<5>()
                };
                let [c1, c2, c3] = input.take::<3>();
                IdParts {
                    seconds,
                    process,
                    counter: u32::from_be_bytes([0, c1, c2, c3]),
                }
                .id()
            });
            docs.push(BatchDoc::Typical {
                id: parts.id(),
                token,
                branch: BRANCHES[usize::from((header & BRANCH_MASK) >> BRANCH_SHIFT)],
                updated_at,
                meili_id: Uuid::from_bytes(input.take::<16>()),
            });
            previous = parts;
        }
        docs
    }
}

fn push_var(out: &mut Vec<u8>, value: i64) {
    let mut buf = [0u8; 10];
    let used = value.encode_var(&mut buf);
    out.extend_from_slice(&buf[..used]);
}

/// What is left to unpack. Only [`Packed::pack`] writes what it reads, so a
/// short or malformed input is a bug, not a condition.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_first_chunk::<N>().expect("a packed record");
        self.0 = rest;
        *head
    }

    fn var(&mut self) -> i64 {
        let (value, used) = i64::decode_var(self.0).expect("a packed integer");
        self.0 = &self.0[used..];
        value
    }
}

/// The retention branches by their two bits (`branch as u8`).
const BRANCHES: [Retention; 3] = [Retention::Permanent, Retention::Expiring, Retention::Legacy];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mongo::DocVersion;
    use mongodb::bson::Bson;

    fn typical(id: ObjectId, at: i64, token: Option<ObjectId>, branch: Retention) -> BatchDoc {
        let version = DocVersion {
            id: Bson::ObjectId(id),
            updated_at: Some(Bson::DateTime(DateTime::from_millis(at))),
            token: token.map(|t| Bson::String(t.to_hex())),
        };
        let doc = BatchDoc::new(
            &version,
            branch,
            Some(Uuid::new_v4().hyphenated().to_string()),
        );
        assert!(matches!(doc, BatchDoc::Typical { .. }), "{doc:?}");
        doc
    }

    fn same(a: &[BatchDoc], b: &[BatchDoc]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(a, b)| {
                a.version() == b.version()
                    && a.branch() == b.branch()
                    && a.meili_id() == b.meili_id()
                    && a.mongo_id() == b.mongo_id()
            })
    }

    fn round_trip(docs: Vec<BatchDoc>) -> (Vec<BatchDoc>, usize) {
        let packed = Packed::pack(docs);
        let (len, bytes) = (packed.len(), packed.bytes.len());
        let unpacked = packed.unpack();
        assert_eq!(unpacked.len(), len);
        (unpacked, bytes)
    }

    #[test]
    fn packed_documents_unpack_to_exactly_what_was_packed_in_order() {
        let branches = [Retention::Permanent, Retention::Expiring, Retention::Legacy];
        let extremes = [0u32, 1, u32::MAX];
        let mut docs = Vec::new();
        let edge = |seconds: u32, process: [u8; 5], counter: u32| {
            IdParts {
                seconds,
                process,
                counter,
            }
            .id()
        };
        // Extreme parts, every branch, with and without tokens, times far
        // from the `_id`'s, ids out of order, and documents of other shapes
        // between them.
        for (i, &seconds) in extremes.iter().enumerate() {
            for &counter in &[0u32, 1, 0xff_ffff] {
                for (j, &at) in [i64::MIN, -1, 0, i64::MAX].iter().enumerate() {
                    let id = edge(seconds, [i as u8, 0, 0, 0, j as u8], counter);
                    let token = edge(extremes[(i + j) % 3], [9; 5], counter ^ 0x5a5a5a);
                    let branch = branches[(i + j) % 3];
                    docs.push(typical(id, at, Some(token), branch));
                    docs.push(typical(id, at, None, branch));
                    docs.push(typical(id, at, Some(id), branch));
                }
            }
            let other = DocVersion {
                id: Bson::Int32(i as i32),
                updated_at: None,
                token: Some(Bson::String("not-a-token".into())),
            };
            docs.push(BatchDoc::new(&other, branches[i], Some("m".into())));
        }
        let copy = docs.clone();
        let (unpacked, _) = round_trip(docs);
        assert!(same(&unpacked, &copy), "{unpacked:?}");
        let (unpacked, bytes) = round_trip(Vec::new());
        assert!(unpacked.is_empty() && bytes == 0);
    }

    #[test]
    fn librechats_documents_in_id_order_pack_in_under_half_their_size() {
        let now = DateTime::now().timestamp_millis();
        let docs: Vec<BatchDoc> = (0..10_000)
            .map(|i| {
                let id = ObjectId::new();
                let token = (i % 2 == 0).then(ObjectId::new);
                typical(id, now + i, token, Retention::Permanent)
            })
            .collect();
        let copy = docs.clone();
        let (unpacked, bytes) = round_trip(docs);
        assert!(same(&unpacked, &copy));
        let per_doc = bytes as f64 / 10_000.0;
        assert!(
            per_doc < 28.0,
            "{per_doc:.1} bytes a document against BatchDoc's {}",
            std::mem::size_of::<BatchDoc>()
        );
    }
}
