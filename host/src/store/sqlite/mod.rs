//! The embedded store: SQLite in one file (WAL), its schema versioned by `user_version`
//! (`schema.rs`).
//!
//! Invariant: every change runs inside an `IMMEDIATE` transaction of the store's one writer
//! thread (`writer.rs`); the changes themselves are the store's rules (`rules.rs`, `tree.rs`)
//! over SQLite's statements (`rows.rs`), so two processes on the same file see each change whole or not
//! at all, and a check-then-write (answer, claim, cancel) cannot interleave with another.
//! Changes queued together share a transaction, and a refused one leaves no trace: a change
//! checks before it writes, and one that fails after writing makes the writer replay its batch
//! with savepoints. Reads go through a separate read-only connection and see only committed
//! changes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, params};

use super::record::{JobRow, SaveRecord, StoredText, numbered_events};
use super::rules::{self, ClaimedRow, now_ms, unreadable_is_none};
use super::tree::{self, CancelOutcome};
use super::{
    ClaimedJob, Handoff, JobStore, JobSummary, StoreError, StoreFuture, StoredEvent, TimedEvent,
    known_statuses, ready,
};
use crate::engine::{Answer, JobState, JobStatus};

mod packed;
mod rows;
mod schema;
mod writer;
use super::rows::Rows as _;
use rows::{Cached, SqliteRows};
use writer::Tx;

pub struct SqliteStore {
    db: Arc<Db>,
    /// Reads only (`PRAGMA query_only`); every change goes through `writer`. Several, so one
    /// long read (an inbox, a job list) does not queue every other reader behind it: WAL lets
    /// them all read at once.
    readers: Vec<Mutex<Connection>>,
    next_reader: std::sync::atomic::AtomicUsize,
    writer: writer::Writer,
    schema: Schema,
}

/// The schema versions of a store: as [`SqliteStore::open`] found it, and now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    pub found: usize,
    pub now: usize,
}

/// What the writer thread and the callers share: the file, named in every error, and the size
/// of its pages (read once, when it opens).
struct Db {
    path: PathBuf,
    page_size: usize,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.db.path)
            .finish()
    }
}

/// Read connections per store.
const READERS: usize = 4;

