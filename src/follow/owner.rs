//! The lease owner's job in follow mode (docs/design.md §4.12, §5.12).
//!
//! **Start.** With a resume token saved in the lease and a reconciliation
//! recorded within `serve.interval`, the stream resumes from the token and
//! nothing is reconciled. Otherwise (no token, a token the oplog no longer
//! holds, a stale reconciliation, or a restart after a drop): a starting
//! point is taken from the stream *first*, then the engine reconciles
//! (`reconcile::reconcile`, as `once`), the lease is marked following with
//! that run's summary, and the stream is opened from the point taken before
//! the reconciliation, so every change made while it ran is replayed.
//!
//! **Follow.** Changes are gathered into micro-batches (`batch`) and applied
//! (`apply`); after each applied micro-batch its last change's resume token
//! is saved under the fence, never before. About once per
//! `lease.poll_every` the owner looks for a handover request; at the next
//! safe point (micro-batch applied, token saved) it ends with
//! [`JobEnd::HandOver`].
//! Every `serve.interval` (±10%) it stops applying (the stream waits on the
//! server), reconciles, records the run (`lease.hold_after_completion`) and goes on.
//! Deletes whose Meilisearch id is unknown (no pre-image) are left to the
//! id-set comparison, at once for the first and then at most once per
//! `follow.orphan_check_every`. That a comparison is owed is recorded in the
//! lease (`followOrphanChecks`, fenced, with the MongoDB time of the
//! micro-batch) before the resume token is saved past such a delete, and
//! cleared only by a comparison that started after that time: an owner that
//! resumes from the token or takes over compares at once, so no delete is
//! lost between owners.
//!
//! Expiry writes nothing to the stream: the owner knows when the next
//! document that may be in Meilisearch expires (`expiry`) and sweeps at
//! that moment.
//!
//! A lost lease cancels the guard: the job is dropped at its next await
//! (its reader with it), and every write checks the guard first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::Retryable;
use mongodb::bson::{DateTime, Document};
use tracing::{debug, info, warn};

use super::apply;
use super::batch::MicroBatch;
use super::expiry;
use super::expiry::ExpiryClock;
use super::latency::BatchTimes;
use super::mode::{ModeView, NoChangeStreams};
use super::pending::{OrphanChecks, Tokens};
use super::pipeline::{InFlight, Pipeline};
use super::saved;
use super::status::{FollowState, FollowStatus};
use super::stream::{self, Reader, StreamConfig, StreamError, StreamItem};
use super::{FollowOptions, ReplicaReport};
use crate::job::{self, Reconciler};
use crate::lease::{
    clock, unless_lost, Guard, JobEnd, LeaseHandle, LeaseLost, LeaseWriteError, LeasedJob,
};
use crate::mongo::Collection;
use crate::progress::Progress;
use crate::reconcile::{self, ReconcileError, Run, RunSummary};

/// While nothing is applied, the furthest safe resume token is saved at
/// most this often (it keeps the saved token inside the oplog's window).
const IDLE_TOKEN_SAVE_EVERY: Duration = Duration::from_secs(10);

/// While micro-batches are in flight one after another, the token of the
/// last one settled is saved at most this often (each save is two MongoDB
/// round trips); once the pipeline is empty it is saved at once.
const BUSY_TOKEN_SAVE_EVERY: Duration = Duration::from_secs(1);

/// How follow mode polls a Meilisearch task: from 10 ms, doubling up to
/// 50 ms (the engine's cap is 250 ms). A task's end is seen at most this
/// late; each poll is a cheap read for Meilisearch.
const TASK_POLL_MIN: Duration = Duration::from_millis(10);
const TASK_POLL_MAX: Duration = Duration::from_millis(50);

/// While micro-batches are in flight, the next one is enqueued at least
/// this long after the last ([`Follower::due`]).
const ENQUEUE_SPACING: Duration = Duration::from_millis(50);

/// Everything the owner's job needs.
pub(crate) struct Owner {
    pub(crate) reconciler: Reconciler,
    pub(crate) options: FollowOptions,
    pub(crate) replica: Arc<dyn ReplicaReport>,
    /// The server turned out not to serve change streams: the replica goes
    /// back to interval mode, whether the one reconciliation run instead
    /// completed or failed.
    pub(crate) no_change_streams: bool,
}

impl LeasedJob for Owner {
    type Output = RunSummary;
    type Error = ReconcileError;

