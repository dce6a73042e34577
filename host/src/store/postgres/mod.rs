//! The shared store: PostgreSQL, for many nodes on one database.
//!
//! Invariant: the changes are the store's rules (`rules.rs`, `tree.rs`) over PostgreSQL's
//! statements (`rows.rs`), each one transaction on a connection of the store's pool
//! (`pool.rs`), so every node sees each change whole or not at all; the rows a change checks
//! are locked until it commits, so a check-then-write (answer, claim, cancel) cannot
//! interleave with another node's. Reads see committed changes only; a job's row and its log
//! are read from one snapshot. Every write of a job's status notifies the other nodes
//! (`listen.rs`), which look again at once instead of at their next poll.

mod clock;
mod listen;
mod pool;
mod rows;
mod schema;
mod shared;

use std::sync::Arc;

use self::listen::Listener;
use self::pool::Pool;
use self::rows::{column, message_batches, row_text};
use self::shared::{Shared, read_job};
use super::record::{JobRow, SaveRecord, StoredText, numbered_events};
use super::rows::Rows as _;
use super::rules::now_ms as rules_now_ms;
use super::rules::{self, ClaimedRow, unreadable_is_none};
use super::tree::{self, CancelOutcome};
use super::{
    ClaimedJob, Handoff, JobChange, JobStore, JobSummary, PublishedPlugin, Schema, StoreError,
    StoreFuture, StoredEvent, TimedEvent,
};
use crate::engine::{Answer, JobState, JobStatus};

/// Connections per store: the changes and reads a node has in flight at once.
const CONNECTIONS: usize = 8;

/// `url` without its password, for messages.
pub(super) fn label_of(config: &postgres::Config) -> String {
    let user = config.get_user().unwrap_or("");
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}:{port}/{database}")
}