impl SqliteStore {
    /// Opens (creating if needed) the store file and brings its schema up to date.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let fail = |message: String| StoreError::Database {
            path: path.display().to_string(),
            message,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| fail(format!("cannot create {}: {e}", parent.display())))?;
        }
        let (connection, version) = schema::open_writer(&path, fail)?;
        let side_connection = |pragmas: &str| {
            let side = Connection::open(&path)?;
            side.execute_batch(pragmas)?;
            Ok::<_, rusqlite::Error>(side)
        };
        let readers = (0..READERS)
            .map(|_| {
                let reader = side_connection(
                    "PRAGMA busy_timeout = 10000; PRAGMA cache_size = -4096; \
                     PRAGMA query_only = 1;",
                )?;
                reader.set_prepared_statement_cache_capacity(64);
                Ok(Mutex::new(reader))
            })
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| fail(e.to_string()))?;
        let checkpoints =
            side_connection("PRAGMA busy_timeout = 10000;").map_err(|e| fail(e.to_string()))?;
        let page_size: usize = connection
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .map_err(|e| fail(e.to_string()))?;
        let db = Arc::new(Db {
            path: path.clone(),
            page_size,
        });
        let writer = writer::Writer::start(db.clone(), connection, checkpoints).map_err(fail)?;
        Ok(Self {
            db,
            readers,
            next_reader: Default::default(),
            writer,
            schema: Schema {
                found: version,
                now: schema::VERSION,
            },
        })
    }

    pub fn path(&self) -> &Path {
        &self.db.path
    }

    /// Which schema version the file had when opened, and which it has now.
    pub fn schema(&self) -> Schema {
        self.schema
    }

    /// A free reader if there is one, else the next in turn.
    fn read(&self) -> std::sync::MutexGuard<'_, Connection> {
        let first = self
            .next_reader
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for offset in 0..self.readers.len() {
            match self.readers[(first + offset) % self.readers.len()].try_lock() {
                Ok(guard) => return guard,
                Err(std::sync::TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        self.readers[first % self.readers.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether some job is pending or running under an expired lease. Idle runners ask often
    /// and the answer is mostly no: a read says so without taking the write lock.
    fn any_runnable(&self, at: i64) -> Result<bool, StoreError> {
        self.read()
            .row_cached(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'pending') \
                 OR EXISTS (SELECT 1 FROM jobs WHERE status = 'running' AND lease_until_ms < ?1)",
                [at],
                |row| row.get(0),
            )
            .map_err(|e| self.db.db_error(e))
    }

    /// Runs `body` in the writer's transaction and waits until it has committed.
    fn write<T: Send + 'static>(&self, body: impl ChangeBody<T>) -> Result<T, StoreError> {
        let (reply, result) = std::sync::mpsc::sync_channel(1);
        let alone = self.writer.queue().submit(&self.db, body, move |outcome| {
            let _ = reply.send(outcome);
        });
        // A lone change commits in well under a millisecond: looking again for a short while
        // spares the caller the wake-up of a sleeping thread. Behind other changes, the caller
        // sleeps at once and leaves the processor to them.
        let spin = if alone {
            writer::LONE_COMMIT_WAIT
        } else {
            std::time::Duration::ZERO
        };
        writer::recv_soon(&result, spin).unwrap_or_else(|_| Err(self.db.change_lost()))
    }

    /// [`Self::write`] for async callers: the calling thread is free while the change waits.
    fn write_async<T: Send + 'static>(&self, body: impl ChangeBody<T>) -> StoreFuture<T> {
        Box::pin(queue_change(self.writer.queue(), &self.db, body))
    }

    /// The job a claim took, parsed here rather than on the writer's thread. Unreadable, it is
    /// set aside (see [`rules::set_aside`]) and the claim fails with why.
    fn parse_claimed(&self, claimed: Option<ClaimedRow>) -> Result<Option<ClaimedJob>, StoreError> {
        let Some(row) = claimed else { return Ok(None) };
        row.parse(|id, e| self.db.corrupt(id, e))
            .map(Some)
            .or_else(|error| {
                self.write(set_aside_change(&row, error.clone()))?;
                Err(error)
            })
    }

    /// [`Self::parse_claimed`] for async callers: what the returned parser needs to set an
    /// unreadable row aside.
    fn claim_parser(&self) -> ClaimParser {
        ClaimParser {
            queue: self.writer.queue().clone(),
            db: self.db.clone(),
        }
    }

    /// The summary rows that `filter` (a WHERE clause with its ORDER and LIMIT) selects.
    fn summaries(
        &self,
        filter: &str,
        parameters: impl rusqlite::Params,
    ) -> Result<Vec<JobSummary>, StoreError> {
        let connection = self.read();
        let mut query = connection
            .prepare_cached(&format!(
                "SELECT id, piece, status, movement, wait_reason, parent, created_at_ms, \
                 updated_at_ms FROM jobs {filter}"
            ))
            .map_err(|e| self.db.db_error(e))?;
        let rows = query
            .query_map(parameters, |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, Option<String>>(4)?,
                    row.get::<_, Option<String>>(5)?,
                    row.get::<_, i64>(6)?,
                    row.get::<_, i64>(7)?,
                ))
            })
            .map_err(|e| self.db.db_error(e))?;
        let mut jobs = Vec::new();
        for row in rows {
            let (id, piece, status, movement, wait_reason, parent, created, updated) =
                row.map_err(|e| self.db.db_error(e))?;
            let status = JobStatus::parse(&status)
                .ok_or_else(|| self.db.corrupt(&id, format!("unknown status `{status}`")))?;
            jobs.push(JobSummary {
                id,
                piece,
                status,
                movement,
                wait_reason,
                parent,
                created_at_ms: created,
                updated_at_ms: updated,
            });
        }
        Ok(jobs)
    }
}

impl Db {
    fn db_error(&self, error: impl std::fmt::Display) -> StoreError {
        StoreError::Database {
            path: self.path.display().to_string(),
            message: error.to_string(),
        }
    }

    fn corrupt(&self, job: &str, error: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            path: self.path.display().to_string(),
            job: job.to_owned(),
            message: error.to_string(),
        }
    }

    fn change_lost(&self) -> StoreError {
        self.db_error(
            "the store's writer dropped the change without making it (it stopped, or the change \
             failed inside it: see the log)",
        )
    }
}

