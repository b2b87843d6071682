//! `plan` writes nothing: both servers' state is identical before and after,
//! while the plan reports every decision a run would take.

use crate::support;

use meili_reconciler::mongo::Collection;
use meili_reconciler::reconcile::{plan, RebuildReason};
use serde_json::{json, Value};
use support::chat_data::{seed, Env};

async fn meili_state(env: &Env) -> Value {
    let mut state = serde_json::Map::new();
    for c in Collection::ALL {
        let uid = env.uid(c);
        let info = env.meili.index(&uid).await.unwrap();
        let settings = match &info {
            Some(_) => env.meili.settings(&uid).await.unwrap(),
            None => Value::Null,
        };
        let docs = match &info {
            Some(_) => json!(env.meili_docs(c).await),
            None => Value::Null,
        };
        let tasks = env
            .meili
            .tasks(&format!("indexUids={uid}&limit=1"))
            .await
            .unwrap()["total"]
            .clone();
        state.insert(uid, json!({"info": format!("{info:?}"), "settings": settings, "docs": docs, "tasks": tasks}));
    }
    Value::Object(state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_writes_nothing() {
    let env = Env::new("plan").await;
    seed(&env, 2_000, 200).await;
    // Messages index: exists with the right key, wrong settings, stale docs.
    let messages = env.uid(Collection::Messages);
    env.create_index(&messages, "messageId").await;
    env.put_docs(&messages, &[json!({"messageId": "ghost", "user": "u"})])
        .await;

    let mongo_before = (
        env.mongo_docs(Collection::Messages).await,
        env.mongo_docs(Collection::Conversations).await,
    );
    let meili_before = meili_state(&env).await;

    let plan = plan(&env.db, &env.meili, &env.opts).await.expect("plan");
    println!("{}", serde_json::to_string_pretty(&plan).unwrap());

    assert_eq!(meili_state(&env).await, meili_before);
    let mongo_after = (
        env.mongo_docs(Collection::Messages).await,
        env.mongo_docs(Collection::Conversations).await,
    );
    assert_eq!(mongo_after, mongo_before);

    // And it says what a run would do.
    assert_eq!(plan.meili_health, "available");
    assert!(!plan.nothing_to_do);
    let m = &plan.indexes[0];
    assert!(m.exists);
    assert_eq!(
        m.settings_to_apply.get("filterableAttributes"),
        Some(&json!(["user"]))
    );
    assert_eq!(m.meili_documents, 1);
    // 1 of every 20 seeded messages is flagged (LibreChat thinks it indexed
    // them) while the index holds 1 document: the index was lost.
    assert_eq!(m.mongo.indexed, 100);
    assert_eq!(
        m.rebuild,
        Some(RebuildReason::IndexLost {
            meili_documents: 1,
            mongo_indexed: 100
        })
    );
    assert_eq!(m.documents_to_index, m.mongo.indexable);
    let c = &plan.indexes[1];
    assert!(!c.exists);
    assert_eq!(c.rebuild, Some(RebuildReason::IndexMissing));
    assert_eq!(c.documents_to_index, c.mongo.indexable);
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["indexes"][1]["rebuild"]["reason"], "indexMissing");
    env.cleanup().await;
}