/// A store in a PostgreSQL database.
pub struct PostgresStore {
    shared: Shared,
    schema: Schema,
    config: postgres::Config,
    /// Started by the first [`JobStore::changes`]: a one-shot command (`maestro jobs list`)
    /// opens no listening connection.
    listener: std::sync::OnceLock<Listener>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.shared.label)
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`) and
    /// brings its schema up to date.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let mut config: postgres::Config = url.parse().map_err(|e| StoreError::Database {
            path: "postgres://…".to_owned(),
            message: format!("not a PostgreSQL URL: {e}"),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        config.application_name("maestro");
        let label: Arc<str> = label_of(&config).into();
        let pool = Pool::start(&config, &label, CONNECTIONS)?;
        let shared = Shared {
            pool,
            label,
            clock: Arc::default(),
        };
        // On a pool thread: the client blocks on a runtime of its own, which cannot start
        // inside the caller's.
        let schema = shared.run(schema::migrate)?;
        shared.measure_clock()?;
        Ok(Self {
            shared,
            schema,
            config,
            listener: std::sync::OnceLock::new(),
        })
    }

    /// Which schema version the database had when opened, and which it has now.
    pub fn schema(&self) -> Schema {
        self.schema
    }

    /// Sets this node's clock `by_ms` wrong, as a node without time synchronisation would be,
    /// and measures it against the server again.
    #[cfg(test)]
    pub(crate) fn skew_local_clock(&self, by_ms: i64) -> Result<(), StoreError> {
        self.shared.clock.skew_local_clock(by_ms);
        self.shared.measure_clock()
    }
}

impl PostgresStore {
    /// [`Shared::parse_claimed`] for a caller that waits.
    fn parse_claimed_now(
        &self,
        claimed: Option<ClaimedRow>,
    ) -> Result<Option<ClaimedJob>, StoreError> {
        let Some(row) = claimed else { return Ok(None) };
        row.parse(|id, e| self.shared.corrupt(id, e))
            .map(Some)
            .or_else(|error| {
                self.shared.change(self.shared.set_aside(&row, &error))?;
                Err(error)
            })
    }
}

impl JobStore for PostgresStore {
    fn create(&self, job: &JobState) -> Result<(), StoreError> {
        let row = JobRow::with_conversation(job).map_err(|e| self.shared.error(e))?;
        let at = self.shared.now();
        self.shared
            .change(move |rows| rules::create(rows, &row, at))
    }

    fn create_async(&self, job: &JobState) -> StoreFuture<()> {
        let row = match JobRow::with_conversation(job) {
            Ok(row) => row,
            Err(error) => return super::ready(Err(self.shared.error(error))),
        };
        let at = self.shared.now();
        self.shared
            .change_async(move |rows| rules::create(rows, &row, at))
    }

    fn load(&self, id: &str) -> Result<(JobState, JobStatus), StoreError> {
        let (owned, label) = (id.to_owned(), self.shared.label.clone());
        let (status, text) = self.shared.run(move |connection| {
            let (row, log) = read_job(connection, &owned)?;
            let row = row_text(row, &owned, &label)?;
            let text = StoredText {
                state: row.state,
                messages: message_batches(log, &label)?,
                resume: None,
            };
            Ok((row.status, text))
        })?;
        let job = text.parse().map_err(|e| self.shared.corrupt(id, e))?;
        Ok((job.state, status))
    }

    fn answer(&self, id: &str, answer: &Answer, wait: Option<u32>) -> Result<(), StoreError> {
        let (id, answer, at) = (id.to_owned(), answer.clone(), self.shared.now());
        self.shared
            .change(move |rows| rules::answer(rows, &id, &answer, wait, at))
    }

    fn answer_async(&self, id: &str, answer: &Answer, wait: Option<u32>) -> StoreFuture<()> {
        let (id, answer, at) = (id.to_owned(), answer.clone(), self.shared.now());
        self.shared
            .change_async(move |rows| rules::answer(rows, &id, &answer, wait, at))
    }

    fn claim(
        &self,
        id: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Option<ClaimedJob>, StoreError> {
        let (id, owner, at) = (id.to_owned(), owner.to_owned(), self.shared.now());
        let claimed = self
            .shared
            .change(move |rows| rules::claim(rows, &id, &owner, lease_ms, at))?;
        self.parse_claimed_now(claimed)
    }

    fn claim_next(&self, owner: &str, lease_ms: i64) -> Result<Option<ClaimedJob>, StoreError> {
        let (owner, at) = (owner.to_owned(), self.shared.now());
        let claimed = self
            .shared
            .change(move |rows| rules::claim_next(rows, &owner, lease_ms, at))?;
        unreadable_is_none(self.parse_claimed_now(claimed))
    }

    fn claim_next_async(&self, owner: &str, lease_ms: i64) -> StoreFuture<Option<ClaimedJob>> {
        let (owner, at) = (owner.to_owned(), self.shared.now());
        let claimed = self
            .shared
            .change_async(move |rows| rules::claim_next(rows, &owner, lease_ms, at));
        let shared = self.shared.clone();
        Box::pin(async move { unreadable_is_none(shared.parse_claimed(claimed.await?).await) })
    }

    fn renew(&self, id: &str, owner: &str, lease_ms: i64) -> StoreFuture<Option<String>> {
        let (id, owner, at) = (id.to_owned(), owner.to_owned(), self.shared.now());
        self.shared
            .change_async(move |rows| rules::renew(rows, &id, &owner, at + lease_ms))
    }

    fn save(&self, job: &JobState, events: &[TimedEvent], owner: &str) -> Result<(), StoreError> {
        let record = SaveRecord::of(job, events).map_err(|e| self.shared.error(e))?;
        let (owner, at) = (owner.to_owned(), self.shared.now());
        self.shared
            .change(move |rows| rules::save(rows, &record, &owner, at))
    }

    fn save_async(&self, job: &JobState, events: &[TimedEvent], owner: &str) -> StoreFuture<()> {
        let record = match SaveRecord::of(job, events) {
            Ok(record) => record,
            Err(error) => return super::ready(Err(self.shared.error(error))),
        };
        let (owner, at) = (owner.to_owned(), self.shared.now());
        self.shared
            .change_async(move |rows| rules::save(rows, &record, &owner, at))
    }

    fn save_and_claim_next(
        &self,
        job: &JobState,
        events: &[TimedEvent],
        owner: &str,
        lease_ms: i64,
    ) -> StoreFuture<Handoff> {
        let prepared = SaveRecord::of(job, events).map_err(|e| self.shared.error(e));
        let (owner, at) = (owner.to_owned(), self.shared.now());
        let handed = self.shared.change_async(move |rows| {
            Ok(rules::save_and_claim_next(
                rows, &prepared, &owner, lease_ms, at,
            ))
        });
        let shared = self.shared.clone();
        Box::pin(async move {
            let (saved, next) = handed.await?;
            let next = match next {
                Ok(claimed) => unreadable_is_none(shared.parse_claimed(claimed).await),
                Err(error) => Err(error),
            };
            Ok(Handoff { saved, next })
        })
    }

    fn cancel(&self, id: &str, reason: &str) -> Result<CancelOutcome, StoreError> {
        let (id, reason, at) = (id.to_owned(), reason.to_owned(), self.shared.now());
        self.shared
            .change(move |rows| tree::cancel_tree(rows, &id, &reason, at))
    }

    fn cancel_async(&self, id: &str, reason: &str) -> StoreFuture<CancelOutcome> {
        let (id, reason, at) = (id.to_owned(), reason.to_owned(), self.shared.now());
        self.shared
            .change_async(move |rows| tree::cancel_tree(rows, &id, &reason, at))
    }

    fn secret(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let (name, candidate, at) = (name.to_owned(), super::new_secret()?, self.shared.now());
        self.shared
            .change(move |rows| rows.keep_secret(&name, &candidate, at))
    }

    fn spend_once(&self, token: &str, until_ms: i64) -> StoreFuture<bool> {
        let (token, at) = (token.to_owned(), self.shared.now());
        self.shared
            .change_async(move |rows| rows.spend(&token, until_ms, at))
    }

    fn children(&self, parent: &str) -> Result<Vec<String>, StoreError> {
        self.shared.query(
            "SELECT id FROM jobs WHERE parent = $1 ORDER BY created_at_ms, id",
            vec![Box::new(parent.to_owned())],
            |row, label| column(row, 0, label),
        )
    }

    fn expire_waits(&self) -> StoreFuture<usize> {
        let at = self.shared.now();
        self.shared
            .change_async(move |rows| rules::expire(rows, at))
    }

    fn active_jobs(&self) -> Result<usize, StoreError> {
        let counts = self.shared.query(
            "SELECT (SELECT COUNT(*) FROM jobs WHERE status = 'pending') \
             + (SELECT COUNT(*) FROM jobs WHERE status = 'running') \
             + (SELECT COUNT(*) FROM jobs WHERE wait_expires_at_ms IS NOT NULL \
                AND status IN ('waiting_human', 'waiting_subtasks'))",
            Vec::new(),
            |row, label| column::<i64>(row, 0, label),
        )?;
        Ok(counts.first().copied().unwrap_or_default() as usize)
    }

    fn jobs_by_status(&self) -> Result<Vec<(JobStatus, u64)>, StoreError> {
        let counts = self.shared.query(
            "SELECT status, COUNT(*) FROM jobs GROUP BY status",
            Vec::new(),
            |row, label| {
                Ok((
                    column::<String>(row, 0, label)?,
                    column::<i64>(row, 1, label)?,
                ))
            },
        )?;
        Ok(super::known_statuses(counts))
    }

    fn list(&self, status: Option<JobStatus>, limit: usize) -> Result<Vec<JobSummary>, StoreError> {
        self.shared.summaries(
            "SELECT id, piece, status, movement, wait_reason, parent, created_at_ms, \
             updated_at_ms FROM jobs WHERE $1::text IS NULL OR status = $1::text \
             ORDER BY created_at_ms DESC, id DESC LIMIT $2",
            vec![
                Box::new(status.map(|status| status.as_str().to_owned())),
                Box::new(limit as i64),
            ],
        )
    }

    fn longest_waiting(&self, limit: usize) -> Result<Vec<JobSummary>, StoreError> {
        self.shared.summaries(
            "SELECT id, piece, status, movement, wait_reason, parent, created_at_ms, \
             updated_at_ms FROM jobs WHERE status = 'waiting_human' \
             ORDER BY updated_at_ms, id LIMIT $1",
            vec![Box::new(limit as i64)],
        )
    }

    fn summary(&self, id: &str) -> Result<JobSummary, StoreError> {
        self.shared
            .summaries(
                "SELECT id, piece, status, movement, wait_reason, parent, created_at_ms, \
             updated_at_ms FROM jobs WHERE id = $1",
                vec![Box::new(id.to_owned())],
            )?
            .pop()
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    fn events(&self, id: &str, after: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let batches = self.shared.query(
            "SELECT first_seq, at_ms, events FROM saves \
             WHERE job_id = $1 AND last_seq > $2 ORDER BY batch",
            vec![Box::new(id.to_owned()), Box::new(after as i64)],
            |row, label| {
                Ok((
                    column::<i64>(row, 0, label)?,
                    column::<i64>(row, 1, label)?,
                    column::<String>(row, 2, label)?,
                ))
            },
        )?;
        numbered_events(batches, after).map_err(|e| self.shared.corrupt(id, e))
    }

    fn keep_component(
        &self,
        content_hash: &str,
        name: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let (hash, name, bytes, at) = (
            content_hash.to_owned(),
            name.to_owned(),
            bytes.to_vec(),
            self.shared.now(),
        );
        self.shared
            .change(move |rows| rows.keep_component(&hash, &name, &bytes, at))
    }

    fn component(&self, content_hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let found = self.shared.query(
            "SELECT bytes FROM components WHERE content_hash = $1",
            vec![Box::new(content_hash.to_owned())],
            |row, label| column::<Vec<u8>>(row, 0, label),
        )?;
        Ok(found.into_iter().next())
    }

    fn publish_plugin(&self, name: &str, content_hash: Option<&str>) -> Result<(), StoreError> {
        let (name, hash, at) = (
            name.to_owned(),
            content_hash.map(str::to_owned),
            self.shared.now(),
        );
        self.shared
            .change(move |rows| rows.publish_plugin(&name, hash.as_deref(), at))
    }

    fn published_plugins(&self) -> Result<Vec<PublishedPlugin>, StoreError> {
        self.shared.query(
            "SELECT name, content_hash, changed_at_ms FROM plugins ORDER BY name",
            Vec::new(),
            |row, label| {
                Ok(PublishedPlugin {
                    name: column(row, 0, label)?,
                    content_hash: column(row, 1, label)?,
                    at_ms: column(row, 2, label)?,
                })
            },
        )
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<JobChange>> {
        let listener = self.listener.get_or_init(|| {
            Listener::start(
                self.config.clone(),
                self.shared.label.clone(),
                self.shared.clock.clone(),
            )
        });
        Some(listener.subscribe())
    }

    fn prune(&self, before_ms: i64, limit: usize) -> Result<usize, StoreError> {
        self.shared
            .change(move |rows| tree::prune_trees(rows, before_ms, limit))
    }
}
