//! The worker: N runners that claim runnable jobs from the store, run each until it ends or
//! parks, and save it.
//!
//! Invariant: a runner holds a job only between its claim and its save, under a lease it keeps
//! renewing; a parked job is a row and costs no runner, task or memory. A runner that dies
//! (crash, SIGKILL) loses nothing: the job's last save is its durable point, its lease expires,
//! and any runner takes it up again from there; the events of the lost run were never saved, so
//! the log holds each step once. A job's end releases its waiting parent in the same
//! transaction (see `store`).

mod metrics;
mod outage;
mod spawner;
mod traced;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::Instrument;

pub use spawner::StoreSpawner;

use crate::engine::{
    CancelFlag, Engine, JobEvent, JobState, JobStatus, Observer, PieceRunResult, end_outside,
};
use crate::store::{ClaimedJob, Handoff, JobChange, JobStore, StoreError, TimedEvent};
use crate::telemetry;

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Jobs run at once.
    pub runners: usize,
    /// How long a claim lasts without renewal; renewed every third of it.
    pub lease: Duration,
    /// How often an idle runner looks for work when nothing woke it.
    pub idle_poll: Duration,
    /// Names this worker's runners in the store's leases.
    pub name: String,
    /// How long a wait lasts before the job is resumed with `expired`; `None`: for ever.
    pub wait_expiry: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            runners: 4,
            lease: Duration::from_secs(30),
            idle_poll: Duration::from_millis(100),
            name: format!("worker-{}", std::process::id()),
            wait_expiry: None,
        }
    }
}

/// What a worker did, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub runs: u64,
    pub lost_leases: u64,
    /// Why a worker run `until_idle` stopped before its jobs were done: the store failed
    /// with no run saved, for longer than a lease.
    pub gave_up: Option<String>,
}

pub struct Worker {
    store: Arc<dyn JobStore>,
    engine: Arc<Engine>,
    config: WorkerConfig,
    wake: Arc<Notify>,
    /// How often an idle runner looks for work unwoken: `idle_poll`, or at least
    /// [`HEARD_POLL`] where the store tells of every process's changes.
    fallback_poll: Duration,
    observer: Option<Arc<dyn Observer>>,
    stats: Mutex<WorkerStats>,
    /// Whether the store fails, as every runner of this worker sees it.
    outage: outage::Outage,
    versions: Option<Arc<dyn Versions>>,
    busy: metrics::Busy,
}

/// Where a worker finds a plugin version that a claimed job's parked call is pinned to and its
/// catalog lacks: another node parked the call, on a version this one never loaded.
#[async_trait::async_trait]
pub trait Versions: Send + Sync {
    /// Makes version `content_hash` of plugin `name` resumable here, or says why it cannot be.
    async fn restore(&self, name: &str, content_hash: &str) -> Result<(), String>;
}

/// How often idle runners look for work when the store tells them of other processes' changes:
/// a notification lost in between delays a job by at most this.
pub const HEARD_POLL: Duration = Duration::from_secs(1);

impl Worker {
    /// `wake` is notified by whoever creates or answers jobs in this process (the spawner, the
    /// API), so runners start at once instead of at their next poll.
    pub fn new(
        store: Arc<dyn JobStore>,
        engine: Arc<Engine>,
        config: WorkerConfig,
        wake: Arc<Notify>,
    ) -> Self {
        let fallback_poll = match store.changes() {
            Some(_) => config.idle_poll.max(HEARD_POLL),
            None => config.idle_poll,
        };
        Self {
            store,
            engine,
            config,
            wake,
            fallback_poll,
            observer: None,
            stats: Mutex::new(WorkerStats::default()),
            outage: outage::Outage::default(),
            versions: None,
            busy: metrics::Busy::default(),
        }
    }

    /// Takes a version missing from the catalog from `versions` before it resumes a call pinned
    /// to it.
    pub fn with_versions(mut self, versions: Arc<dyn Versions>) -> Self {
        self.versions = Some(versions);
        self
    }

