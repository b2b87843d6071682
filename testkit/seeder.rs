//! LibreChat-shaped test data: writes `messages` and `conversations` into a
//! MongoDB database, with every edge case the reconciler must handle in
//! proportions the caller chooses.
//!
//! Used in-process by the integration tests (`support::seeder`) and by the
//! `meili-seed` binary (demo, benchmarks). The output is a pure function of
//! the [`SeedSpec`] (including its `now` anchor), so the same spec gives the
//! same documents, `_id`s included. Every edge-case proportion is honoured
//! *exactly* (`round(p × n)` documents), not on average: each dimension is
//! drawn by sequential sampling without replacement, which also mixes the
//! dimensions independently of one another. The [`SeedReport`] counts what
//! was written, including how many documents are indexable by the rules of
//! docs/design.md §3, so tests can check the reconciler against an independent
//! expectation.
//!
//! Shapes follow LibreChat's mongoose schemas (`packages/data-schemas`:
//! `message.ts`, `convo.ts`). LibreChat's TTL index on `expiredAt` is left
//! out on purpose: a real MongoDB would delete the seeded past-expired
//! documents within a minute, and those are an edge case tests rely on.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use mongodb::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use mongodb::options::{IndexOptions, InsertManyOptions};
use mongodb::{Collection, Database, IndexModel};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::task::JoinHandle;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// What to seed. Proportions are fractions of each collection (0.0..=1.0);
/// those of one dimension (e.g. `temporary_true` + `temporary_absent`) must
/// not sum above 1, the rest of that dimension gets the common value.
#[derive(Clone, Debug)]
pub struct SeedSpec {
    pub messages: usize,
    /// Conversations stored. When 0, messages still carry conversation ids
    /// (about one per 10 messages) whose conversation documents do not exist.
    pub conversations: usize,
    pub seed: u64,
    /// Distinct user ids that own the conversations.
    pub users: usize,
    /// The instant dates are generated around: `createdAt`/`updatedAt` lie in
    /// the 90 days before it, past `expiredAt` 1 h–30 d before it, future
    /// `expiredAt` 1–30 d after it. Fix it to compare two seedings.
    pub now: DateTime,
    /// Documents per `insert_many` (unordered).
    pub chunk_size: usize,
    /// Print progress on stderr (about every 5 s), for long seedings.
    pub progress: bool,
    /// Build the seeder's own indexes (LibreChat's sync index, `messageId`,
    /// `conversationId`) after the insert; `false` leaves the collections
    /// for LibreChat's own index builds (`meili-seed --indexes librechat`).
    pub indexes: bool,

    // Both collections.
    /// No `user` field (never indexable: search filters by user).
    pub missing_user: f64,
    /// `isTemporary: true`; `temporary_absent` has no field; the rest `false`.
    pub temporary_true: f64,
    pub temporary_absent: f64,
    /// `expiredAt` in the past / in the future / `null`; the rest has no field.
    pub expired_past: f64,
    pub expired_future: f64,
    pub expired_null: f64,
    /// A subagent record: messages carry `subagentTask`, conversations
    /// `subagentThread` (LibreChat keeps them out of search).
    pub subagent: f64,
    /// `_meiliIndex: true` with LibreChat's markers of an indexed document
    /// (claims Meilisearch has it: drift when it has not); `flag_absent` has
    /// no field; the rest `false`.
    pub flag_true: f64,
    pub flag_absent: f64,

    // Messages only.
    /// `content` is an array of `text` parts only (and `text: ""`).
    pub content_text_only: f64,
    /// `content` mixes `text` parts with `image_url` / `tool_call` / `think`.
    pub content_mixed: f64,
    /// `content` has no `text` part at all (an image, a tool call).
    pub content_without_text: f64,
    /// `unfinished: true` (a reply still streaming; never indexable).
    pub unfinished: f64,
    /// A `text` of about 50 KB (for byte-bounded batching).
    pub long_text: f64,
    /// A `messageId` Meilisearch rejects (`invalid_document_id`): a poison doc.
    pub invalid_message_id: f64,

