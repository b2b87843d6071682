//! What follow mode keeps in the lease document, beside the lease's own
//! fields: where the next owner resumes the change stream (`followToken`,
//! `followTokenSavedAt`) and the id-set comparisons owed for deletes without
//! a pre-image (`followOrphanChecks`: per collection name, since that
//! MongoDB time). The names and their meaning are follow mode's: the lease
//! writes them under its fence for us (`LeaseHandle::write_job_fields`) and
//! keeps them across owners, and `status` shows them as [`describe`] says.

use mongodb::bson::{doc, Bson, DateTime, Document};
use serde_json::{json, Value};

use crate::lease::clock::rfc3339;
use crate::lease::{Guard, JobFields, LeaseHandle, LeaseWriteError};

const TOKEN: &str = "followToken";
const TOKEN_SAVED_AT: &str = "followTokenSavedAt";
const ORPHAN_CHECKS: &str = "followOrphanChecks";

/// The saved resume token, if any.
pub(crate) fn token(document: &Document) -> Option<Document> {
    document.get_document(TOKEN).ok().cloned()
}

/// The id-set comparisons owed: collection name and since when.
fn owed(document: &Document) -> Vec<(String, DateTime)> {
    let Ok(owed) = document.get_document(ORPHAN_CHECKS) else {
        return Vec::new();
    };
    let owed = owed
        .iter()
        .filter_map(|(name, at)| Some((name.clone(), *at.as_datetime()?)));
    owed.collect()
}

/// Saves where the next owner resumes the change stream (with each
/// acknowledged micro-batch).
pub(crate) async fn save_token(
    lease: &LeaseHandle,
    guard: &Guard,
    token: &Document,
) -> Result<(), LeaseWriteError> {
    lease
        .write_job_fields(guard, doc! {}, |now| {
            doc! { "$set": { TOKEN: token.clone(), TOKEN_SAVED_AT: now } }
        })
        .await
}

/// Records that an id-set comparison of `collection` is owed for deletes
/// without a pre-image applied at MongoDB time `since` — before the resume
/// token is saved past them, so that a replica taking over or resuming
/// honours it (the later time is kept).
pub(crate) async fn owe_orphan_check(
    lease: &LeaseHandle,
    guard: &Guard,
    collection: &str,
    since: DateTime,
) -> Result<(), LeaseWriteError> {
    let field = format!("{ORPHAN_CHECKS}.{collection}");
    lease
        .write_job_fields(guard, doc! {}, |_| doc! { "$max": { field: since } })
        .await
}

/// A comparison of `collection` that started at MongoDB time `started`
/// completed: what was owed up to then is paid. A debt recorded later (a
/// delete applied since) stays.
pub(crate) async fn orphan_check_done(
    lease: &LeaseHandle,
    guard: &Guard,
    collection: &str,
    started: DateTime,
) -> Result<(), LeaseWriteError> {
    let field = format!("{ORPHAN_CHECKS}.{collection}");
    lease
        .write_job_fields(
            guard,
            doc! { field.as_str(): { "$lte": started } },
            |_| doc! { "$unset": { field.as_str(): "" } },
        )
        .await
}

/// The id-set comparisons owed (collection names), as the lease document
/// records them (read at the start of following).
pub(crate) async fn orphan_checks_owed(
    lease: &LeaseHandle,
) -> Result<Vec<String>, LeaseWriteError> {
    let record = lease.read().await?;
    Ok(record
        .map(|r| owed(&r.document).into_iter().map(|(c, _)| c).collect())
        .unwrap_or_default())
}

/// Follow mode's fields as `status` shows them: when the resume token was
/// saved, and each comparison owed (`document`: the lease document, if any).
pub fn describe(document: Option<&Document>) -> JobFields {
    let saved_at = document
        .and_then(|d| match d.get(TOKEN_SAVED_AT) {
            Some(Bson::DateTime(at)) => Some(*at),
            Some(Bson::Int64(ms)) => Some(DateTime::from_millis(*ms)),
            _ => None,
        })
        .map(|at| rfc3339(&at));
    let mut lines = Vec::new();
    lines.extend(
        saved_at
            .as_ref()
            .map(|at| format!("resume token saved: {at}")),
    );
    let mut owed_json = Vec::new();
    for (collection, since) in document.map(owed).unwrap_or_default() {
        let since = rfc3339(&since);
        lines.push(format!(
            "id-set comparison owed: {collection} (deletes without a pre-image since {since})"
        ));
        owed_json.push(json!({ "collection": collection, "since": since }));
    }
    let json = json!({ "followTokenSavedAt": saved_at, "orphanChecksOwed": owed_json });
    let Value::Object(json) = json else {
        unreachable!("json! builds an object")
    };
    JobFields { json, lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shows_the_saved_token_and_the_comparisons_owed() {
        let at = DateTime::from_millis(1_000);
        let none = describe(None);
        assert_eq!(none.json["followTokenSavedAt"], Value::Null);
        assert_eq!(none.json["orphanChecksOwed"], json!([]));
        assert!(none.lines.is_empty());

        let fields = describe(Some(&doc! {
            "status": "completed", "following": true,
            TOKEN: { "_data": "82" }, TOKEN_SAVED_AT: at,
            ORPHAN_CHECKS: { "messages": at },
        }));
        assert_eq!(fields.json["followTokenSavedAt"], "1970-01-01T00:00:01Z");
        assert_eq!(
            fields.json["orphanChecksOwed"],
            json!([{ "collection": "messages", "since": "1970-01-01T00:00:01Z" }])
        );
        assert_eq!(
            fields.lines,
            [
                "resume token saved: 1970-01-01T00:00:01Z",
                "id-set comparison owed: messages (deletes without a pre-image since 1970-01-01T00:00:01Z)"
            ]
        );
    }
}