    /// Also shows every event to `observer` as it happens (a printer, a live stream).
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn stats(&self) -> WorkerStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs the runners until `stop` is cancelled; with `until_idle`, also stops once no job is
    /// pending or running anywhere (waiting jobs wait for someone else), or once the store has
    /// failed, with no run saved, for longer than a lease ([`WorkerStats::gave_up`]): a batch
    /// run on a full disk ends with the reason instead of waiting for space forever.
    pub async fn run(self: &Arc<Self>, stop: CancelFlag, until_idle: bool) -> WorkerStats {
        let heard = self
            .store
            .changes()
            .map(|changes| tokio::spawn(wake_on_runnable(changes, self.wake.clone())));
        let mut runners = Vec::new();
        for index in 0..self.config.runners.max(1) {
            let worker = self.clone();
            let stop = stop.clone();
            let owner = format!("{}-r{index}", self.config.name);
            runners.push(tokio::spawn(async move {
                worker.runner(owner, stop, until_idle).await
            }));
        }
        for runner in runners {
            if let Err(error) = runner.await {
                tracing::error!("a runner task failed: {error}");
            }
        }
        if let Some(heard) = heard {
            heard.abort();
        }
        self.stats()
    }

    async fn runner(self: Arc<Self>, owner: String, stop: CancelFlag, until_idle: bool) {
        // A job claimed in the commit that saved the previous one. It runs even if `stop` came
        // meanwhile, as a job claimed just before a stop does.
        let mut next = None;
        loop {
            if let Some(claimed) = next.take() {
                next = self.run_claimed(&owner, claimed, &stop).await;
                continue;
            }
            if stop.is_cancelled() {
                return;
            }
            if until_idle && self.give_up_on_the_store(&stop) {
                return;
            }
            let claiming = Instant::now();
            let claimed = self
                .store
                .claim_next_async(&owner, self.config.lease.as_millis() as i64)
                .await;
            if claimed.is_ok() {
                telemetry::claimed(claiming.elapsed());
            }
            if let Some(pause) = self.outage.check("cannot claim a job", &claimed) {
                tokio::time::sleep(pause).await;
                continue;
            }
            match claimed {
                Ok(claimed @ Some(_)) => next = claimed,
                Ok(None) => {
                    let expired = self.store.expire_waits().await;
                    if let Some(pause) = self.outage.check("cannot expire waits", &expired) {
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    self.outage.nothing_to_claim();
                    if let Ok(expired @ 1..) = expired {
                        telemetry::waits_expired(expired);
                        continue;
                    }
                    if until_idle && self.store.active_jobs().is_ok_and(|active| active == 0) {
                        // Wake the other runners so they see it too.
                        self.wake.notify_waiters();
                        return;
                    }
                    self.idle().await;
                }
                Err(error) => {
                    tracing::error!("cannot claim a job: {error}");
                    self.idle().await;
                }
            }
        }
    }

    /// `saved`, or, when it failed because the store did (a database restarting, a full disk),
    /// the save tried again with growing pauses for half a lease: a short outage then costs no
    /// work. A retry cannot save twice: a save that did commit, but whose answer was lost, took
    /// the job out of this runner's hands (it ended, parked or was let go), so its retry is
    /// refused; a job saved still running is not retried, as its lease would let it through.
    /// Past half a lease the job is left to whichever runner takes it up from its last save.
    async fn save_through_outage(
        &self,
        ran: &Ran,
        owner: &str,
        mut saved: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if ran.state.status == JobStatus::Running {
            return saved;
        }
        let give_up = tokio::time::Instant::now() + self.config.lease / 2;
        while let Some(pause) = self.outage.check_save(&saved) {
            if tokio::time::Instant::now() + pause >= give_up {
                break;
            }
            tokio::time::sleep(pause).await;
            saved = self.store.save_async(&ran.state, &ran.events, owner).await;
        }
        saved
    }

    /// Whether the store fails still and has failed, with no progress, for longer than a
    /// lease; if so, records it as the reason the worker stops, and stops every runner.
    fn give_up_on_the_store(&self, stop: &CancelFlag) -> bool {
        let Some((failing, last_failed, said)) = self.outage.failing() else {
            return false;
        };
        // A failure older than the longest pause is over, whatever came since (a refusal).
        if failing < self.config.lease || last_failed > outage::LONGEST_PAUSE * 2 {
            return false;
        }
        stop.cancel();
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.gave_up.get_or_insert_with(|| {
            format!(
                "the store has failed for {:.1} s, longer than a lease ({} ms): {said}",
                failing.as_secs_f64(),
                self.config.lease.as_millis()
            )
        });
        true
    }

    async fn idle(&self) {
        tokio::select! {
            () = self.wake.notified() => {}
            () = tokio::time::sleep(self.fallback_poll) => {}
        }
    }

    /// Runs and saves `claimed`; unless the worker is stopping, claims the next job in the
    /// same commit and returns it.
    async fn run_claimed(
        &self,
        owner: &str,
        claimed: ClaimedJob,
        stop: &CancelFlag,
    ) -> Option<ClaimedJob> {
        if let (Some(versions), Some(pin)) = (&self.versions, claimed.state.parked_plugin())
            && self.engine.catalog().pinned(&pin.content_hash).is_none()
            && let Err(error) = versions.restore(&pin.name, &pin.content_hash).await
        {
            tracing::warn!(job = %claimed.state.id, "{error}");
        }
        let _busy = self.busy.start(self.config.runners.max(1));
        let run = JobRun {
            store: self.store.clone(),
            engine: &self.engine,
            owner,
            lease: self.config.lease,
            wait_expiry: self.config.wait_expiry,
        };
        let ran = run
            .execute(claimed, self.observer.clone(), CancelFlag::default())
            .await;
        let (done, next) = if ran.stopped_for_its_lease() {
            let lost = ran.lease_lost_by(owner);
            (ran.saved(lost), None)
        } else if stop.is_cancelled() {
            let saved = self.store.save_async(&ran.state, &ran.events, owner).await;
            let saved = self.save_through_outage(&ran, owner, saved).await;
            (ran.saved(saved), None)
        } else {
            let lease_ms = self.config.lease.as_millis() as i64;
            let handoff = self
                .store
                .save_and_claim_next(&ran.state, &ran.events, owner, lease_ms)
                .await
                .unwrap_or_else(|error| Handoff {
                    saved: Err(error.clone()),
                    next: Err(error),
                });
            let next = handoff.next.unwrap_or_else(|error| {
                let failed: Result<(), _> = Err(error);
                if self.outage.check("cannot claim a job", &failed).is_none()
                    && let Err(error) = failed
                {
                    tracing::error!("cannot claim a job: {error}");
                }
                None
            });
            let saved = self.save_through_outage(&ran, owner, handoff.saved).await;
            (ran.saved(saved), next)
        };
        if done.saved.is_ok() {
            metrics::count_saved_run(done.resumed.as_ref(), &done.state, done.result.as_ref());
            self.outage.progressed();
            if let Some(observer) = &self.observer {
                observer.on_saved(&done.state.id, done.state.status);
            }
        }
        match &done.saved {
            Ok(()) if done.state.status.is_final() && done.state.parent.is_some() => {
                // Its parent may have become runnable.
                self.wake.notify_one();
            }
            Ok(()) => {}
            Err(StoreError::LeaseLost { .. }) => {
                tracing::warn!(
                    job = %done.state.id,
                    "lost the lease mid-run: the job is another runner's, or is taken up again \
                     from its last save once the lease ends"
                );
            }
            Err(StoreError::Database { .. }) => tracing::warn!(
                job = %done.state.id,
                "the store failed to save this run; the job is taken up again from its last save \
                 once its lease ends"
            ),
            Err(error) => tracing::error!(job = %done.state.id, "cannot save the job: {error}"),
        }
        let mut total = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        total.runs += 1;
        total.lost_leases += u64::from(done.lease_lost);
        if done.lease_lost {
            telemetry::lease_lost();
        }
        next
    }
}

/// One claimed job, run to its next stop and saved: what every runner does, and what
/// `maestro run` and `maestro jobs answer` do in the foreground.
pub struct JobRun<'a> {
    pub store: Arc<dyn JobStore>,
    pub engine: &'a Engine,
    pub owner: &'a str,
    pub lease: Duration,
    pub wait_expiry: Option<Duration>,
}