/// A store change: what the writer runs inside its transaction. The sync and async calls of
/// [`JobStore`] queue the same changes and differ only in how the caller waits.
trait ChangeBody<T>: FnMut(&Db, &Tx<'_>) -> Result<T, StoreError> + Send + 'static {}

impl<T, B> ChangeBody<T> for B where B: FnMut(&Db, &Tx<'_>) -> Result<T, StoreError> + Send + 'static
{}

/// Queues `body` for the writer; the calling thread is free while the change waits.
fn queue_change<T: Send + 'static>(
    queue: &writer::Queue,
    db: &Arc<Db>,
    body: impl ChangeBody<T>,
) -> impl Future<Output = Result<T, StoreError>> + Send + 'static {
    let (reply, result) = tokio::sync::oneshot::channel();
    queue.submit(db, body, move |outcome| {
        let _ = reply.send(outcome);
    });
    let db = db.clone();
    async move { result.await.unwrap_or_else(|_| Err(db.change_lost())) }
}

/// [`SqliteStore::parse_claimed`] inside a future.
struct ClaimParser {
    queue: writer::Queue,
    db: Arc<Db>,
}

impl ClaimParser {
    async fn parse(self, claimed: Option<ClaimedRow>) -> Result<Option<ClaimedJob>, StoreError> {
        let Some(row) = claimed else { return Ok(None) };
        match row.parse(|id, e| self.db.corrupt(id, e)) {
            Ok(job) => Ok(Some(job)),
            Err(error) => {
                queue_change(&self.queue, &self.db, set_aside_change(&row, error.clone())).await?;
                Err(error)
            }
        }
    }
}

/// A change of `rules.rs` as the writer runs it.
fn change<T>(
    mut body: impl FnMut(&mut SqliteRows<'_, '_>) -> Result<T, StoreError> + Send + 'static,
) -> impl ChangeBody<T> {
    move |db: &Db, tx: &Tx<'_>| body(&mut SqliteRows { db, tx })
}

/// Stores `job` as a new, pending job, its conversation in its state until its first save.
fn create_change(db: &Db, job: &JobState) -> Result<impl ChangeBody<()> + use<>, StoreError> {
    let row = JobRow::with_conversation(job).map_err(|e| db.db_error(e))?;
    let at = now_ms();
    Ok(change(move |rows| rules::create(rows, &row, at)))
}

/// Records `answer` as the answer to the wait of `id` (the one numbered `expected`, if given).
fn answer_change(id: &str, answer: &Answer, expected: Option<u32>) -> impl ChangeBody<()> + use<> {
    let at = now_ms();
    let (id, answer) = (id.to_owned(), answer.clone());
    change(move |rows| rules::answer(rows, &id, &answer, expected, at))
}

/// Cancels `id` and its descendants.
fn cancel_change(id: &str, reason: &str) -> impl ChangeBody<CancelOutcome> + use<> {
    let at = now_ms();
    let (id, reason) = (id.to_owned(), reason.to_owned());
    change(move |rows| tree::cancel_tree(rows, &id, &reason, at))
}

/// The change that takes the unreadable job of `row` out of the runnable ones, as `error`.
fn set_aside_change(row: &ClaimedRow, error: StoreError) -> impl ChangeBody<()> + use<> {
    let (id, owner, at) = (row.id.clone(), row.owner.clone(), now_ms());
    change(move |rows| rules::set_aside(rows, &id, &owner, at, &error))
}

impl JobStore for SqliteStore {
    fn create(&self, job: &JobState) -> Result<(), StoreError> {
        self.write(create_change(&self.db, job)?)
    }

    fn create_async(&self, job: &JobState) -> StoreFuture<()> {
        match create_change(&self.db, job) {
            Ok(change) => self.write_async(change),
            Err(error) => ready(Err(error)),
        }
    }

    fn load(&self, id: &str) -> Result<(JobState, JobStatus), StoreError> {
        let connection = self.read();
        // The row and its log from one snapshot: a save or a prune committed between two reads
        // would mix two versions of the job.
        let snapshot = connection
            .unchecked_transaction()
            .map_err(|e| self.db.db_error(e))?;
        let row = rows::job_row(&self.db, &snapshot, id)?;
        let messages = rows::message_batches(&self.db, &snapshot, id)?;
        drop(snapshot);
        let status = row.status;
        let text = StoredText {
            state: row.state,
            messages,
            resume: None,
        };
        let job = text.parse().map_err(|e| self.db.corrupt(id, e))?;
        Ok((job.state, status))
    }