    // Conversations only (messages inherit their conversation's id).
    /// `conversationId` contains `|` (sent to Meilisearch as `--`).
    pub pipe_in_conversation_id: f64,
    /// Has 1–3 `tags`; the rest has `tags: []`.
    pub tagged: f64,
}

impl Default for SeedSpec {
    /// Every document-shape edge case present in small proportions. State
    /// that implies a history (`flag_true`) and poison ids are opt-in.
    fn default() -> Self {
        SeedSpec {
            messages: 1_000,
            conversations: 100,
            seed: 1,
            users: 20,
            now: DateTime::now(),
            chunk_size: 5_000,
            progress: false,
            indexes: true,
            missing_user: 0.02,
            temporary_true: 0.05,
            temporary_absent: 0.10,
            expired_past: 0.03,
            expired_future: 0.03,
            expired_null: 0.04,
            subagent: 0.02,
            flag_true: 0.0,
            flag_absent: 0.10,
            content_text_only: 0.15,
            content_mixed: 0.12,
            content_without_text: 0.03,
            unfinished: 0.02,
            long_text: 0.001,
            invalid_message_id: 0.0,
            pipe_in_conversation_id: 0.05,
            tagged: 0.30,
        }
    }
}

/// Exact counts of what one collection received, per edge case.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CollectionCounts {
    pub total: usize,
    /// Searchable by docs/design.md §3.3: has `user`, is no subagent
    /// record, is in a branch of LibreChat's retention filter (`isTemporary:
    /// false` with `expiredAt` absent, null or future, or no `isTemporary`
    /// and no `expiredAt`), and (messages) is not `unfinished: true`.
    pub indexable: usize,
    /// Indexable documents whose `messageId` Meilisearch will reject.
    pub indexable_invalid_id: usize,
    pub missing_user: usize,
    pub temporary_true: usize,
    pub temporary_false: usize,
    pub temporary_absent: usize,
    pub expired_past: usize,
    pub expired_future: usize,
    pub expired_null: usize,
    pub expired_absent: usize,
    pub subagent: usize,
    pub flag_true: usize,
    pub flag_false: usize,
    pub flag_absent: usize,
    pub pipe_in_conversation_id: usize,
    pub tagged: usize,
    pub plain_text: usize,
    pub content_text_only: usize,
    pub content_mixed: usize,
    pub content_without_text: usize,
    pub unfinished: usize,
    pub long_text: usize,
    pub invalid_message_id: usize,
}

/// What [`seed`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SeedReport {
    pub messages: CollectionCounts,
    pub conversations: CollectionCounts,
    /// Wall time of the inserts (index creation included), in milliseconds.
    pub elapsed_ms: u64,
}

impl std::fmt::Display for SeedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, c) in [
            ("messages", &self.messages),
            ("conversations", &self.conversations),
        ] {
            writeln!(
                f,
                "{name}: {} documents, {} indexable",
                c.total, c.indexable
            )?;
            let value = serde_json::to_value(c).map_err(|_| std::fmt::Error)?;
            for (key, n) in value.as_object().into_iter().flatten() {
                if !matches!(key.as_str(), "total" | "indexable") && n.as_u64() != Some(0) {
                    writeln!(f, "  {key}: {n}")?;
                }
            }
        }
        write!(f, "seeded in {:.1}s", self.elapsed_ms as f64 / 1000.0)
    }
}