/// How a [`JobRun`] went.
pub struct RunDone {
    /// The job as saved (or as it stood when the save failed).
    pub state: JobState,
    /// How the run ended; `None` when the engine refused the job, which is then saved as
    /// `error` so that nobody claims it again.
    pub result: Option<PieceRunResult>,
    pub saved: Result<(), StoreError>,
    /// The lease went to another runner during the run (the save is then refused).
    pub lease_lost: bool,
    /// The park the run resumed from.
    resumed: Option<metrics::Resumed>,
}

impl JobRun<'_> {
    /// Runs `claimed` under a lease kept alive every third of its length, shows each event to
    /// `observer`, and saves the job with its events. `cancel` stops the run at its next step;
    /// a cancel request in the store or a lost lease does too.
    pub async fn finish(
        &self,
        claimed: ClaimedJob,
        observer: Option<Arc<dyn Observer>>,
        cancel: CancelFlag,
    ) -> RunDone {
        let ran = self.execute(claimed, observer, cancel).await;
        let saved = if ran.stopped_for_its_lease() {
            ran.lease_lost_by(self.owner)
        } else {
            self.store
                .save_async(&ran.state, &ran.events, self.owner)
                .await
        };
        ran.saved(saved)
    }

    /// [`JobRun::finish`] up to the save.
    async fn execute(
        &self,
        claimed: ClaimedJob,
        observer: Option<Arc<dyn Observer>>,
        cancel: CancelFlag,
    ) -> Ran {
        let ClaimedJob { mut state, resume } = claimed;
        if state.session.is_none() {
            // Stored before sessions were kept with jobs: its session is the fold of its log.
            match self.store.events(&state.id, 0) {
                Ok(log) => {
                    let log: Vec<JobEvent> = log.into_iter().map(|stored| stored.event).collect();
                    match crate::engine::live_session(&state.id, &log) {
                        Ok(session) => state.session = Some(session),
                        Err(error) => tracing::error!(job = %state.id, "{error}"),
                    }
                }
                Err(error) => {
                    tracing::error!(job = %state.id, "cannot read the job's log: {error}")
                }
            }
        }
        let now = now_ms();
        traced::begin(&mut state, now);
        let resumed = metrics::Resumed::of(&state, resume.as_ref(), now);
        let span = traced::run_span(&state, resume.is_some());
        let lease_lost = CancelFlag::default();
        let keeper = self.keep_lease(&state.id, cancel.clone(), lease_lost.clone());
        let recorder = Recorder {
            events: Mutex::new(Vec::new()),
            forward: observer,
        };
        let run = self
            .engine
            .run(&mut state, resume, &recorder, &cancel)
            .instrument(span.clone())
            .await;
        span.record("maestro.status", state.status.as_str());
        keeper.abort();
        let mut events = recorder.take();
        let result = match run {
            Ok(result) => Some(result),
            Err(refused) => {
                tracing::error!(job = %state.id, "the engine refused the job: {refused}");
                let finished = end_outside(&mut state, JobStatus::Error, &refused.to_string());
                events.push(TimedEvent {
                    event: finished,
                    at_ms: Some(now_ms()),
                });
                None
            }
        };
        state.wait_expires_at_ms = expiry_for(&state, self.wait_expiry);
        state.parked_at_ms = state.status.is_waiting().then(now_ms);
        Ran {
            state,
            events,
            result,
            lease_lost,
            resumed,
        }
    }

    fn keep_lease(
        &self,
        job: &str,
        cancel: CancelFlag,
        lease_lost: CancelFlag,
    ) -> tokio::task::JoinHandle<()> {
        let (store, job, owner) = (self.store.clone(), job.to_owned(), self.owner.to_owned());
        let lease = self.lease;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                match store.renew(&job, &owner, lease.as_millis() as i64).await {
                    Ok(None) => {}
                    Ok(Some(reason)) => cancel.cancel_because(&reason),
                    Err(error) => {
                        tracing::warn!(%job, "cannot renew the lease: {error}");
                        lease_lost.cancel();
                        cancel.cancel();
                        return;
                    }
                }
            }
        })
    }
}

