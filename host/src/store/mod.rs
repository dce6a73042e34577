//! The durable job store: one row per job and an append-only log per job of what each save
//! added (events and conversation messages; see `record.rs`), in a SQLite file (`sqlite/`) or a
//! PostgreSQL database that many nodes share (`postgres/`). What a change checks and writes is
//! written once (`rules.rs`, `tree.rs`) over each database's statements (`rows.rs`).
//!
//! Invariant: the store is the only truth about a job between runs. The `status` column says
//! who may act next (`pending`: any runner; `running`: the runner holding the lease;
//! `waiting_*`: whoever answers the wait, exactly once); the `state` column and the log make
//! the engine's [`JobState`], written together with the events of the run in one transaction,
//! so a job is never seen half-saved. An answer is recorded only while the job waits and
//! nobody has answered yet: a second answer is refused with [`StoreError::NotWaiting`], never
//! applied twice.
//! Events get consecutive sequence numbers per job, starting at 1, and are never changed; they go
//! only with their job, when retention deletes a tree of jobs that have all ended.

mod address;
mod postgres;
mod record;
mod rows;
mod rules;
mod sqlite;
#[cfg(test)]
mod suite;
mod tree;

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;

pub use address::StoreAddress;
pub use postgres::PostgresStore;
pub use sqlite::{Schema, SqliteStore};
pub use tree::CancelOutcome;

use crate::engine::{Answer, JobEvent, JobState, JobStatus};

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("no job `{0}` in the store")]
    NotFound(String),
    #[error("job `{job}` is {status}, not waiting for an answer{hint}")]
    NotWaiting {
        job: String,
        status: JobStatus,
        hint: &'static str,
    },
    #[error("job `{job}`: {message}")]
    WrongAnswer { job: String, message: String },
    #[error(
        "job `{job}` now waits on park {current}, not on park {given}: the answer was for an earlier wait"
    )]
    StaleAnswer {
        job: String,
        given: u32,
        current: u32,
    },
    #[error(
        "job `{job}`: this runner ({owner}) no longer holds its lease: another runner took it, or \
         it could not be renewed in time"
    )]
    LeaseLost { job: String, owner: String },
    #[error("job `{job}` is {status}: it cannot be {action}")]
    Conflict {
        job: String,
        status: JobStatus,
        action: &'static str,
    },
    #[error("store {path}: {message}")]
    Database { path: String, message: String },
    #[error("store {path}: job `{job}` has an unreadable record: {message}")]
    Corrupt {
        path: String,
        job: String,
        message: String,
    },
}

/// One row of `maestro jobs list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobSummary {
    pub id: String,
    pub piece: String,
    pub status: JobStatus,
    pub movement: String,
    pub wait_reason: Option<String>,
    pub parent: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// An event as stored: its place in the job's log and when it happened (Unix ms): on the
/// runner's clock for the events of a run, on the store's for the rest and for events stored
/// before runs timed their events, which take their save's time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    pub seq: u64,
    pub at_ms: i64,
    #[serde(flatten)]
    pub event: JobEvent,
}

/// An event handed to a save, with when it happened on the runner's clock (Unix ms); `None`
/// takes the save's time.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedEvent {
    pub event: JobEvent,
    pub at_ms: Option<i64>,
}

impl From<JobEvent> for TimedEvent {
    fn from(event: JobEvent) -> Self {
        Self { event, at_ms: None }
    }
}

/// A job handed to a runner: its state and, for a resumed job, the answer to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedJob {
    pub state: JobState,
    pub resume: Option<Answer>,
}

/// A store call that leaves the calling thread free while the change waits for its commit.
pub type StoreFuture<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

/// A store call answered at once.
fn ready<T: Send + 'static>(result: Result<T, StoreError>) -> StoreFuture<T> {
    Box::pin(std::future::ready(result))
}

/// What [`JobStore::save_and_claim_next`] did: whether the save stood, and the job claimed
/// next.
#[derive(Debug)]
pub struct Handoff {
    pub saved: Result<(), StoreError>,
    pub next: Result<Option<ClaimedJob>, StoreError>,
}

/// What a shared store tells every process of the changes to its jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobChange {
    /// A job was written with this status (new, answered, run, ended).
    Saved { job: String, status: JobStatus },
    /// The version of a plugin that serves on every node changed (see
    /// [`JobStore::publish_plugin`]); read it with [`JobStore::published_plugins`].
    Plugin { name: String },
    /// The store lost touch for a while and changes may have gone unheard: look again.
    Missed,
}

