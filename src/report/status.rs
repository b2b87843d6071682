//! `status`'s text: the lease as an operator reads it ([`LeaseStatus`]),
//! then the mode `run` takes ([`ModeView`]), then one entry per chat
//! collection ([`CollectionView`]). `status --json` serializes the same
//! data instead.

use std::fmt;

use crate::follow::ModeView;
use crate::lease::store::Holder;
use crate::lease::{LeaseState, LeaseStatus};
use crate::views::{CollectionView, DeleteRegime};

impl fmt::Display for LeaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "job:        {}", self.job)?;
        if self.holder == Some(Holder::LibreChat) {
            held_by_librechat(self, f)?;
        } else {
            writeln!(f, "state:      {}", state(self.state))?;
            if self.state == LeaseState::NeverRun {
                return Ok(());
            }
            let epoch = self.epoch.map_or("-".into(), |e| e.to_string());
            let owner = self.owner.as_deref().unwrap_or("-");
            writeln!(f, "owner:      {owner} (epoch {epoch})")?;
        }
        expiry(self, f)?;
        progress(self, f)?;
        for line in &self.job_fields.lines {
            writeln!(f, "{line}")?;
        }
        if let Some(by) = &self.handover_requested_by {
            writeln!(f, "handover asked by: {by}")?;
        }
        if let Some(at) = &self.completed_at {
            writeln!(f, "last reconciliation completed: {at}")?;
        }
        if let Some(summary) = &self.summary {
            writeln!(f, "summary:    {summary}")?;
        }
        last_error(self, f)?;
        write!(f, "server time: {}", self.server_time)
    }
}

/// The state of a lease we (or nobody yet) wrote last.
fn state(state: LeaseState) -> &'static str {
    match state {
        LeaseState::NeverRun => "never run",
        LeaseState::Running => "running",
        LeaseState::Following => "following change streams (reconciled, keeps the index in step)",
        LeaseState::Expired => "expired (owner stopped renewing)",
        LeaseState::Completed => "completed",
        LeaseState::Failed => "failed",
        LeaseState::Released => "released",
        LeaseState::Unknown => "unknown",
    }
}

/// A document LibreChat's own `runDistributedJob` wrote last, named as such:
/// its `completed` is not a reconciliation.
fn held_by_librechat(s: &LeaseStatus, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let state = match s.state {
        LeaseState::Running => "held by a LibreChat replica (its own start-up sync)",
        LeaseState::Expired => "expired (a LibreChat replica stopped renewing)",
        LeaseState::Completed => {
            "completed by a LibreChat replica (not counted as a reconciliation)"
        }
        LeaseState::Failed => "failed on a LibreChat replica",
        _ => "last written by a LibreChat replica",
    };
    writeln!(f, "state:      {state}")?;
    match &s.owner {
        Some(owner) => writeln!(f, "librechat:  {owner}"),
        None => Ok(()),
    }
}

/// When a held lease ends, by the server's clock.
fn expiry(s: &LeaseStatus, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let held = matches!(
        s.state,
        LeaseState::Running | LeaseState::Following | LeaseState::Expired
    );
    match s.expires_in_secs {
        Some(secs) if held && secs >= 0.0 => writeln!(f, "expires in: {secs:.1}s"),
        Some(secs) if held => writeln!(f, "expired:    {:.1}s ago", -secs),
        _ => Ok(()),
    }
}

/// A live owner's progress; where a run that ended without completing
/// stopped; nothing once completed (the summary says it all).
fn progress(s: &LeaseStatus, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let label = match s.state {
        LeaseState::Running | LeaseState::Following => "progress:  ",
        LeaseState::Completed | LeaseState::NeverRun => return Ok(()),
        _ => "stopped at:",
    };
    let Some(p) = &s.progress else {
        return Ok(());
    };
    let total = (p.total > 0).then(|| format!("/{}", p.total));
    let total = total.unwrap_or_default();
    let eta = p.eta_secs.map_or(String::new(), |s| format!(", ETA {s}s"));
    let (phase, done, rate) = (&p.phase, p.done, p.docs_per_sec);
    writeln!(f, "{label} {phase} {done}{total} ({rate:.0} docs/s{eta})")
}