/// A run that ended or parked, not saved yet.
struct Ran {
    state: JobState,
    events: Vec<TimedEvent>,
    result: Option<PieceRunResult>,
    lease_lost: CancelFlag,
    /// The park this run resumed from.
    resumed: Option<metrics::Resumed>,
}

impl Ran {
    /// Whether the run was stopped because its lease could not be renewed. Its `cancelled`
    /// is then no one's decision and must not be saved: the job is taken up again from its
    /// last save once the lease ends, as a crashed runner's is. A run that ended or parked
    /// on its own before it saw the stop is saved as usual (the store checks the lease).
    fn stopped_for_its_lease(&self) -> bool {
        self.lease_lost.is_cancelled() && self.state.status == JobStatus::Cancelled
    }

    fn lease_lost_by(&self, owner: &str) -> Result<(), StoreError> {
        Err(StoreError::LeaseLost {
            job: self.state.id.clone(),
            owner: owner.to_owned(),
        })
    }

    fn saved(self, saved: Result<(), StoreError>) -> RunDone {
        if saved.is_ok() {
            traced::saved(&self.state, self.resumed.as_ref());
        }
        let lease_lost =
            self.lease_lost.is_cancelled() || matches!(saved, Err(StoreError::LeaseLost { .. }));
        RunDone {
            state: self.state,
            result: self.result,
            saved,
            lease_lost,
            resumed: self.resumed,
        }
    }
}