/// The version of a plugin that every node sharing the store serves, as the last node to
/// install or remove it published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedPlugin {
    pub name: String,
    /// `None`: removed, it takes no new calls on any node.
    pub content_hash: Option<String>,
    /// When it was published, Unix ms on the store's clock.
    pub at_ms: i64,
}

/// Where jobs live. The embedded default is [`SqliteStore`], the shared one [`PostgresStore`]
/// ([`StoreAddress`] opens either); the trait keeps the engine and the CLI independent of the
/// database.
pub trait JobStore: Send + Sync {
    /// Stores a new job (status `pending`).
    fn create(&self, job: &JobState) -> Result<(), StoreError>;

    /// [`JobStore::create`] for async callers (the API, a tool spawning a subtask): their
    /// thread is free while the change waits for its commit.
    fn create_async(&self, job: &JobState) -> StoreFuture<()>;

    /// The stored state of a job and its scheduling status.
    fn load(&self, id: &str) -> Result<(JobState, JobStatus), StoreError>;

    /// Records the answer to a waiting job and makes it runnable. Refused when the job does not
    /// wait (ended, already answered, running), when the answer does not fit the wait or the
    /// job's session refuses it, when `wait` is given and the job now waits on another park (an
    /// answer to an older question), and when the job is a worker whose questions and drafts
    /// are answered at its parent (the parent passes its answers on as forwarded ones).
    fn answer(&self, id: &str, answer: &Answer, wait: Option<u32>) -> Result<(), StoreError>;

    /// [`JobStore::answer`] for async callers.
    fn answer_async(&self, id: &str, answer: &Answer, wait: Option<u32>) -> StoreFuture<()>;

    /// Takes a runnable job for `owner` until `lease_ms` from now. Returns `None` when the job
    /// is not runnable (someone else holds it, it waits, it ended).
    fn claim(&self, id: &str, owner: &str, lease_ms: i64)
    -> Result<Option<ClaimedJob>, StoreError>;

    /// Takes the oldest runnable job (pending, or running under an expired lease) for `owner`.
    fn claim_next(&self, owner: &str, lease_ms: i64) -> Result<Option<ClaimedJob>, StoreError>;

    /// [`JobStore::claim_next`] for a runner: the runner's thread does other work meanwhile,
    /// so many runners' claims can share one commit.
    fn claim_next_async(&self, owner: &str, lease_ms: i64) -> StoreFuture<Option<ClaimedJob>>;

    /// Extends `owner`'s lease on a running job and, if someone asked it to stop, says with
    /// which reason; refused when the lease went to someone else. Async: the runner's task
    /// renews beside the run, without holding a thread.
    fn renew(&self, id: &str, owner: &str, lease_ms: i64) -> StoreFuture<Option<String>>;

    /// Writes the job after (part of) a run by `owner`, with the events the run produced,
    /// atomically, and releases the lease unless the job is still running. Refused when
    /// `owner` no longer holds the lease, so a runner that lost its job cannot overwrite it.
    fn save(&self, job: &JobState, events: &[TimedEvent], owner: &str) -> Result<(), StoreError>;

    /// [`JobStore::save`] for a runner, without blocking its thread.
    fn save_async(&self, job: &JobState, events: &[TimedEvent], owner: &str) -> StoreFuture<()>;

    /// A runner's step from one job to the next in one commit: saves `job` as
    /// [`JobStore::save`] does and takes the next runnable job as [`JobStore::claim_next`]
    /// does. A refused save does not stop the claim.
    fn save_and_claim_next(
        &self,
        job: &JobState,
        events: &[TimedEvent],
        owner: &str,
        lease_ms: i64,
    ) -> StoreFuture<Handoff>;

    /// Cancels a job and its descendants. A job that is pending, waiting, or running under an
    /// expired lease (its runner died) ends as cancelled at once; a live run is asked to stop
    /// at its next step (its runner sees it when it renews the lease).
    fn cancel(&self, id: &str, reason: &str) -> Result<CancelOutcome, StoreError>;

    /// [`JobStore::cancel`] for async callers.
    fn cancel_async(&self, id: &str, reason: &str) -> StoreFuture<CancelOutcome>;

    /// The child jobs of `parent`, oldest first.
    fn children(&self, parent: &str) -> Result<Vec<String>, StoreError>;

    /// Resumes every wait whose expiry has passed with `expired`; returns how many. Async: an
    /// idle runner asks.
    fn expire_waits(&self) -> StoreFuture<usize>;