    /// The job: runs until the lease is lost, shutdown, a handover
    /// ([`JobEnd::HandOver`]) or a failure; completes only when change
    /// streams turned out not to be served (after one reconciliation, like
    /// interval mode, whose summary is the completion's); then
    /// [`Owner::no_change_streams`] is set, whether that reconciliation
    /// completed or failed.
    async fn run(
        &mut self,
        guard: Guard,
        progress: Progress,
    ) -> Result<JobEnd<RunSummary>, ReconcileError> {
        let lease = guard
            .lease()
            .cloned()
            .ok_or_else(|| ReconcileError::Other("an owner's guard carries its lease".into()))?;
        let r = &self.reconciler;
        let t = Run::new(&r.db, &r.meili, &r.sync, &guard, &progress);
        let mut reconcile_first = false;
        loop {
            match self.begin(&t, &lease, reconcile_first).await? {
                Ended::Unsupported(reconciled) => {
                    self.no_change_streams = true;
                    return reconciled.map(JobEnd::Completed);
                }
                Ended::HandOver(to) => return Ok(JobEnd::HandOver { to }),
                Ended::Restart(reason) => {
                    warn!(%reason, "the change stream must start over: following again after a full reconciliation");
                    reconcile_first = true;
                }
            }
        }
    }
}

/// Keeps the lease after the work (with `summary`, a reconciliation just
/// completed); a write that did not happen is the engine's error.
async fn hold(
    lease: &LeaseHandle,
    guard: &Guard,
    summary: Option<&RunSummary>,
) -> Result<(), ReconcileError> {
    let summary = summary.map(|summary| serde_json::to_value(summary).unwrap_or_default());
    match lease.hold_after_completion(guard, summary.as_ref()).await {
        Ok(()) => Ok(()),
        Err(LeaseWriteError::Lost(lost)) => Err(ReconcileError::LeaseLost(lost)),
        Err(unconfirmed) => Err(ReconcileError::Other(unconfirmed.to_string())),
    }
}

enum Ended {
    /// No change streams here: reconciled once, as interval mode does.
    Unsupported(Result<RunSummary, ReconcileError>),
    HandOver(String),
    /// Follow again from a full reconciliation (why).
    Restart(String),
}

impl Owner {
    fn status(&self) -> &FollowStatus {
        self.replica.follow()
    }

    /// Opens the stream (from the saved token, or from a point taken
    /// before a full reconciliation) and follows it until that ends; `t`:
    /// the engine's servers and options.
    async fn begin(
        &self,
        t: &Run<'_>,
        lease: &LeaseHandle,
        reconcile_first: bool,
    ) -> Result<Ended, ReconcileError> {
        self.status().set_state(FollowState::Reconciling);
        let (db, guard, opts) = (t.db, t.guard, &self.options);
        let pre_images = stream::prepare_pre_images(db, opts.pre_images, guard).await?;
        self.status().deletes(&pre_images);
        let config = StreamConfig {
            pre_images: !pre_images.is_empty(),
            max_await: opts
                .max_wait
                .clamp(Duration::from_millis(50), Duration::from_secs(1)),
            capacity: opts.max_docs.saturating_mul(2),
            rules: self.reconciler.sync.rules.clone(),
        };
        let saved = if reconcile_first {
            None
        } else {
            self.resumable_token(lease).await?
        };
        if let Some(token) = saved {
            match stream::open(db, &token, &config).await {
                Ok(reader) => {
                    hold(lease, guard, None).await?;
                    info!("resuming the change stream from the saved token (the last reconciliation is recent): nothing to reconcile first");
                    return self.follow(t, lease, (reader, config), token).await;
                }
                Err(StreamError::ResumePointLost(why)) => warn!(%why,
                    "the saved resume token can no longer be used (the oplog no longer holds it): reconciling fully before following"),
                Err(StreamError::Unsupported(why)) => return self.unsupported(&why, t).await,
                Err(error) => return Err(error.into()),
            }
        }
        let start = match stream::starting_point(db, &config).await {
            Err(StreamError::Unsupported(why)) => return self.unsupported(&why, t).await,
            start => start?,
        };
        let began = Instant::now();
        let summary = self.reconcile(t).await?;
        hold(lease, guard, Some(&summary)).await?;
        let mut tokens = Tokens::new(Some(start.clone()), None);
        tokens.save(guard, lease).await?;
        match stream::open(db, &start, &config).await {
            Ok(reader) => {
                info!("following the change stream from where it stood before the reconciliation");
                self.follow(t, lease, (reader, config), start).await
            }
            Err(StreamError::ResumePointLost(why)) => Err(ReconcileError::Other(format!(
                "the oplog no longer reaches back to when the reconciliation began ({:.0} s ago): {why}; \
                 the oplog must hold more than a reconciliation's worth of writes",
                began.elapsed().as_secs_f64()
            ))),
            Err(error) => Err(error.into()),
        }
    }