/// When a job that just parked should be resumed with `expired`.
pub fn expiry_for(job: &JobState, expiry: Option<Duration>) -> Option<i64> {
    let expiry = expiry.filter(|_| job.status.is_waiting())?;
    Some(now_ms().saturating_add(expiry.as_millis() as i64))
}

/// This node's clock, Unix ms.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |now| now.as_millis() as i64)
}

/// Keeps a run's events for the save, each with when it happened (the job page's durations),
/// and shows them to the worker's observer.
struct Recorder {
    events: Mutex<Vec<TimedEvent>>,
    forward: Option<Arc<dyn Observer>>,
}

impl Recorder {
    fn take(&self) -> Vec<TimedEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Observer for Recorder {
    fn on_event(&self, job_id: &str, event: &JobEvent) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(TimedEvent {
                event: event.clone(),
                at_ms: Some(now_ms()),
            });
        if let Some(forward) = &self.forward {
            forward.on_event(job_id, event);
        }
    }
}

/// Wakes this process's idle runners when another process makes a job runnable (a new job, an
/// answer, a released parent), or when changes may have gone unheard.
async fn wake_on_runnable(
    mut changes: tokio::sync::broadcast::Receiver<JobChange>,
    wake: Arc<Notify>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match changes.recv().await {
            Ok(JobChange::Saved {
                status: JobStatus::Pending,
                ..
            })
            | Ok(JobChange::Missed)
            | Err(RecvError::Lagged(_)) => wake.notify_waiters(),
            Ok(JobChange::Saved { .. } | JobChange::Plugin { .. }) => {}
            Err(RecvError::Closed) => return,
        }
    }
}
