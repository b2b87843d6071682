//! MongoDB's clock: the one time source of the lease protocol (docs/design.md §5).
//!
//! Every time the protocol compares or writes (`claimedAt`, `expiresAt`,
//! `retryAt`, "is it expired?") is the server's `hello.localTime`, read just
//! before the operation and used as a literal. Replica wall clocks never enter
//! the protocol, so a replica whose clock is hours off can neither shorten nor
//! lengthen a lease. `$$NOW` is not used: DocumentDB-based servers reject it in
//! update pipelines.
//!
//! A time read one round trip before the write it is used in errs on the safe
//! side: the lease it writes expires a little earlier, and the filters it
//! builds ("expired at or before now") match a little later.
//!
//! The clock is the primary's: `hello` is sent with read preference
//! `primary`, the server that applies the lease writes. After a failover the
//! driver selects the new primary and its clock is used from the next read
//! on. Replica-set members are assumed NTP-synced (MongoDB itself assumes
//! it); what a skew between them can and cannot do is in docs/design.md
//! ("Clocks").

use std::time::Duration;

use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::error::{Error, ErrorKind};
use mongodb::options::{ReadPreference, SelectionCriteria};
use mongodb::Database;

/// The primary's current time, from `hello` → `localTime`.
///
/// A `hello` that fails on the connection (reset, closed, or its pool
/// cleared by such a failure) is sent once more,
/// as the driver does for every read but not for `run_command`: a server may
/// close a pooled connection while it sits idle (DocumentDB's gateway does
/// under load), and the first command sent on it fails although the server
/// is up. The second attempt selects the server again and gets a new
/// connection; a server that is really gone fails it too.
pub async fn server_now(db: &Database) -> mongodb::error::Result<DateTime> {
    let primary = SelectionCriteria::ReadPreference(ReadPreference::Primary);
    let hello = || {
        db.run_command(doc! { "hello": 1 })
            .selection_criteria(primary.clone())
    };
    let reply = match hello().await {
        Err(e)
            if matches!(
                *e.kind,
                ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. }
            ) =>
        {
            hello().await?
        }
        answer => answer?,
    };
    let missing = || MissingLocalTime(reply.get("localTime").map(|v| format!("{v:?}")));
    local_time(&reply).ok_or_else(|| Error::custom(missing().to_string()))
}

/// `localTime` from a `hello` reply: a BSON date on MongoDB, Int64
/// milliseconds since the epoch on DocumentDB-based servers.
fn local_time(hello_reply: &Document) -> Option<DateTime> {
    match hello_reply.get("localTime")? {
        Bson::DateTime(at) => Some(*at),
        Bson::Int64(millis) => Some(DateTime::from_millis(*millis)),
        Bson::Int32(millis) => Some(DateTime::from_millis(i64::from(*millis))),
        Bson::Double(millis) if millis.is_finite() => Some(DateTime::from_millis(*millis as i64)),
        _ => None,
    }
}

/// `at + by`, saturating.
pub fn later(at: DateTime, by: Duration) -> DateTime {
    at.saturating_add_duration(by)
}

/// `at - by`, saturating at the epoch's minimum.
pub fn earlier(at: DateTime, by: Duration) -> DateTime {
    let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
    DateTime::from_millis(at.timestamp_millis().saturating_sub(millis))
}

/// The signed distance `to - from` in milliseconds.
pub fn millis_between(from: DateTime, to: DateTime) -> i64 {
    let to = to.timestamp_millis();
    to.saturating_sub(from.timestamp_millis())
}

/// A MongoDB time as an operator reads it: `2026-12-01T12:54:35.764Z`.
pub(crate) fn rfc3339(at: &DateTime) -> String {
    at.try_to_rfc3339_string()
        .unwrap_or_else(|_| at.to_string())
}

/// `hello` answered without a usable `localTime`.
#[derive(Debug, thiserror::Error)]
#[error("the server's hello reply has no usable localTime (found {0:?})")]
struct MissingLocalTime(Option<String>);

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn accepts_a_bson_date_and_int64_millis() {
        let at = DateTime::from_millis(1_700_000_000_123);
        assert_eq!(local_time(&doc! { "localTime": at }), Some(at));
        assert_eq!(
            local_time(&doc! { "localTime": 1_700_000_000_123_i64 }),
            Some(at)
        );
        assert_eq!(local_time(&doc! { "localTime": "noon" }), None);
        assert_eq!(local_time(&doc! {}), None);
    }

    #[test]
    fn arithmetic_saturates() {
        let at = DateTime::from_millis(10_000);
        assert_eq!(
            later(at, Duration::from_millis(250)).timestamp_millis(),
            10_250
        );
        assert_eq!(
            earlier(at, Duration::from_secs(1)).timestamp_millis(),
            9_000
        );
        assert_eq!(millis_between(at, DateTime::from_millis(9_000)), -1_000);
    }
}
