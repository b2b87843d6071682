//! Timestamps and durations written the way Meilisearch writes them: RFC 3339
//! in UTC with nanoseconds (`2026-11-30T08:53:00.513383472Z`) and ISO 8601
//! durations (`PT0.024917024S`), so clients parsing real answers parse ours.

use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// The current time in UTC.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// `t` as RFC 3339 (the `time` crate trims trailing zeros of the fraction, as Meilisearch does).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// `d` as an ISO 8601 duration in seconds with nanoseconds.
pub fn iso_duration(d: Duration) -> String {
    let d = d.max(Duration::ZERO);
    format!("PT{}.{:09}S", d.whole_seconds(), d.subsec_nanoseconds())
}
