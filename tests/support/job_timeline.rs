//! The history of one job document, as MongoDB committed it: a change stream
//! on `distributedJobs` replayed into the sequence of document states, and
//! the critical sections (claim → own terminal write) that sequence implies.
//!
//! Both protocols write the same document, so the commit order of its
//! writes is the one timeline both sides share: a claim by anyone while
//! another holder's section is still open (it has not written its own
//! `completed`/`failed`/`released`) is two critical sections overlapping.
//! A following owner of ours (`following: true`) holds its section open
//! through its `completed` writes until it releases.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::change_stream::event::OperationType;
use mongodb::Database;
use tokio::task::JoinHandle;

/// Which protocol holds a section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Side {
    Reconciler,
    LibreChat,
}

/// One holder's time with the lease, as state indexes into the timeline.
#[derive(Clone, Debug)]
pub struct Section {
    pub side: Side,
    pub owner: String,
    pub epoch: Option<i64>,
    pub start: usize,
    /// The state its own terminal write produced, and that status.
    pub end: Option<(usize, String)>,
}

/// Watches one job document from the moment it is started.
pub struct JobTimeline {
    states: Arc<Mutex<Vec<Document>>>,
    task: JoinHandle<()>,
}

impl JobTimeline {
    /// Opens the change stream before returning, so every later write is seen.
    pub async fn start(db: &Database, collection: &str, job: &str) -> Self {
        let coll = db.collection::<Document>(collection);
        // The collection must exist for some servers to open a stream on it.
        let _ = db.create_collection(collection).await;
        let mut stream = coll
            .watch()
            .pipeline(vec![doc! { "$match": { "documentKey._id": job } }])
            .await
            .expect("open a change stream on the job document");
        let states: Arc<Mutex<Vec<Document>>> = Arc::default();
        let recorded = states.clone();
        let task = tokio::spawn(async move {
            let mut current = Document::new();
            while let Some(event) = stream.next().await {
                let event = event.expect("change stream event");
                match event.operation_type {
                    OperationType::Insert | OperationType::Replace => {
                        current = event
                            .full_document
                            .expect("insert/replace carry the document");
                    }
                    OperationType::Update => {
                        let change = event.update_description.expect("update description");
                        for (key, value) in change.updated_fields {
                            // Only top-level fields matter here; `progress.x`
                            // style paths are applied to the top-level key.
                            let top = key.split('.').next().unwrap_or(&key).to_string();
                            if top == key {
                                current.insert(key, value);
                            }
                        }
                        for key in change.removed_fields {
                            current.remove(&key);
                        }
                    }
                    OperationType::Delete => current = Document::new(),
                    _ => continue,
                }
                recorded.lock().unwrap().push(current.clone());
            }
        });
        JobTimeline { states, task }
    }

    /// Every state so far, in commit order.
    pub fn states(&self) -> Vec<Document> {
        self.states.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.states.lock().unwrap().len()
    }

    /// Stops watching and returns the states.
    pub fn stop(self) -> Vec<Document> {
        self.task.abort();
        self.states()
    }
}

fn side_of(state: &Document) -> Side {
    let expires = state.get("expiresAt");
    let ours = expires.is_some() && state.get("writtenExpiresAt") == expires;
    if ours {
        Side::Reconciler
    } else {
        Side::LibreChat
    }
}

fn epoch_of(state: &Document) -> Option<i64> {
    match state.get("epoch") {
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Int32(n)) => Some(i64::from(*n)),
        _ => None,
    }
}

/// The sections of `states`, and every overlap found: a claim while another
/// section was open, or a terminal write that is not the holder's own.
pub fn sections(states: &[Document]) -> (Vec<Section>, Vec<String>) {
    let mut sections: Vec<Section> = Vec::new();
    let mut violations = Vec::new();
    let mut open: Option<usize> = None;
    // The open section's lease end as last written (MongoDB's clock for
    // ours; LibreChat's for its own, which our claims wait
    // `lease.librechat_clock_skew` past).
    let mut open_expires: Option<mongodb::bson::DateTime> = None;
    for (i, state) in states.iter().enumerate() {
        let status = state.get_str("status").unwrap_or("");
        let owner = state.get_str("owner").ok().map(str::to_string);
        let side = side_of(state);
        let epoch = epoch_of(state);
        // A following owner of ours keeps the lease under `completed`
        // (docs/design.md §5.12): its section stays open.
        let following = side == Side::Reconciler && state.get_bool("following").unwrap_or(false);
        if status == "running" || following {
            let owner = owner.unwrap_or_default();
            let continues = open.is_some_and(|s| {
                let s = &sections[s];
                s.owner == owner && s.side == side && (side == Side::LibreChat || s.epoch == epoch)
            });
            if continues {
                open_expires = state.get_datetime("expiresAt").ok().copied();
                continue;
            }
            // A holder that stopped renewing lost its section when its lease
            // expired: a claim after that moment (the claim's own MongoDB
            // time) is the protocol's takeover, not an overlap. The stalled
            // holder's later writes, if any, still count as violations.
            let claimed_at = state.get_datetime("claimedAt").ok().copied();
            let expired = matches!((claimed_at, open_expires), (Some(c), Some(e)) if c >= e);
            if expired {
                open = None;
            }
            if let Some(s) = open {
                violations.push(format!(
                    "state {i}: {side:?} {owner} (epoch {epoch:?}) claimed while {:?} {} (epoch {:?}, since state {}) held the lease",
                    sections[s].side, sections[s].owner, sections[s].epoch, sections[s].start
                ));
            }
            sections.push(Section {
                side,
                owner,
                epoch,
                start: i,
                end: None,
            });
            open = Some(sections.len() - 1);
            open_expires = state.get_datetime("expiresAt").ok().copied();
        } else if let Some(s) = open.take() {
            let section = &mut sections[s];
            // Ours keep `owner` on their terminal writes; LibreChat's unset it.
            let own_write = match section.side {
                Side::Reconciler => {
                    side == Side::Reconciler
                        && owner.as_deref() == Some(section.owner.as_str())
                        && epoch == section.epoch
                }
                Side::LibreChat => side == Side::LibreChat && owner.is_none(),
            };
            if !own_write {
                violations.push(format!(
                    "state {i}: {status} written over {:?} {}'s open section by someone else",
                    section.side, section.owner
                ));
            }
            section.end = Some((i, status.to_string()));
        }
    }
    (sections, violations)
}