    /// The saved resume token, when the last reconciliation (ours, any
    /// replica's) is within `serve.interval`: then the stream may resume
    /// from it without reconciling first.
    async fn resumable_token(
        &self,
        lease: &LeaseHandle,
    ) -> Result<Option<Document>, ReconcileError> {
        let record = unless_lost(lease.read().await)?.map_err(ReconcileError::MongoUnreachable)?;
        let now =
            unless_lost(lease.server_now().await)?.map_err(ReconcileError::MongoUnreachable)?;
        let Some((Some(token), completed_at)) =
            record.map(|r| (saved::token(&r.document), r.completed_at))
        else {
            return Ok(None);
        };
        if completed_at.is_none_or(|at| at <= clock::earlier(now, self.options.interval)) {
            info!("a resume token is saved, but the last reconciliation is older than serve.interval: reconciling fully before following");
            return Ok(None);
        }
        Ok(Some(token))
    }

    async fn unsupported(
        &self,
        why: &NoChangeStreams,
        t: &Run<'_>,
    ) -> Result<Ended, ReconcileError> {
        self.status().set_state(FollowState::Unsupported);
        self.replica
            .enter_mode(ModeView::no_change_streams(why), self.options.interval);
        Ok(Ended::Unsupported(self.reconcile(t).await))
    }

    /// One reconciliation by the engine, recorded like a run of `run`.
    async fn reconcile(&self, t: &Run<'_>) -> Result<RunSummary, ReconcileError> {
        self.replica.reconciling(true);
        let result = reconcile::reconcile(t.db, t.meili, t.opts, t.guard, t.progress).await;
        self.replica.reconciling(false);
        let summary = result?;
        let outcome = job::record_completed(&summary);
        crate::between_runs::update_backlog(&self.reconciler).await;
        self.replica
            .finished(outcome, self.options.interval.as_secs());
        Ok(summary)
    }

    async fn follow(
        &self,
        t: &Run<'_>,
        lease: &LeaseHandle,
        (reader, config): (Reader, StreamConfig),
        saved: Document,
    ) -> Result<Ended, ReconcileError> {
        let (opts, guard) = (&self.options, t.guard);
        let meili = t
            .meili
            .clone()
            .with_task_polling(TASK_POLL_MIN, TASK_POLL_MAX);
        let mut f = Follower {
            owner: self,
            engine: t,
            // The pipeline's client polls tasks as follow mode does.
            target: Run::new(t.db, &meili, t.opts, guard, t.progress),
            lease,
            reader,
            config,
            batch: MicroBatch::default(),
            pipeline: Pipeline::new(meili.clone(), guard.clone()),
            tokens: Tokens::new(Some(saved.clone()), Some(saved)),
            orphans: OrphanChecks::every(opts.orphan_check_every),
            unrecorded: Vec::new(),
            expiry: ExpiryClock::default(),
        };
        // What following starts from (nothing gathered or in flight, the
        // saved resume token): expired documents swept, and the
        // comparisons a previous owner owed due at once.
        f.sweep_expired().await?;
        f.following();
        f.owed_from_before().await?;
        let mut next_run = Instant::now() + crate::between_runs::jittered(opts.interval);
        let mut next_handover_check = Instant::now() + opts.poll_every;
        loop {
            let wake = f.wake(next_handover_check.min(next_run));
            tokio::select! {
                biased;
                _ = guard.cancelled() => return Err(guard.check().err().unwrap_or(LeaseLost::ShuttingDown).into()),
                // The oldest micro-batch's tasks ended: settle it (nothing
                // else is prepared or enqueued meanwhile). What is gathered
                // is enqueued first, as if it had come due a moment
                // earlier: Meilisearch indexes it while the settling's
                // MongoDB writes run, instead of idling through them.
                _ = f.pipeline.head_ended() => {
                    if !f.batch.is_empty() && f.pipeline.has_room() {
                        f.flush().await?;
                    }
                    f.settle_ended().await?;
                }
                item = f.reader.recv() => {
                    if let Some(ended) = f.on_stream_item(item).await? {
                        return Ok(ended);
                    }
                }
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
            let now = Instant::now();
            f.flush_when_due(now).await?;
            if now >= next_handover_check {
                next_handover_check = now + opts.poll_every;
                if let Some(to) = f.handover_asked().await? {
                    return Ok(Ended::HandOver(to));
                }
            }
            f.sweeps_due(now).await?;
            if now >= next_run {
                f.periodic_run().await?;
                next_run = Instant::now() + crate::between_runs::jittered(opts.interval);
            }
        }
    }
}

/// One stream followed: what its micro-batches are applied with, and what
/// is read but not yet applied or saved.
struct Follower<'a> {
    owner: &'a Owner,
    /// What a sweep, a comparison or a reconciliation is applied with: the
    /// engine's servers, options and Meilisearch client.
    engine: &'a Run<'a>,
    /// What micro-batches are applied with.
    target: Run<'a>,
    lease: &'a LeaseHandle,
    reader: Reader,
    config: StreamConfig,
    /// The micro-batch being gathered.
    batch: MicroBatch,
    /// The micro-batches enqueued and not yet settled.
    pipeline: Pipeline,
    tokens: Tokens,
    /// The id-set comparisons that deletes without a Meilisearch id asked for.
    orphans: OrphanChecks,
    /// Id-set comparisons owed (a delete without a pre-image applied at
    /// that MongoDB time) and not yet recorded in the lease: the resume
    /// token is not saved past them until they are.
    unrecorded: Vec<(Collection, DateTime)>,
    /// When the next document expires (a sweep is due then).
    expiry: ExpiryClock,
}