/// Inserts the documents the spec describes, then creates LibreChat's indexes.
/// The collections are not emptied first: seed a fresh database.
pub async fn seed(db: &Database, spec: &SeedSpec) -> anyhow::Result<SeedReport> {
    validate(spec)?;
    let started = Instant::now();
    let messages = db.collection::<Document>("messages");
    let conversations = db.collection::<Document>("conversations");

    let (convo_docs, convo_counts, threads) = generate_conversations(spec);
    let mut inserter = ChunkInserter::new(conversations.clone(), "conversations");
    let mut convo_docs = convo_docs.into_iter().peekable();
    while convo_docs.peek().is_some() {
        inserter
            .push(convo_docs.by_ref().take(spec.chunk_size).collect())
            .await?;
    }
    inserter.finish().await?;

    let mut message_counts = CollectionCounts::default();
    let mut generator = MessageGenerator::new(spec, &threads);
    let mut inserter = ChunkInserter::new(messages.clone(), "messages");
    let mut progress = Progress::new(spec.progress);
    while let Some(chunk) = generator.next_chunk(spec.chunk_size, &mut message_counts) {
        inserter.push(chunk).await?;
        progress.inserted(message_counts.total, spec.messages);
    }
    inserter.finish().await?;
    progress.say(format_args!(
        "inserted {} conversations and {} messages",
        spec.conversations, spec.messages
    ));
    if spec.indexes {
        // Built after the bulk insert: about a third cheaper on secantusdb
        // than maintaining them per insert (the generated ids are unique).
        create_indexes(&messages, &conversations).await?;
        progress.say(format_args!("indexes built"));
    }

    Ok(SeedReport {
        messages: message_counts,
        conversations: convo_counts,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Progress lines on stderr, at most one every [`Progress::EVERY`].
struct Progress {
    enabled: bool,
    started: Instant,
    last: Instant,
}

impl Progress {
    const EVERY: Duration = Duration::from_secs(5);

    fn new(enabled: bool) -> Self {
        let now = Instant::now();
        Progress {
            enabled,
            started: now,
            last: now,
        }
    }

    fn say(&mut self, what: std::fmt::Arguments<'_>) {
        if self.enabled {
            eprintln!(
                "meili-seed: {what} ({:.1}s)",
                self.started.elapsed().as_secs_f64()
            );
            self.last = Instant::now();
        }
    }

    fn inserted(&mut self, done: usize, total: usize) {
        if self.enabled && self.last.elapsed() >= Self::EVERY {
            self.say(format_args!("{done}/{total} messages sent"));
        }
    }
}

fn validate(spec: &SeedSpec) -> anyhow::Result<()> {
    let fractions = [
        ("missing_user", spec.missing_user),
        ("temporary_true", spec.temporary_true),
        ("temporary_absent", spec.temporary_absent),
        ("expired_past", spec.expired_past),
        ("expired_future", spec.expired_future),
        ("expired_null", spec.expired_null),
        ("subagent", spec.subagent),
        ("flag_true", spec.flag_true),
        ("flag_absent", spec.flag_absent),
        ("content_text_only", spec.content_text_only),
        ("content_mixed", spec.content_mixed),
        ("content_without_text", spec.content_without_text),
        ("unfinished", spec.unfinished),
        ("long_text", spec.long_text),
        ("invalid_message_id", spec.invalid_message_id),
        ("pipe_in_conversation_id", spec.pipe_in_conversation_id),
        ("tagged", spec.tagged),
    ];
    for (name, p) in fractions {
        ensure!(
            (0.0..=1.0).contains(&p),
            "seed spec: {name} = {p} is not within 0..=1"
        );
    }
    let dimensions = [
        ("temporary_*", spec.temporary_true + spec.temporary_absent),
        (
            "expired_*",
            spec.expired_past + spec.expired_future + spec.expired_null,
        ),
        ("flag_*", spec.flag_true + spec.flag_absent),
        (
            "content_*",
            spec.content_text_only + spec.content_mixed + spec.content_without_text,
        ),
    ];
    for (name, sum) in dimensions {
        ensure!(
            sum <= 1.0 + 1e-9,
            "seed spec: {name} proportions sum to {sum} > 1"
        );
    }
    ensure!(spec.users > 0, "seed spec: users must be at least 1");
    ensure!(
        spec.chunk_size > 0,
        "seed spec: chunk_size must be at least 1"
    );
    Ok(())
}

async fn create_indexes(
    messages: &Collection<Document>,
    conversations: &Collection<Document>,
) -> anyhow::Result<()> {
    let unique = || IndexOptions::builder().unique(true).build();
    let sync_index = || {
        IndexModel::builder()
            .keys(doc! { "_meiliIndex": 1, "isTemporary": 1, "expiredAt": 1 })
            .build()
    };
    // LibreChat's index on `expiredAt` (a TTL index there, plain here so that
    // MongoDB's TTL monitor deletes nothing under a benchmark): what the
    // expiry sweep and the follower's next-expiry query use.
    let expiry_index = || IndexModel::builder().keys(doc! { "expiredAt": 1 }).build();
    messages
        .create_indexes([
            sync_index(),
            expiry_index(),
            IndexModel::builder()
                .keys(doc! { "messageId": 1 })
                .options(unique())
                .build(),
            IndexModel::builder()
                .keys(doc! { "conversationId": 1 })
                .build(),
        ])
        .await
        .context("creating indexes on messages")?;
    conversations
        .create_indexes([
            sync_index(),
            expiry_index(),
            IndexModel::builder()
                .keys(doc! { "conversationId": 1 })
                .options(unique())
                .build(),
        ])
        .await
        .context("creating indexes on conversations")?;
    Ok(())
}

/// Inserts chunks (`insert_many`, unordered) with one in flight, so the next
/// chunk is generated while the server stores the previous one.
struct ChunkInserter {
    collection: Collection<Document>,
    name: &'static str,
    in_flight: Option<JoinHandle<mongodb::error::Result<()>>>,
}

impl ChunkInserter {
    fn new(collection: Collection<Document>, name: &'static str) -> Self {
        ChunkInserter {
            collection,
            name,
            in_flight: None,
        }
    }

    async fn push(&mut self, chunk: Vec<Document>) -> anyhow::Result<()> {
        self.finish().await?;
        let collection = self.collection.clone();
        self.in_flight = Some(tokio::spawn(async move {
            let unordered = InsertManyOptions::builder().ordered(false).build();
            collection
                .insert_many(chunk)
                .with_options(unordered)
                .await
                .map(drop)
        }));
        Ok(())
    }

    /// Waits for the chunk in flight, if any.
    async fn finish(&mut self) -> anyhow::Result<()> {
        if let Some(insert) = self.in_flight.take() {
            insert
                .await
                .context("insert task panicked")?
                .with_context(|| format!("inserting {}", self.name))?;
        }
        Ok(())
    }
}

// --- exact proportions -------------------------------------------------------

/// Draws categories so that exactly `counts[i]` of `n` draws yield category
/// `i`, in a seeded random order (sequential sampling without replacement).
struct ExactMix {
    remaining: Vec<usize>,
    left: usize,
}

impl ExactMix {
    /// `fractions` for categories 1.., category 0 takes the rest.
    fn new(n: usize, fractions: &[f64]) -> Self {
        let mut remaining: Vec<usize> = std::iter::once(0)
            .chain(fractions.iter().map(|p| (p * n as f64).round() as usize))
            .collect();
        let taken: usize = remaining.iter().sum();
        // Rounding can overshoot by one per category; trim from the last ones.
        let mut excess = taken.saturating_sub(n);
        for slot in remaining.iter_mut().rev() {
            let cut = excess.min(*slot);
            *slot -= cut;
            excess -= cut;
        }
        remaining[0] = n - remaining.iter().sum::<usize>();
        ExactMix { remaining, left: n }
    }

    fn draw(&mut self, rng: &mut StdRng) -> usize {
        assert!(self.left > 0, "ExactMix drawn more often than sized for");
        let mut pick = rng.random_range(0..self.left);
        self.left -= 1;
        for (category, slot) in self.remaining.iter_mut().enumerate() {
            if pick < *slot {
                *slot -= 1;
                return category;
            }
            pick -= *slot;
        }
        unreachable!("remaining counts sum to left")
    }
}

/// The edge-case dimensions shared by both collections, one draw per document.
struct CommonMix {
    missing_user: ExactMix,
    temporary: ExactMix,
    expired: ExactMix,
    subagent: ExactMix,
    flag: ExactMix,
}

#[derive(Clone, Copy)]
struct CommonTraits {
    missing_user: bool,
    /// 0 false, 1 true, 2 absent.
    temporary: usize,
    /// 0 absent, 1 past, 2 future, 3 null.
    expired: usize,
    subagent: bool,
    /// 0 false, 1 true, 2 absent.
    flag: usize,
}

impl CommonMix {
    fn new(n: usize, spec: &SeedSpec) -> Self {
        CommonMix {
            missing_user: ExactMix::new(n, &[spec.missing_user]),
            temporary: ExactMix::new(n, &[spec.temporary_true, spec.temporary_absent]),
            expired: ExactMix::new(
                n,
                &[spec.expired_past, spec.expired_future, spec.expired_null],
            ),
            subagent: ExactMix::new(n, &[spec.subagent]),
            flag: ExactMix::new(n, &[spec.flag_true, spec.flag_absent]),
        }
    }

    fn draw(&mut self, rng: &mut StdRng) -> CommonTraits {
        CommonTraits {
            missing_user: self.missing_user.draw(rng) == 1,
            temporary: self.temporary.draw(rng),
            expired: self.expired.draw(rng),
            subagent: self.subagent.draw(rng) == 1,
            flag: self.flag.draw(rng),
        }
    }
}

impl CommonTraits {
    /// Writes the fields these traits govern and counts them.
    fn apply(
        self,
        doc: &mut Document,
        user: &str,
        now: DateTime,
        rng: &mut StdRng,
        counts: &mut CollectionCounts,
    ) {
        counts.total += 1;
        if self.missing_user {
            counts.missing_user += 1;
        } else {
            doc.insert("user", user);
        }
        match self.temporary {
            1 => {
                doc.insert("isTemporary", true);
                counts.temporary_true += 1;
            }
            2 => counts.temporary_absent += 1,
            _ => {
                doc.insert("isTemporary", false);
                counts.temporary_false += 1;
            }
        }
        let now_ms = now.timestamp_millis();
        match self.expired {
            1 => {
                let at = now_ms - rng.random_range(HOUR_MS..30 * DAY_MS);
                doc.insert("expiredAt", DateTime::from_millis(at));
                counts.expired_past += 1;
            }
            2 => {
                let at = now_ms + rng.random_range(DAY_MS..30 * DAY_MS);
                doc.insert("expiredAt", DateTime::from_millis(at));
                counts.expired_future += 1;
            }
            3 => {
                doc.insert("expiredAt", Bson::Null);
                counts.expired_null += 1;
            }
            _ => counts.expired_absent += 1,
        }
        if self.subagent {
            counts.subagent += 1;
            let (field, record) = if doc.contains_key("messageId") {
                (
                    "subagentTask",
                    doc! { "attemptKey": "seeded", "status": "completed" },
                )
            } else {
                (
                    "subagentThread",
                    doc! { "parentConversationId": "seeded", "status": "completed" },
                )
            };
            doc.insert(field, record);
        }
        match self.flag {
            1 => {
                doc.insert("_meiliIndex", true);
                doc.insert("_meiliCleanupVersion", 1);
                doc.insert("_meiliIndexSchemaVersion", 1);
                counts.flag_true += 1;
            }
            2 => counts.flag_absent += 1,
            _ => {
                doc.insert("_meiliIndex", false);
                counts.flag_false += 1;
            }
        }
    }

    /// LibreChat's retention filter (its `isTemporary`, `expiredAt`
    /// branches), the exclusion of subagent records and ours: a user.
    fn indexable(self) -> bool {
        let retained = match self.temporary {
            0 => self.expired != 1,             // false: no expiry, null or later
            2 => matches!(self.expired, 0 | 3), // absent: legacy, only without expiry
            _ => false,                         // temporary
        };
        !self.missing_user && !self.subagent && retained
    }
}

// --- conversations -------------------------------------------------------------

/// What messages need to know about the conversation they belong to.
struct Thread {
    conversation_id: String,
    owner: String,
    created_ms: i64,
    endpoint: &'static str,
    model: &'static str,
}

fn generate_conversations(spec: &SeedSpec) -> (Vec<Document>, CollectionCounts, Vec<Thread>) {
    let mut rng = StdRng::seed_from_u64(spec.seed ^ 0xC0_4E_05);
    let users: Vec<String> = (0..spec.users).map(|_| object_id_hex(&mut rng)).collect();
    let now_ms = spec.now.timestamp_millis();
    let stored = spec.conversations;
    let threads_needed = if stored > 0 {
        stored
    } else {
        spec.messages.div_ceil(10)
    };

    let mut common = CommonMix::new(stored, spec);
    let mut pipe = ExactMix::new(threads_needed, &[spec.pipe_in_conversation_id]);
    let mut tagged = ExactMix::new(stored, &[spec.tagged]);
    let mut counts = CollectionCounts::default();
    let mut docs = Vec::with_capacity(stored);
    let mut threads = Vec::with_capacity(threads_needed);

    for index in 0..threads_needed {
        let (endpoint, model) = *ENDPOINT_MODELS.choose(&mut rng).expect("non-empty");
        let uuid = uuid_from(&mut rng);
        let has_pipe = pipe.draw(&mut rng) == 1;
        let conversation_id = if has_pipe {
            // Shape of LibreChat's composite ids (e.g. a shared or forked chat).
            format!("{uuid}|{}", uuid_from(&mut rng))
        } else {
            uuid
        };
        let thread = Thread {
            conversation_id,
            owner: users.choose(&mut rng).expect("users > 0").clone(),
            created_ms: now_ms - rng.random_range(2 * HOUR_MS..90 * DAY_MS),
            endpoint,
            model,
        };
        if index < stored {
            let updated_ms = (thread.created_ms + rng.random_range(0..HOUR_MS)).min(now_ms - 1_000);
            let mut doc = doc! {
                "_id": object_id(thread.created_ms, index, &mut rng),
                "conversationId": &thread.conversation_id,
                "title": title(&mut rng),
                "endpoint": endpoint,
                "model": model,
                "messages": [],
            };
            let traits = common.draw(&mut rng);
            traits.apply(&mut doc, &thread.owner, spec.now, &mut rng, &mut counts);
            if has_pipe {
                counts.pipe_in_conversation_id += 1;
            }
            let tags: Vec<&str> = if tagged.draw(&mut rng) == 1 {
                counts.tagged += 1;
                let n = rng.random_range(1..=3);
                TAGS.choose_multiple(&mut rng, n).copied().collect()
            } else {
                Vec::new()
            };
            doc.insert("tags", tags);
            doc.insert("createdAt", DateTime::from_millis(thread.created_ms));
            doc.insert("updatedAt", DateTime::from_millis(updated_ms));
            if traits.indexable() {
                counts.indexable += 1;
            }
            docs.push(doc);
        }
        threads.push(thread);
    }
    (docs, counts, threads)
}

// --- messages ------------------------------------------------------------------

/// Generates messages chunk by chunk, so any quantity fits in bounded memory.
/// Message `i` belongs to thread `i % threads` at position `i / threads`.
struct MessageGenerator<'a> {
    spec: &'a SeedSpec,
    threads: &'a [Thread],
    rng: StdRng,
    next: usize,
    common: CommonMix,
    content: ExactMix,
    unfinished: ExactMix,
    long_text: ExactMix,
    invalid_id: ExactMix,
}

impl<'a> MessageGenerator<'a> {
    fn new(spec: &'a SeedSpec, threads: &'a [Thread]) -> Self {
        let n = spec.messages;
        MessageGenerator {
            spec,
            threads,
            rng: StdRng::seed_from_u64(spec.seed ^ 0x3E55_A6E5),
            next: 0,
            common: CommonMix::new(n, spec),
            content: ExactMix::new(
                n,
                &[
                    spec.content_text_only,
                    spec.content_mixed,
                    spec.content_without_text,
                ],
            ),
            unfinished: ExactMix::new(n, &[spec.unfinished]),
            long_text: ExactMix::new(n, &[spec.long_text]),
            invalid_id: ExactMix::new(n, &[spec.invalid_message_id]),
        }
    }

    fn next_chunk(&mut self, size: usize, counts: &mut CollectionCounts) -> Option<Vec<Document>> {
        let end = (self.next + size).min(self.spec.messages);
        if self.next >= end {
            return None;
        }
        let chunk = (self.next..end).map(|i| self.message(i, counts)).collect();
        self.next = end;
        Some(chunk)
    }

    fn message(&mut self, index: usize, counts: &mut CollectionCounts) -> Document {
        let rng = &mut self.rng;
        let thread = &self.threads[index % self.threads.len()];
        let position = index / self.threads.len();
        let now_ms = self.spec.now.timestamp_millis();
        let created_ms =
            (thread.created_ms + position as i64 * 40_000 + rng.random_range(0..20_000))
                .min(now_ms - 2_000);
        let updated_ms = (created_ms + rng.random_range(0..5_000)).min(now_ms - 1_000);
        let by_user = position.is_multiple_of(2);

        let mut message_id = uuid_from(rng);
        let invalid_id = self.invalid_id.draw(rng) == 1;
        if invalid_id {
            // Meilisearch ids allow only [A-Za-z0-9_-].
            message_id = format!("bad id.{message_id}");
            counts.invalid_message_id += 1;
        }
        let parent_id = if position == 0 {
            ROOT_PARENT.to_string()
        } else {
            uuid_from(rng)
        };
        let sender = if by_user { "User" } else { thread.model };
        let mut doc = doc! {
            "_id": object_id(created_ms, index, rng),
            "messageId": &message_id,
            "conversationId": &thread.conversation_id,
            "parentMessageId": parent_id,
            "sender": sender,
            "isCreatedByUser": by_user,
            "endpoint": thread.endpoint,
            "model": thread.model,
            "error": false,
        };
        if thread.conversation_id.contains('|') {
            counts.pipe_in_conversation_id += 1;
        }
        let traits = self.common.draw(rng);
        traits.apply(&mut doc, &thread.owner, self.spec.now, rng, counts);

        let long = self.long_text.draw(rng) == 1;
        let words = if long {
            counts.long_text += 1;
            7_000
        } else {
            rng.random_range(3..80)
        };
        match self.content.draw(rng) {
            1 => {
                counts.content_text_only += 1;
                doc.insert("text", "");
                doc.insert("content", text_parts(rng, words));
            }
            2 => {
                counts.content_mixed += 1;
                let mut parts = text_parts(rng, words);
                let at = rng.random_range(0..=parts.len());
                parts.insert(at, non_text_part(rng).into());
                if rng.random_bool(0.5) {
                    parts.push(non_text_part(rng).into());
                }
                doc.insert("text", "");
                doc.insert("content", parts);
            }
            3 => {
                counts.content_without_text += 1;
                doc.insert("text", "");
                doc.insert("content", vec![Bson::from(non_text_part(rng))]);
            }
            _ => {
                counts.plain_text += 1;
                doc.insert("text", sentence(rng, words));
            }
        }

        let unfinished = self.unfinished.draw(rng) == 1;
        doc.insert("unfinished", unfinished);
        if unfinished {
            counts.unfinished += 1;
        }
        doc.insert("createdAt", DateTime::from_millis(created_ms));
        doc.insert("updatedAt", DateTime::from_millis(updated_ms));
        if traits.indexable() && !unfinished {
            counts.indexable += 1;
            if invalid_id {
                counts.indexable_invalid_id += 1;
            }
        }
        doc
    }
}

// --- realistic values ------------------------------------------------------------

/// LibreChat's parent id for the first message of a conversation.
const ROOT_PARENT: &str = "00000000-0000-0000-0000-000000000000";

const ENDPOINT_MODELS: &[(&str, &str)] = &[
    ("openAI", "gpt-4o"),
    ("openAI", "gpt-4o-mini"),
    ("anthropic", "claude-sonnet-4"),
    ("google", "gemini-2.5-pro"),
    ("agents", "gpt-4.1"),
];

const TAGS: &[&str] = &[
    "work", "personal", "research", "code", "travel", "recipes", "ideas",
];

const WORDS: &[&str] = &[
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "that",
    "with",
    "on",
    "as",
    "it",
    "can",
    "how",
    "what",
    "why",
    "please",
    "explain",
    "write",
    "function",
    "database",
    "index",
    "search",
    "query",
    "rust",
    "python",
    "async",
    "server",
    "replica",
    "lease",
    "cluster",
    "token",
    "model",
    "prompt",
    "answer",
    "example",
    "error",
    "memory",
    "latency",
    "throughput",
    "batch",
    "schema",
    "document",
    "message",
    "conversation",
    "summary",
    "translate",
    "recipe",
    "garden",
    "weather",
    "travel",
    "budget",
    "meeting",
    "deadline",
    "résumé",
    "naïve",
    "café",
    "straße",
    "日本語",
    "검색",
    "поиск",
    "🚀",
    "✅",
    "C++",
    "O(n log n)",
    "e.g.",
    "#42",
    "foo_bar",
    "x-y",
];

const TITLE_TOPICS: &[&str] = &[
    "Rust lifetimes",
    "Trip to Lisbon",
    "SQL tuning",
    "Birthday ideas",
    "Résumé review",
    "Kubernetes ingress",
    "Sourdough starter",
    "Quarterly report",
    "日本語の練習",
    "Bug in parser",
];

fn sentence(rng: &mut StdRng, words: usize) -> String {
    let mut text = String::with_capacity(words * 7);
    for i in 0..words {
        if i > 0 {
            text.push(if rng.random_ratio(1, 12) { '\n' } else { ' ' });
        }
        text.push_str(WORDS.choose(rng).expect("non-empty"));
    }
    text
}

fn title(rng: &mut StdRng) -> String {
    if rng.random_ratio(1, 10) {
        "New Chat".to_string()
    } else {
        TITLE_TOPICS.choose(rng).expect("non-empty").to_string()
    }
}

/// One to three `{type: "text", text}` parts sharing `words` words.
fn text_parts(rng: &mut StdRng, words: usize) -> Vec<Bson> {
    let parts = rng.random_range(1..=3).min(words.max(1));
    (0..parts)
        .map(|_| doc! { "type": "text", "text": sentence(rng, words.div_ceil(parts)) }.into())
        .collect()
}

fn non_text_part(rng: &mut StdRng) -> Document {
    match rng.random_range(0..3) {
        0 => doc! {
            "type": "image_url",
            "image_url": { "url": format!("/images/{}.webp", uuid_from(rng)), "detail": "auto" },
        },
        1 => doc! {
            "type": "tool_call",
            "tool_call": {
                "id": format!("call_{}", rng.random::<u32>()),
                "name": "web_search",
                "args": "{\"query\":\"weather\"}",
                "output": "sunny",
                "type": "tool_call",
            },
        },
        _ => doc! { "type": "think", "think": sentence(rng, 12) },
    }
}

fn uuid_from(rng: &mut StdRng) -> String {
    uuid::Builder::from_random_bytes(rng.random())
        .into_uuid()
        .to_string()
}

fn object_id_hex(rng: &mut StdRng) -> String {
    ObjectId::from_bytes(rng.random()).to_hex()
}

/// An ObjectId as the driver would have made it at `created_ms`, so `_id`
/// order follows creation time; `index` in the counter keeps it unique.
fn object_id(created_ms: i64, index: usize, rng: &mut StdRng) -> ObjectId {
    let mut bytes = [0u8; 12];
    let secs = u32::try_from(created_ms.div_euclid(1000)).unwrap_or(0);
    bytes[..4].copy_from_slice(&secs.to_be_bytes());
    let random: [u8; 5] = rng.random();
    bytes[4..9].copy_from_slice(&random);
    bytes[9..].copy_from_slice(&(index as u32).to_be_bytes()[1..]);
    ObjectId::from_bytes(bytes)
}

impl SeedReport {
    /// How long [`seed`] took.
    pub fn elapsed(&self) -> Duration {
        Duration::from_millis(self.elapsed_ms)
    }
}