/// The last failure, and when a retry may start.
fn last_error(s: &LeaseStatus, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Some(error) = &s.error else {
        return Ok(());
    };
    let (attempt, at) = (s.attempt, s.failed_at.as_deref().unwrap_or("-"));
    writeln!(f, "last error: {error} (attempt {attempt}, failed {at})")?;
    match (&s.retry_at, s.retry_in_secs) {
        (Some(at), Some(secs)) if secs > 0.0 => writeln!(f, "retry at:   {at} (in {secs:.1}s)"),
        (Some(at), Some(_)) => writeln!(f, "retry at:   {at} (due)"),
        _ => Ok(()),
    }
}

impl fmt::Display for ModeView {
    /// The mode and why; in interval mode, what would give follow mode.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = self.mode.as_str();
        write!(f, "mode:       {mode} — {}", self.mode_reason)?;
        if let Some(needs) = &self.follow_needs {
            write!(f, "\nfor follow mode: {needs}")?;
        }
        Ok(())
    }
}

impl fmt::Display for CollectionView {
    /// Our counts, LibreChat's `getSyncProgress()`, and how follow mode
    /// learns of the collection's deletes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lc = &self.librechat;
        write!(
            f,
            "{}: {} searchable, {} indexed, {} to index · LibreChat: {} of {} processed, {} pending indexing, {} pending cleanup ({})",
            self.collection.name(),
            self.ours.indexable,
            self.ours.indexed,
            self.ours.unindexed,
            lc.processed,
            lc.searchable,
            lc.pending_indexing,
            lc.pending_cleanup,
            if lc.complete { "complete" } else { "incomplete" }
        )?;
        let deletes = match self.deletes {
            DeleteRegime::PreImages => "by pre-image, within the follow latency",
            DeleteRegime::IdComparison => {
                "no pre-images, by the id-set comparison, within follow.orphan_check_every + one comparison (pre-images: docs/install.md#follow-mode)"
            }
        };
        write!(f, "\n  deletes in follow mode: {deletes}")
    }
}

#[cfg(test)]
mod tests {
    use mongodb::bson::{doc, DateTime};

    use super::*;
    use crate::lease::store::JobRecord;

    fn status_of(record: Option<JobRecord>) -> String {
        let now = DateTime::from_millis(10_000);
        let skew = std::time::Duration::from_secs(1);
        LeaseStatus::from_record("job", record.as_ref(), now, skew).to_string()
    }

    #[test]
    fn our_lease_reads_never_run_expired_or_expiring() {
        assert!(status_of(None).contains("never run"));
        let ours = |lease_end: i64| {
            Some(JobRecord::from_document(&doc! {
                "owner": "a", "epoch": 2_i64, "status": "running",
                "leaseExpiresAt": DateTime::from_millis(lease_end),
                "expiresAt": DateTime::from_millis(lease_end + 1_000),
                "writtenExpiresAt": DateTime::from_millis(lease_end + 1_000),
            }))
        };
        assert!(status_of(ours(8_000)).contains("expired:    2.0s ago"));
        assert!(status_of(ours(13_500)).contains("expires in: 3.5s"));
    }

    #[test]
    fn a_librechat_holder_is_named_plainly() {
        let text = status_of(Some(JobRecord::from_document(&doc! {
            "owner": "3b241101-e2bb-4255-8caf-4136c566a962", "status": "running",
            "expiresAt": DateTime::from_millis(40_000), "epoch": 7_i64,
            "writtenExpiresAt": DateTime::from_millis(9_000),
        })));
        assert!(text.contains("held by a LibreChat replica"), "{text}");
        assert!(text.contains("expires in: 31.0s"), "{text}");
    }

    #[test]
    fn the_mode_reads_with_its_reason() {
        let text = ModeView::follow_off().to_string();
        assert!(
            text.starts_with("mode:       interval — serve.follow is false"),
            "{text}"
        );
        assert!(
            text.contains("\nfor follow mode: serve.follow = true"),
            "{text}"
        );
    }
}