impl Follower<'_> {
    /// Back to following: the state `/status` shows, the run's phase.
    fn following(&self) {
        self.owner.status().set_state(FollowState::Following);
        self.target.progress.phase("follow", 0);
    }

    /// Enqueues the gathered micro-batch when it is due (`now`), or holds it
    /// while the pipeline has no room.
    async fn flush_when_due(&mut self, now: Instant) -> Result<(), ReconcileError> {
        if self.due().is_some_and(|due| now >= due) {
            if self.pipeline.has_room() {
                self.flush().await?;
            } else {
                self.batch.hold();
            }
        }
        Ok(())
    }

    /// The id-set comparison and the expiry sweep, each when due (`now`),
    /// after the pipeline is drained.
    async fn sweeps_due(&mut self, now: Instant) -> Result<(), ReconcileError> {
        if self.orphans.due().is_some_and(|due| now >= due) {
            self.drain().await?;
            self.repair_orphans().await?;
        }
        if self.expiry.due().is_some_and(|due| now >= due) {
            self.drain().await?;
            self.sweep_expired().await?;
        }
        Ok(())
    }

    /// Comparisons a previous owner (or this one, before a restart) owed:
    /// its deletes are behind the token this stream resumed from, so they
    /// are due at once.
    async fn owed_from_before(&mut self) -> Result<(), ReconcileError> {
        let owed = match unless_lost(saved::orphan_checks_owed(self.lease).await)? {
            Ok(names) => Collection::ALL
                .into_iter()
                .filter(|c| names.iter().any(|n| n == c.name()))
                .collect(),
            Err(error) => {
                warn!(%error, "could not read which id-set comparisons are owed: comparing both collections");
                Collection::ALL.to_vec()
            }
        };
        if !owed.is_empty() {
            info!(collections = ?owed.iter().map(|c| c.name()).collect::<Vec<_>>(),
                "an id-set comparison is owed for deletes without a pre-image applied before this stream's resume point: comparing at once");
            self.orphans.owed(&owed);
        }
        Ok(())
    }

    /// What the stream's reader gave (`None`: it stopped): gathered,
    /// flushed, or the stream reopened; `Some` when following must end.
    async fn on_stream_item(
        &mut self,
        item: Option<StreamItem>,
    ) -> Result<Option<Ended>, ReconcileError> {
        match item {
            Some(StreamItem::Change(change)) => {
                self.owner.status().behind();
                self.pipeline.behind();
                self.batch.push(*change);
                if self.batch.len() >= self.owner.options.max_docs {
                    self.flush().await?;
                }
            }
            // The server had nothing more when the reader asked, but
            // the reader has read on since (changes came while the
            // owner was busy): not the end of a backlog. Keep
            // gathering, so that a backlog is applied in a few
            // large micro-batches rather than one per `getMore` (each
            // costs a fixed handful of round trips).
            Some(StreamItem::CaughtUp(_)) if self.reader.has_queued() && !self.batch.is_empty() => {
            }
            Some(StreamItem::CaughtUp(token)) => {
                // The token is safe once what is gathered and what
                // is in flight are applied: it goes with the
                // gathered changes (due now: `Follower::due`), or,
                // with nothing gathered, behind what is in flight.
                if let Some(token) = token {
                    self.batch.caught_up(token);
                }
                if self.batch.is_empty() {
                    self.flush().await?;
                }
                if self.pipeline.is_empty() && self.batch.is_empty() {
                    self.owner.status().caught_up();
                    if self.tokens.saved_at.elapsed() >= IDLE_TOKEN_SAVE_EVERY {
                        self.save_token().await?;
                    }
                }
            }
            Some(
                StreamItem::Restart(why) | StreamItem::Failed(StreamError::ResumePointLost(why)),
            ) => return Ok(Some(Ended::Restart(why))),
            Some(StreamItem::Failed(StreamError::Mongo(error))) => {
                // Everything read before the failure is complete: apply it,
                // then reopen from there.
                warn!(%error, "the change stream failed; reopening it after the last applied change");
                self.drain().await?;
                return self.reopen().await;
            }
            Some(StreamItem::Failed(error)) => return Err(error.into()),
            None => {
                let stopped = "the change stream's reader stopped";
                return Err(ReconcileError::Other(stopped.into()));
            }
        }
        Ok(None)
    }

    /// Whether another replica asked for the lease (`Some`: who); if one
    /// did, the pipeline is drained first, so the handover is at a safe point.
    async fn handover_asked(&mut self) -> Result<Option<String>, ReconcileError> {
        let to = unless_lost(self.lease.handover_requested_by().await)?.unwrap_or_else(|error| {
            warn!(%error, "could not look for a handover request");
            None
        });
        if let Some(to) = &to {
            self.owner.status().set_state(FollowState::HandingOver);
            info!(%to, "another replica asked for the lease: handing it over after the micro-batches in flight");
            self.drain().await?;
        }
        Ok(to)
    }

    /// The periodic reconciliation: the pipeline drained, changes wait on
    /// the server meanwhile; recorded in the lease as a completion.
    async fn periodic_run(&mut self) -> Result<(), ReconcileError> {
        self.drain().await?;
        self.owner.status().set_state(FollowState::Reconciling);
        info!("periodic reconciliation: changes wait on the server meanwhile");
        let summary = serde_json::to_value(self.owner.reconcile(self.engine).await?);
        let summary = summary.unwrap_or_default();
        let recorded = self
            .lease
            .hold_after_completion(self.engine.guard, Some(&summary));
        if let Err(error) = unless_lost(recorded.await)? {
            warn!(%error, "could not record the periodic reconciliation in the lease")
        }
        self.plan_expiry().await?;
        self.following();
        Ok(())
    }

    /// Reopens the stream after the last applied change, retrying a
    /// transient failure a few times ([`crate::retry::stream_reopen`]);
    /// following starts over when that point is no longer in the oplog.
    async fn reopen(&mut self) -> Result<Option<Ended>, ReconcileError> {
        let token = self.tokens.safe.clone().ok_or_else(|| {
            ReconcileError::Other("following always has a point to resume from".into())
        })?;
        let (db, config, guard) = (self.target.db, &self.config, self.target.guard);
        let reopen = (|| stream::open(db, &token, config))
            .retry(crate::retry::stream_reopen())
            .when(|error| !matches!(error, StreamError::ResumePointLost(_)))
            .notify(|error, delay| warn!(%error, retry_in = ?delay, "could not reopen the change stream"));
        let reopened = tokio::select! {
            _ = guard.cancelled() => return Err(guard.check().err().unwrap_or(LeaseLost::ShuttingDown).into()),
            reopened = reopen => reopened,
        };
        match reopened {
            Ok(reader) => self.reader = reader,
            Err(StreamError::ResumePointLost(why)) => {
                let lost = "the change stream cannot resume where it failed";
                warn!(%why, "{lost}");
                return Ok(Some(Ended::Restart(lost.into())));
            }
            Err(error) => return Err(error.into()),
        }
        Ok(None)
    }

    /// Sweeps what has expired out of Meilisearch, then asks when the next
    /// document expires.
    async fn sweep_expired(&mut self) -> Result<(), ReconcileError> {
        let removed = expiry::sweep(self.engine).await?;
        if removed > 0 {
            let by_op = std::collections::BTreeMap::from([("expired", removed)]);
            self.owner.status().applied(&by_op, None);
        }
        self.plan_expiry().await
    }

    /// Asks when the next document expires.
    async fn plan_expiry(&mut self) -> Result<(), ReconcileError> {
        self.expiry.plan(self.target.db).await?;
        self.owner.status().next_expiry(self.expiry.next());
        Ok(())
    }

    /// Takes the gathered micro-batch and enqueues its Meilisearch writes
    /// (`pipeline`): waits for room first, settling the oldest micro-batch
    /// in flight while the pipeline is full. A batch that holds only a
    /// resume token (acknowledgement events, a caught-up stream) hands it
    /// to the pipeline, behind whatever is in flight.
    async fn flush(&mut self) -> Result<(), ReconcileError> {
        if self.batch.is_empty() {
            let drained = self.batch.drain();
            if let Some(safe) = drained
                .token
                .and_then(|token| self.pipeline.token_after(token, drained.caught_up))
            {
                self.tokens.safe = Some(safe);
            }
            return Ok(());
        }
        while !self.pipeline.has_room() {
            self.batch.hold();
            self.settle_ended().await?;
        }
        let drained = self.batch.drain();
        let changes: Vec<_> = drained.changes.into_values().collect();
        let drained_at = Instant::now();
        let docs = changes.len();
        let expiries = expiry::expiries(&changes);
        let mut prepared = apply::prepare(&self.target, changes).await?;
        let now = prepared.now;
        self.owner.status().server_time(now);
        self.expiry.consider(expiries, now);
        self.owner.status().next_expiry(self.expiry.next());
        self.orphans.note(&prepared.unresolved);
        self.unrecorded
            .extend(prepared.unresolved.iter().map(|c| (*c, now)));
        let writing = Instant::now();
        let enqueued = prepared.enqueue(&self.target).await?;
        let depth = self.pipeline.len() + 1;
        debug!(
            docs,
            depth,
            prepare_ms = (writing - drained_at).as_millis() as u64,
            enqueue_ms = writing.elapsed().as_millis() as u64,
            "micro-batch enqueued"
        );
        self.pipeline.push(InFlight {
            enqueued,
            token: drained.token,
            by_op: prepared.by_op,
            newest: drained.newest,
            caught_up: drained.caught_up,
            written: prepared.written,
            times: BatchTimes {
                held: drained.held,
                drained: drained_at,
                writing,
                enqueued: Instant::now(),
                server_offset_ms: self.owner.status().server_offset_ms(),
                depth,
            },
        });
        Ok(())
    }

    /// Settles the oldest micro-batch in flight (waiting for its tasks if
    /// they have not ended) and those whose tasks ended with it, then makes
    /// the newest one's token the safe point and saves it.
    async fn settle_ended(&mut self) -> Result<(), ReconcileError> {
        let status = self.owner.status();
        let Some(settled) = self
            .pipeline
            .settle_ended(&self.target, self.owner.options.max_docs)
            .await?
        else {
            return Ok(());
        };
        status.applied(&settled.by_op, settled.newest);
        if let Some(token) = settled.token {
            self.tokens.safe = Some(token);
        }
        if settled.caught_up && self.batch.is_empty() {
            status.caught_up();
        }
        // While micro-batches follow in flight, the token is saved at most
        // every `BUSY_TOKEN_SAVE_EVERY` (a later save covers this one); a
        // token saved late costs replays, never losses.
        if self.pipeline.is_empty() || self.tokens.saved_at.elapsed() >= BUSY_TOKEN_SAVE_EVERY {
            self.save_token().await?;
        }
        Ok(())
    }

    /// Saves the safe resume token — only once every comparison owed for
    /// the deletes behind it is recorded in the lease, so that an owner
    /// resuming from the token, or taking over, still makes it — timing it.
    async fn save_token(&mut self) -> Result<(), ReconcileError> {
        let started = Instant::now();
        if self.record_owed().await? {
            self.tokens.save(self.target.guard, self.lease).await?;
        }
        crate::metrics::follow_batch_stage("token_save", started.elapsed());
        Ok(())
    }

    /// Records the owed comparisons not yet in the lease. `false`: some
    /// could not be (not confirmed); they are tried again with the next save.
    async fn record_owed(&mut self) -> Result<bool, LeaseLost> {
        while let Some(&(collection, since)) = self.unrecorded.first() {
            let owed =
                saved::owe_orphan_check(self.lease, self.target.guard, collection.name(), since);
            if let Err(error) = unless_lost(owed.await)? {
                warn!(%error, collection = collection.name(),
                    "could not record an owed id-set comparison in the lease; the resume token waits until it is");
                return Ok(false);
            }
            self.unrecorded.remove(0);
        }
        Ok(true)
    }

    /// When the follow loop must look again, at `then` at the latest: a
    /// micro-batch, a comparison or a sweep due. A due micro-batch waits
    /// while the pipeline is full: settling the oldest one makes room.
    fn wake(&self, then: Instant) -> Instant {
        let room = self.pipeline.has_room();
        [
            self.due().filter(|_| room),
            self.orphans.due(),
            self.expiry.due(),
        ]
        .into_iter()
        .flatten()
        .fold(then, Instant::min)
    }

    /// When the gathered changes are to be enqueued (`None`: nothing
    /// gathered).
    ///
    /// - When the reader has nothing more and nothing is in flight,
    ///   at once: Meilisearch is idle, every moment waited is latency.
    /// - When the reader has nothing more and micro-batches are in flight,
    ///   [`ENQUEUE_SPACING`] after the last one was enqueued: Meilisearch
    ///   merges the tasks it finds waiting, so what is enqueued while it
    ///   indexes is indexed together with the next batch it starts, and a
    ///   short spacing saves the fixed MongoDB round trips of many tiny
    ///   micro-batches (a change waits at most the spacing for it, and
    ///   misses the next indexing batch only when that one starts within
    ///   the spacing).
    /// - `follow.max_wait` after its first change, in any case (a
    ///   continuous stream); at once once it was held for room.
    fn due(&self) -> Option<Instant> {
        if self.batch.is_empty() {
            return None;
        }
        let ready = (!self.reader.has_queued()).then(|| match self.pipeline.last_enqueued() {
            Some(last) if !self.pipeline.is_empty() => last + ENQUEUE_SPACING,
            _ => Instant::now(),
        });
        [self.batch.due(self.owner.options.max_wait), ready]
            .into_iter()
            .flatten()
            .min()
    }

    /// Empties the pipeline: enqueues what is gathered, settles everything
    /// in flight, and saves the token — before anything else writes
    /// (a handover, a reconciliation, a comparison, a sweep, a reopened
    /// stream).
    async fn drain(&mut self) -> Result<(), ReconcileError> {
        self.flush().await?;
        while !self.pipeline.is_empty() {
            self.settle_ended().await?;
        }
        self.save_token().await
    }

    /// The id-set comparison of each collection that had deletes without a
    /// Meilisearch id; each comparison that completes clears, in the lease,
    /// what was owed up to when it started.
    async fn repair_orphans(&mut self) -> Result<(), ReconcileError> {
        let (guard, lease) = (self.target.guard, self.lease);
        for collection in self.orphans.take() {
            let ctx = self.engine.ctx(collection, self.engine.progress);
            let started =
                unless_lost(lease.server_now().await)?.map_err(ReconcileError::MongoUnreachable)?;
            let (deleted, flags_cleared) = reconcile::apply::repair_id_drift(&ctx).await?;
            info!(index = %ctx.uid, deleted, flags_cleared,
                "deletes without a pre-image: compared the index's ids with the collection's");
            crate::metrics::documents(&ctx.uid, 0, deleted, 0);
            // Recorded debts first: a clear must not overtake the record of
            // a delete applied after this comparison began.
            self.record_owed().await?;
            let cleared = saved::orphan_check_done(lease, guard, collection.name(), started);
            if let Err(error) = unless_lost(cleared.await)? {
                warn!(%error, collection = collection.name(),
                    "could not clear the owed id-set comparison in the lease (the next owner compares once more)")
            }
        }
        self.target.progress.phase("follow", 0);
        Ok(())
    }
}
