//! Index settings: the desired object, the diff against what Meilisearch has,
//! and applying it. Only a real difference is sent — a no-op `PATCH` still
//! makes Meilisearch re-read every document of the index.

use serde_json::{Map, Value};

use crate::lease::Guard;
use crate::meili::{Meili, MeiliError};

/// Settings whose value is a set: the order Meilisearch returns is not ours.
const SET_VALUED: &[&str] = &[
    "filterableAttributes",
    "sortableAttributes",
    "stopWords",
    "nonSeparatorTokens",
    "separatorTokens",
    "dictionary",
];

/// The desired settings object of every index.
pub fn desired(filterable_attributes: &[String]) -> Map<String, Value> {
    let filterable = Value::from(filterable_attributes);
    Map::from_iter([("filterableAttributes".to_string(), filterable)])
}

/// The keys of `desired` whose value differs from `actual` (the whole
/// desired object is compared), with their desired values: the body of the
/// `PATCH` to send, empty when nothing differs.
pub(crate) fn diff(actual: &Value, desired: &Map<String, Value>) -> Map<String, Value> {
    desired
        .iter()
        .filter(|(key, want)| {
            let have = actual.get(key.as_str()).unwrap_or(&Value::Null);
            normalized(key, have) != normalized(key, want)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn normalized(key: &str, value: &Value) -> Value {
    match value {
        Value::Array(items) if SET_VALUED.contains(&key) => {
            let mut items = items.clone();
            items.sort_by_key(|v| v.to_string());
            items.dedup();
            Value::Array(items)
        }
        other => other.clone(),
    }
}

/// Sends the diff (when not empty) and waits for its task, so no document
/// write can precede it. Returns the keys changed.
pub(crate) async fn apply(
    meili: &Meili,
    uid: &str,
    diff: &Map<String, Value>,
    guard: &Guard,
) -> Result<Vec<String>, MeiliError> {
    if diff.is_empty() {
        return Ok(Vec::new());
    }
    tracing::info!(index = uid, keys = ?diff.keys().collect::<Vec<_>>(), "applying settings");
    let body = Value::Object(diff.clone());
    let task = meili.patch_settings(uid, &body, guard).await?;
    meili.wait_ok(task, "update settings", guard).await?;
    Ok(diff.keys().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_sets_in_another_order_need_no_patch() {
        let want = desired(&["user".into(), "conversationId".into()]);
        let have =
            json!({"filterableAttributes": ["conversationId", "user"], "rankingRules": ["words"]});
        assert!(diff(&have, &want).is_empty());
    }

    #[test]
    fn a_missing_or_different_value_is_patched() {
        let want = desired(&["user".into()]);
        assert_eq!(
            Value::Object(diff(&json!({"filterableAttributes": []}), &want)),
            json!({"filterableAttributes": ["user"]})
        );
        assert_eq!(
            Value::Object(diff(&json!({}), &want)),
            json!({"filterableAttributes": ["user"]})
        );
        let mut want = want;
        want.insert("distinctAttribute".into(), json!("conversationId"));
        assert_eq!(
            Value::Object(diff(
                &json!({"filterableAttributes": ["user"], "distinctAttribute": null}),
                &want
            )),
            json!({"distinctAttribute": "conversationId"})
        );
    }
}
