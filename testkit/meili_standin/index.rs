//! One index's data: its metadata, settings and documents. Documents are kept
//! in insertion order (as Meilisearch lists them) with a hash map from
//! external id to position, so additions of many documents stay cheap.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};
use time::OffsetDateTime;

use crate::clock;
use crate::settings::Settings;

/// A stored document.
pub type Document = Map<String, Value>;

/// Documents by external id, iterated in insertion order.
#[derive(Default)]
pub struct DocumentStore {
    by_position: BTreeMap<u64, (String, Document)>,
    position_of: HashMap<String, u64>,
    next_position: u64,
}

impl DocumentStore {
    pub fn len(&self) -> usize {
        self.position_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.position_of.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<&Document> {
        let position = self.position_of.get(id)?;
        self.by_position.get(position).map(|(_, doc)| doc)
    }

    /// Adds `doc` under `id`, replacing a previous document entirely.
    pub fn replace(&mut self, id: String, doc: Document) {
        match self.position_of.get(&id) {
            Some(position) => {
                self.by_position.insert(*position, (id, doc));
            }
            None => self.insert_new(id, doc),
        }
    }

    /// Adds `doc` under `id`, merging its fields into a previous document.
    pub fn merge(&mut self, id: String, doc: Document) {
        let existing = self
            .position_of
            .get(&id)
            .and_then(|position| self.by_position.get_mut(position));
        match existing {
            Some((_, stored)) => stored.extend(doc),
            None => self.insert_new(id, doc),
        }
    }

    fn insert_new(&mut self, id: String, doc: Document) {
        let position = self.next_position;
        self.next_position += 1;
        self.position_of.insert(id.clone(), position);
        self.by_position.insert(position, (id, doc));
    }

    /// Removes the document `id`; whether it existed.
    pub fn remove(&mut self, id: &str) -> bool {
        match self.position_of.remove(id) {
            Some(position) => self.by_position.remove(&position).is_some(),
            None => false,
        }
    }

    /// Removes every document; how many there were.
    pub fn clear(&mut self) -> usize {
        let count = self.len();
        self.by_position.clear();
        self.position_of.clear();
        count
    }

    /// Removes the documents `doomed` says so of; how many.
    pub fn remove_where(&mut self, mut doomed: impl FnMut(&Document) -> bool) -> usize {
        let ids: Vec<String> = self
            .iter_with_ids()
            .filter(|(_, doc)| doomed(doc))
            .map(|(id, _)| id.to_string())
            .collect();
        ids.iter().filter(|id| self.remove(id)).count()
    }

    /// Documents in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = &Document> {
        self.by_position.values().map(|(_, doc)| doc)
    }

    fn iter_with_ids(&self) -> impl Iterator<Item = (&str, &Document)> {
        self.by_position
            .values()
            .map(|(id, doc)| (id.as_str(), doc))
    }
}

/// An index.
pub struct Index {
    pub uid: String,
    pub primary_key: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub settings: Settings,
    pub documents: DocumentStore,
}

impl Index {
    pub fn new(uid: &str, primary_key: Option<String>) -> Self {
        let now = clock::now();
        Self {
            uid: uid.to_string(),
            primary_key,
            created_at: now,
            updated_at: now,
            settings: Settings::default(),
            documents: DocumentStore::default(),
        }
    }

    /// Records a change (`updatedAt`).
    pub fn touch(&mut self) {
        self.updated_at = clock::now();
    }

    /// The index object of `GET /indexes/{uid}`.
    pub fn view(&self) -> Value {
        json!({
            "uid": self.uid,
            "createdAt": clock::rfc3339(self.created_at),
            "updatedAt": clock::rfc3339(self.updated_at),
            "primaryKey": self.primary_key,
        })
    }

    /// The object of `GET /indexes/{uid}/stats`.
    pub fn stats(&self, is_indexing: bool) -> Value {
        let mut field_distribution: BTreeMap<&str, usize> = BTreeMap::new();
        let mut raw_size = 0usize;
        for doc in self.documents.iter() {
            for field in doc.keys() {
                *field_distribution.entry(field.as_str()).or_default() += 1;
            }
            raw_size += serde_json::to_vec(doc)
                .map(|bytes| bytes.len())
                .unwrap_or(0);
        }
        let count = self.documents.len();
        json!({
            "numberOfDocuments": count,
            "rawDocumentDbSize": raw_size,
            "avgDocumentSize": raw_size.checked_div(count).unwrap_or(0),
            "isIndexing": is_indexing,
            "numberOfEmbeddings": 0,
            "numberOfEmbeddedDocuments": 0,
            "fieldDistribution": field_distribution,
        })
    }
}