    /// Jobs that some runner has or will have without anyone's help: pending, running, and
    /// waiting with an expiry.
    fn active_jobs(&self) -> Result<usize, StoreError>;

    /// How many jobs the store holds in each status; a status with none is left out.
    fn jobs_by_status(&self) -> Result<Vec<(JobStatus, u64)>, StoreError>;

    /// Jobs, newest first, optionally only those with `status`.
    fn list(&self, status: Option<JobStatus>, limit: usize) -> Result<Vec<JobSummary>, StoreError>;

    /// Jobs waiting for a human, the one that has waited longest first.
    fn longest_waiting(&self, limit: usize) -> Result<Vec<JobSummary>, StoreError>;

    /// One job's row of [`JobStore::list`].
    fn summary(&self, id: &str) -> Result<JobSummary, StoreError>;

    /// The events of a job with a sequence number greater than `after`, oldest first.
    fn events(&self, id: &str, after: u64) -> Result<Vec<StoredEvent>, StoreError>;

    /// The changes any process makes to the jobs, where the store hears of them (a database
    /// shared by many nodes); `None` where it does not, and its users look again every so
    /// often instead.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<JobChange>> {
        None
    }

    /// Keeps the bytes of plugin `name`'s version `content_hash` where every node can fetch
    /// them, where the store is shared by many nodes; elsewhere (a SQLite file, whose nodes keep
    /// versions in their own archive folder) it keeps nothing.
    fn keep_component(
        &self,
        _content_hash: &str,
        _name: &str,
        _bytes: &[u8],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// The bytes [`JobStore::keep_component`] kept for `content_hash`, if any. The caller checks
    /// them against the hash before it runs them.
    fn component(&self, _content_hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }

    /// Makes version `content_hash` of plugin `name` (already kept with
    /// [`JobStore::keep_component`]) the one every node sharing the store serves, or with `None`
    /// removes the plugin from all of them, and tells them ([`JobChange::Plugin`]). The last
    /// publication wins. A store that no other node hears of (a SQLite file) records nothing.
    fn publish_plugin(&self, _name: &str, _content_hash: Option<&str>) -> Result<(), StoreError> {
        Ok(())
    }

    /// Every plugin ever published, by name.
    fn published_plugins(&self) -> Result<Vec<PublishedPlugin>, StoreError> {
        Ok(Vec::new())
    }

    /// The secret `name` of this install: 32 random bytes made the first time any process asks,
    /// the same ever after for every process and node that opens the store.
    fn secret(&self, name: &str) -> Result<Vec<u8>, StoreError>;

    /// Spends the one-time `token`, remembered until `until_ms` (Unix ms, past which it can no
    /// longer be presented): `true` the first time, `false` on every later try, on any node.
    fn spend_once(&self, token: &str, until_ms: i64) -> StoreFuture<bool>;

    /// Deletes, with their events, up to `limit` job trees that ended before `before_ms` (Unix
    /// ms): top-level jobs that ended then, with every descendant ended too. A tree with any job
    /// still unfinished stays whole. Returns how many jobs were deleted.
    fn prune(&self, before_ms: i64, limit: usize) -> Result<usize, StoreError>;
}

/// The counts of [`JobStore::jobs_by_status`] whose status this release knows.
fn known_statuses(counts: Vec<(String, i64)>) -> Vec<(JobStatus, u64)> {
    counts
        .into_iter()
        .filter_map(|(status, count)| Some((JobStatus::parse(&status)?, count.max(0) as u64)))
        .collect()
}

/// Jobs pruned per write: retention of a large backlog lets other writes in between.
const PRUNE_BATCH: usize = 500;

/// Deletes every job tree that ended more than `age` ago (see [`JobStore::prune`]), a batch at a
/// time; returns how many jobs went.
pub fn prune_finished(store: &dyn JobStore, age: std::time::Duration) -> Result<usize, StoreError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let before = now.saturating_sub(age).as_millis() as i64;
    let mut total = 0;
    loop {
        let deleted = store.prune(before, PRUNE_BATCH)?;
        total += deleted;
        if deleted == 0 {
            return Ok(total);
        }
    }
}

/// A fresh job id: time-ordered, so ids sort by creation.
/// A new secret of [`JobStore::secret`]'s size, from the operating system's random source.
fn new_secret() -> Result<[u8; 32], StoreError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|error| StoreError::Database {
        path: "the operating system's random source".to_owned(),
        message: error.to_string(),
    })?;
    Ok(secret)
}

pub fn new_job_id() -> String {
    format!("job-{}", uuid::Uuid::now_v7().simple())
}
