//! Nothing deleted during a reconciliation stays searchable after it
//! (docs/design.md §4.4): a real `once --force` is paused at one stage of
//! its run (`RECONCILER_TEST_PAUSE_AFTER`, resumed by a file) and, while it
//! waits, messages and conversations are deleted with plain driver calls —
//! as a TTL monitor, an admin script or a retention job deletes, with no
//! LibreChat hook to tell Meilisearch:
//!
//! - `page-read`: after indexing read its first page (documents not read
//!   yet, and indexed ones indexing never reads);
//! - `batch-enqueued`: a batch's task enqueued and not yet awaited (the
//!   batch's own documents are in flight);
//! - `acknowledged`: after a batch was acknowledged (its documents are
//!   flagged and in Meilisearch);
//! - `drift-meili-ids`: during the id-set comparison, between its listing
//!   of Meilisearch and its read of MongoDB.
//!
//! Each stage has its own run with fresh work (a third of the messages and
//! conversations edited as LibreChat saves them, so both collections pass
//! the stage; the one that reaches it first pauses the process, and the
//! other has not passed it yet). After each run the whole index is
//! compared with MongoDB document by document, and no deleted document is
//! in Meilisearch. Runs against any MongoDB and Meilisearch (no stand-in
//! knobs): both test MongoDBs, and the real servers.

use crate::support;

use meili_reconciler::mongo::Collection;
use mongodb::bson::{doc, Bson, DateTime, Document};
use support::chat_data::{is_marked_indexed, seed, server_now, Env};
use support::cli::{output_of, wait_exit, Target};

/// Documents per batch: the edited third of 300 messages makes five.
const BATCH: usize = 20;

/// Edits every third indexed message and conversation as LibreChat saves
/// an edit (new text, new `updatedAt`, flag cleared): the run's work, so
/// both collections pass each stage. Returns the messages' `_id`s in `_id`
/// order — the order indexing reads and batches them in.
async fn give_work(env: &Env, round: usize) -> Vec<Bson> {
    let mut edited_messages = Vec::new();
    for collection in Collection::ALL {
        let handle = env.db.collection::<Document>(collection.name());
        let field = match collection {
            Collection::Messages => "text",
            Collection::Conversations => "title",
        };
        for (i, d) in env
            .mongo_docs(collection)
            .await
            .iter()
            .filter(|d| is_marked_indexed(d))
            .enumerate()
        {
            if i % 3 != round % 3 {
                continue;
            }
            let id = d.get("_id").unwrap().clone();
            handle
                .update_one(
                    doc! { "_id": &id },
                    doc! { "$set": { field: format!("edited in round {round}"), "updatedAt": DateTime::now(), "_meiliIndex": false },
                           "$unset": { "content": "" } },
                )
                .await
                .unwrap();
            if collection == Collection::Messages {
                edited_messages.push(id);
            }
        }
    }
    edited_messages
}

/// Deletes the documents of `collection` with these `_id`s (plain driver
/// calls) until MongoDB holds none of them; returns their Meilisearch ids.
/// Read first, and deleted until gone: under CI's load the DocumentDB
/// gateway on the test machines once answered a delete without an error
/// and still held the document (and once a `find_one_and_delete` found
/// nothing for a document that was there).
async fn delete(env: &Env, collection: Collection, ids: &[Bson]) -> Vec<String> {
    let handle = env.db.collection::<Document>(collection.name());
    let mut gone = Vec::new();
    for id in ids {
        let d = handle
            .find_one(doc! { "_id": id })
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{id} to delete exists"));
        gone.push(
            d.get_str(collection.primary_key())
                .unwrap()
                .replace('|', "--"),
        );
    }
    let these = doc! { "_id": { "$in": ids } };
    for _ in 0..5 {
        handle.delete_many(these.clone()).await.unwrap();
        if handle.count_documents(these.clone()).await.unwrap() == 0 {
            return gone;
        }
    }
    panic!("{} still holds some of {ids:?}", collection.name());
}

/// Indexed documents of `collection` outside `except`, a few of them.
async fn indexed_ids(env: &Env, collection: Collection, except: &[Bson], n: usize) -> Vec<Bson> {
    env.mongo_docs(collection)
        .await
        .iter()
        .filter(|d| is_marked_indexed(d))
        .map(|d| d.get("_id").unwrap().clone())
        .filter(|id| !except.contains(id))
        .rev()
        .take(n)
        .collect()
}

async fn deletes_at(stage: &str, round: usize, target: &Target, env: &Env) {
    let edited = give_work(env, round).await;
    assert!(edited.len() > 3 * BATCH, "work for several batches");
    let resume = tempfile::tempdir().unwrap();
    let resume_file = resume.path().join("resume");
    let mut run = target.spawn_with(
        "forced",
        &["once", "--force"],
        &[
            ("RECONCILER_TEST_PAUSE_AFTER", stage),
            ("RECONCILER_TEST_RESUME_FILE", resume_file.to_str().unwrap()),
        ],
    );
    run.await_pause(stage, support::timing::RUN_BOUND).await;

    // The first batch (in flight, or acknowledged, by the stage), the last
    // edited documents (not read yet), indexed ones no pass reads, and
    // indexed conversations.
    let m = Collection::Messages;
    let mut doomed: Vec<Bson> = edited[..3].to_vec();
    doomed.extend_from_slice(&edited[edited.len() - 3..]);
    doomed.extend(indexed_ids(env, m, &edited, 3).await);
    let mut gone = delete(env, m, &doomed).await;
    let convs = indexed_ids(env, Collection::Conversations, &[], 2).await;
    let gone_convs = delete(env, Collection::Conversations, &convs).await;
    assert_eq!(gone.len() + gone_convs.len(), 11, "deleted while paused");
    std::fs::write(&resume_file, b"").unwrap();

    let status = wait_exit(&mut run, support::timing::RUN_BOUND);
    let (out, err) = output_of(run);
    assert!(status.success(), "{stage}: {status}: {out}{err}");

    let in_meili = env.meili_docs(m).await;
    gone.retain(|id| in_meili.contains_key(id));
    assert!(
        gone.is_empty(),
        "{stage}: messages deleted during the run are still searchable: {gone:?}"
    );
    let convs_in_meili = env.meili_docs(Collection::Conversations).await;
    let left: Vec<_> = gone_convs
        .iter()
        .filter(|id| convs_in_meili.contains_key(*id))
        .collect();
    assert!(
        left.is_empty(),
        "{stage}: conversations still searchable: {left:?}"
    );
    // And the whole index, document by document, flags included.
    env.assert_in_step(server_now(&env.db).await, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_deleted_around_any_stage_of_a_run_stays_searchable() {
    if support::skip::skip_without_fault_injection() {
        return;
    }
    let target = Target::new("deletes_run").set("RECONCILER__SYNC__BATCH_DOCS", &BATCH.to_string());
    let env = Env::for_target(&target).await;
    seed(&env, 300, 40).await;
    let out = target.run("first", &["once"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    env.assert_in_step(server_now(&env.db).await, &[]).await;
    for (round, stage) in [
        "page-read",
        "batch-enqueued",
        "acknowledged",
        "drift-meili-ids",
    ]
    .into_iter()
    .enumerate()
    {
        deletes_at(stage, round, &target, &env).await;
        eprintln!("{stage}: exact after the run");
    }
    target.cleanup().await;
}