    fn answer(&self, id: &str, answer: &Answer, wait: Option<u32>) -> Result<(), StoreError> {
        self.write(answer_change(id, answer, wait))
    }

    fn answer_async(&self, id: &str, answer: &Answer, wait: Option<u32>) -> StoreFuture<()> {
        self.write_async(answer_change(id, answer, wait))
    }

    fn claim(
        &self,
        id: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Option<ClaimedJob>, StoreError> {
        let at = now_ms();
        let (id, owner) = (id.to_owned(), owner.to_owned());
        let claimed = self.write(change(move |rows| {
            rules::claim(rows, &id, &owner, lease_ms, at)
        }))?;
        self.parse_claimed(claimed)
    }

    fn claim_next(&self, owner: &str, lease_ms: i64) -> Result<Option<ClaimedJob>, StoreError> {
        let at = now_ms();
        if !self.any_runnable(at)? {
            return Ok(None);
        }
        let owner = owner.to_owned();
        let claimed = self.write(change(move |rows| {
            rules::claim_next(rows, &owner, lease_ms, at)
        }))?;
        unreadable_is_none(self.parse_claimed(claimed))
    }

    fn claim_next_async(&self, owner: &str, lease_ms: i64) -> StoreFuture<Option<ClaimedJob>> {
        let at = now_ms();
        match self.any_runnable(at) {
            Ok(true) => {}
            nothing_or_error => return ready(nothing_or_error.map(|_| None)),
        }
        let owner = owner.to_owned();
        let claimed = queue_change(
            self.writer.queue(),
            &self.db,
            change(move |rows| rules::claim_next(rows, &owner, lease_ms, at)),
        );
        let parser = self.claim_parser();
        Box::pin(async move { unreadable_is_none(parser.parse(claimed.await?).await) })
    }

    fn expire_waits(&self) -> StoreFuture<usize> {
        let at = now_ms();
        // Idle runners ask often and there is rarely anything due: a read answers that without
        // going through the writer.
        let due = self
            .read()
            .row_cached(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE wait_expires_at_ms <= ?1)",
                [at],
                |row| row.get::<_, bool>(0),
            )
            .map_err(|e| self.db.db_error(e));
        match due {
            Ok(true) => {}
            nothing_or_error => return ready(nothing_or_error.map(|_| 0)),
        }
        self.write_async(change(move |rows| rules::expire(rows, at)))
    }

    fn active_jobs(&self) -> Result<usize, StoreError> {
        self.read()
            .row_cached(
                "SELECT (SELECT COUNT(*) FROM jobs WHERE status = 'pending') \
                 + (SELECT COUNT(*) FROM jobs WHERE status = 'running') \
                 + (SELECT COUNT(*) FROM jobs WHERE wait_expires_at_ms IS NOT NULL \
                    AND status IN ('waiting_human', 'waiting_subtasks'))",
                [],
                |row| row.get::<_, i64>(0),
            )
            .map(|count| count as usize)
            .map_err(|e| self.db.db_error(e))
    }

