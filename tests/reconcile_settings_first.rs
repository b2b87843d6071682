//! Settings drift is fixed before any document is sent, proven from
//! Meilisearch's own task list: the settings task finished before the first
//! document task was enqueued. And settings that are right are not re-sent.

use crate::support;

use meili_reconciler::mongo::Collection;
use serde_json::Value;
use support::chat_data::{seed, Env};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

fn at(task: &Value, field: &str) -> OffsetDateTime {
    OffsetDateTime::parse(task[field].as_str().unwrap(), &Rfc3339).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_task_finishes_before_the_first_document_task() {
    let env = Env::new("settings").await;
    seed(&env, 3_000, 100).await;
    for c in Collection::ALL {
        env.create_index(&env.uid(c), c.primary_key()).await;
    }
    let summary = env.run().await.expect("run");
    for c in Collection::ALL {
        let uid = env.uid(c);
        let tasks = env
            .meili
            .tasks(&format!("indexUids={uid}&limit=1000"))
            .await
            .unwrap();
        let tasks = tasks["results"].as_array().unwrap();
        let settings: Vec<_> = tasks
            .iter()
            .filter(|t| t["type"] == "settingsUpdate")
            .collect();
        assert_eq!(settings.len(), 1, "exactly one settings task on {uid}");
        assert_eq!(settings[0]["status"], "succeeded");
        let docs: Vec<_> = tasks
            .iter()
            .filter(|t| t["type"] == "documentAdditionOrUpdate")
            .collect();
        assert!(!docs.is_empty());
        let first_doc = docs.iter().map(|t| at(t, "enqueuedAt")).min().unwrap();
        assert!(
            at(settings[0], "finishedAt") <= first_doc,
            "settings finished {} after the first document task was enqueued {}",
            at(settings[0], "finishedAt"),
            first_doc
        );
        let first_doc_uid = docs
            .iter()
            .map(|t| t["uid"].as_u64().unwrap())
            .min()
            .unwrap();
        assert!(settings[0]["uid"].as_u64().unwrap() < first_doc_uid);
        let actual = env.meili.settings(&uid).await.unwrap();
        assert_eq!(actual["filterableAttributes"], serde_json::json!(["user"]));
    }
    assert!(summary
        .collections
        .iter()
        .all(|c| c.settings_changed == vec!["filterableAttributes".to_string()]));

    // Right settings are not sent again (a no-op PATCH re-indexes everything).
    let again = env.run().await.expect("second run");
    assert!(again
        .collections
        .iter()
        .all(|c| c.settings_changed.is_empty()));
    for c in Collection::ALL {
        let tasks = env
            .meili
            .tasks(&format!(
                "indexUids={}&types=settingsUpdate&limit=10",
                env.uid(c)
            ))
            .await
            .unwrap();
        assert_eq!(tasks["results"].as_array().unwrap().len(), 1);
    }
    env.cleanup().await;
}