    fn jobs_by_status(&self) -> Result<Vec<(JobStatus, u64)>, StoreError> {
        let connection = self.read();
        let mut query = connection
            .prepare_cached("SELECT status, COUNT(*) FROM jobs GROUP BY status")
            .map_err(|e| self.db.db_error(e))?;
        let counts = query
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(|e| self.db.db_error(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.db.db_error(e))?;
        Ok(known_statuses(counts))
    }

    fn children(&self, parent: &str) -> Result<Vec<String>, StoreError> {
        let connection = self.read();
        let mut query = connection
            .prepare_cached("SELECT id FROM jobs WHERE parent = ?1 ORDER BY created_at_ms, id")
            .map_err(|e| self.db.db_error(e))?;
        let ids = query
            .query_map([parent], |row| row.get::<_, String>(0))
            .map_err(|e| self.db.db_error(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.db.db_error(e))?;
        Ok(ids)
    }

    fn renew(&self, id: &str, owner: &str, lease_ms: i64) -> StoreFuture<Option<String>> {
        let at = now_ms();
        let (id, owner) = (id.to_owned(), owner.to_owned());
        self.write_async(change(move |rows| {
            rules::renew(rows, &id, &owner, at + lease_ms)
        }))
    }

    fn save(&self, job: &JobState, events: &[TimedEvent], owner: &str) -> Result<(), StoreError> {
        let record = SaveRecord::of(job, events).map_err(|e| self.db.db_error(e))?;
        let (owner, at) = (owner.to_owned(), now_ms());
        self.write(change(move |rows| rules::save(rows, &record, &owner, at)))
    }

    fn save_async(&self, job: &JobState, events: &[TimedEvent], owner: &str) -> StoreFuture<()> {
        let record = match SaveRecord::of(job, events) {
            Ok(record) => record,
            Err(error) => return ready(Err(self.db.db_error(error))),
        };
        let (owner, at) = (owner.to_owned(), now_ms());
        self.write_async(change(move |rows| rules::save(rows, &record, &owner, at)))
    }

    fn save_and_claim_next(
        &self,
        job: &JobState,
        events: &[TimedEvent],
        owner: &str,
        lease_ms: i64,
    ) -> StoreFuture<Handoff> {
        let prepared = SaveRecord::of(job, events).map_err(|e| self.db.db_error(e));
        let (owner, at) = (owner.to_owned(), now_ms());
        let handed = queue_change(
            self.writer.queue(),
            &self.db,
            change(move |rows| {
                Ok(rules::save_and_claim_next(
                    rows, &prepared, &owner, lease_ms, at,
                ))
            }),
        );
        let parser = self.claim_parser();
        Box::pin(async move {
            let (saved, next) = handed.await?;
            let next = match next {
                Ok(claimed) => unreadable_is_none(parser.parse(claimed).await),
                Err(error) => Err(error),
            };
            Ok(Handoff { saved, next })
        })
    }

    fn cancel(&self, id: &str, reason: &str) -> Result<CancelOutcome, StoreError> {
        self.write(cancel_change(id, reason))
    }

    fn secret(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let (name, candidate, at) = (name.to_owned(), super::new_secret()?, now_ms());
        self.write(change(move |rows| rows.keep_secret(&name, &candidate, at)))
    }

    fn spend_once(&self, token: &str, until_ms: i64) -> StoreFuture<bool> {
        let (token, at) = (token.to_owned(), now_ms());
        self.write_async(change(move |rows| rows.spend(&token, until_ms, at)))
    }

    fn cancel_async(&self, id: &str, reason: &str) -> StoreFuture<CancelOutcome> {
        self.write_async(cancel_change(id, reason))
    }

    fn list(&self, status: Option<JobStatus>, limit: usize) -> Result<Vec<JobSummary>, StoreError> {
        self.summaries(
            "WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at_ms DESC, id DESC LIMIT ?2",
            params![status.map(JobStatus::as_str), limit as i64],
        )
    }

    fn longest_waiting(&self, limit: usize) -> Result<Vec<JobSummary>, StoreError> {
        self.summaries(
            "WHERE status = 'waiting_human' ORDER BY updated_at_ms, id LIMIT ?1",
            params![limit as i64],
        )
    }

    fn summary(&self, id: &str) -> Result<JobSummary, StoreError> {
        self.summaries("WHERE id = ?1", params![id])?
            .pop()
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    fn prune(&self, before_ms: i64, limit: usize) -> Result<usize, StoreError> {
        self.write(change(move |rows| {
            tree::prune_trees(rows, before_ms, limit)
        }))
    }

    fn events(&self, id: &str, after: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let connection = self.read();
        let mut query = connection
            .prepare_cached(
                // Rows before one that starts at `after + 1` or earlier end at `after`.
                concat!(
                    rows::log_walk!(c(prev, batch, first_seq, last_seq, at_ms, events)
                        while "c.first_seq > ?2 + 1"),
                    "SELECT first_seq, at_ms, events FROM c WHERE last_seq > ?2 ORDER BY batch"
                ),
            )
            .map_err(|e| self.db.db_error(e))?;
        let rows = query
            .query_map(params![id, after as i64], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, packed::Unpacked>(2)?,
                ))
            })
            .map_err(|e| self.db.db_error(e))?;
        let batches = rows
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.db.db_error(e))?
            .into_iter()
            .map(|(first, at_ms, text)| Ok((first, at_ms, rows::events_of(text.0?))))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| self.db.corrupt(id, e))?;
        numbered_events(batches, after).map_err(|e| self.db.corrupt(id, e))
    }
}

#[cfg(test)]
mod tests;
