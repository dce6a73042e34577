//! How the PostgreSQL store's calls reach the database: the pool, the database's clock and
//! name, and the reads and changes run on a pool thread for sync and async callers alike.
//!
//! Invariant: every call runs on a pool thread, a change as one transaction of `rules.rs`; a
//! read may run twice, on a fresh connection when its own broke while it waited in the pool (a
//! read changes nothing); every error names the database by its URL without a password.

use std::sync::Arc;

use postgres::IsolationLevel;
use postgres::types::ToSql;

use super::clock::{DbClock, SERVER_NOW};
use super::pool::{Connection, Pool};
use super::rows::{JOB, MESSAGE_BATCHES, PgRows, column};
use crate::engine::JobStatus;
use crate::store::rules::{self, ClaimedRow};
use crate::store::{ClaimedJob, JobSummary, StoreError, StoreFuture};

pub(super) type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

/// Parameters that travel to a pool thread with their read.
pub(super) type OwnedParams = Vec<Box<dyn ToSql + Send + Sync>>;

/// Runs a read of committed rows on `connection`; once more on a new connection when this one
/// broke while it waited in the pool (a read changes nothing, so it can run twice).
pub(super) fn read(
    connection: &mut Connection,
    sql: &'static str,
    params: Params<'_>,
) -> Result<Vec<postgres::Row>, StoreError> {
    let mut again = true;
    loop {
        let result = {
            let (client, statements) = connection.client()?;
            statements
                .get(client, sql)
                .and_then(|statement| client.query(&statement, params))
        };
        match result {
            Ok(rows) => return Ok(rows),
            Err(error) => {
                let failed = connection.failed(&error);
                if !(again && connection.is_broken()) {
                    return Err(failed);
                }
                again = false;
            }
        }
    }
}

/// A job's row and log, read from one snapshot: a save or a prune committed between two reads
/// would mix two versions of the job.
pub(super) fn read_job(
    connection: &mut Connection,
    id: &str,
) -> Result<(Option<postgres::Row>, Vec<postgres::Row>), StoreError> {
    let result = {
        let (client, statements) = connection.client()?;
        (|| {
            let mut snapshot = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let job = statements.get(&mut snapshot, JOB)?;
            let row = snapshot.query_opt(&job, &[&id])?;
            let batches = statements.get(&mut snapshot, MESSAGE_BATCHES)?;
            let log = snapshot.query(&batches, &[&id])?;
            snapshot.commit()?;
            Ok((row, log))
        })()
    };
    result.map_err(|e: postgres::Error| connection.failed(&e))
}

/// What the store's calls share with the futures they return: the pool and the database's
/// name.
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) pool: Pool,
    /// The database as errors name it: its URL without a password.
    pub(super) label: Arc<str>,
    pub(super) clock: Arc<DbClock>,
}

impl Shared {
    /// Now, on the database server's clock: the time every change writes and compares.
    pub(super) fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Measures this node's clock against the server's.
    pub(super) fn measure_clock(&self) -> Result<(), StoreError> {
        let clock = self.clock.clone();
        self.run(move |connection| {
            clock.measure(|| {
                let rows = read(connection, SERVER_NOW, &[])?;
                let row = rows.first().ok_or_else(|| StoreError::Database {
                    path: connection.label.to_string(),
                    message: "the server did not say its time".into(),
                })?;
                column::<i64>(row, 0, &connection.label)
            })
        })
    }

    pub(super) fn error(&self, message: impl std::fmt::Display) -> StoreError {
        StoreError::Database {
            path: self.label.to_string(),
            message: message.to_string(),
        }
    }

    pub(super) fn corrupt(&self, job: &str, message: String) -> StoreError {
        StoreError::Corrupt {
            path: self.label.to_string(),
            job: job.to_owned(),
            message,
        }
    }

    pub(super) fn dropped(label: &str) -> StoreError {
        StoreError::Database {
            path: label.to_owned(),
            message: "the store stopped before the change was made".to_owned(),
        }
    }

    /// Runs `work` on a pool connection and waits for it.
    pub(super) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, result) = std::sync::mpsc::sync_channel(1);
        self.pool.submit(Box::new(move |connection| {
            let _ = reply.send(work(connection));
        }));
        result
            .recv()
            .unwrap_or_else(|_| Err(Self::dropped(&self.label)))
    }

    /// [`Self::run`] for async callers: the calling thread is free meanwhile.
    pub(super) fn run_async<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<T> {
        let (reply, result) = tokio::sync::oneshot::channel();
        self.pool.submit(Box::new(move |connection| {
            let _ = reply.send(work(connection));
        }));
        let label = self.label.clone();
        Box::pin(async move { result.await.unwrap_or_else(|_| Err(Self::dropped(&label))) })
    }

    /// A change of `rules.rs`, as one transaction.
    pub(super) fn change<T: Send + 'static>(
        &self,
        mut body: impl FnMut(&mut PgRows<'_, '_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.run(move |connection| connection.change(&mut body))
    }

    pub(super) fn change_async<T: Send + 'static>(
        &self,
        mut body: impl FnMut(&mut PgRows<'_, '_>) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<T> {
        self.run_async(move |connection| connection.change(&mut body))
    }

    /// A read of committed rows, each made into a `T`.
    pub(super) fn query<T: Send + 'static>(
        &self,
        sql: &'static str,
        params: OwnedParams,
        each: impl Fn(&postgres::Row, &str) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<Vec<T>, StoreError> {
        let label = self.label.clone();
        self.run(move |connection| {
            let params: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|param| param.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let rows = read(connection, sql, &params)?;
            rows.iter().map(|row| each(row, &label)).collect()
        })
    }

    /// The job a claim took, parsed on the caller's thread rather than a pool thread.
    /// Unreadable, it is set aside (see [`rules::set_aside`]) and the claim fails with why.
    pub(super) async fn parse_claimed(
        self,
        claimed: Option<ClaimedRow>,
    ) -> Result<Option<ClaimedJob>, StoreError> {
        let Some(row) = claimed else { return Ok(None) };
        match row.parse(|id, e| self.corrupt(id, e)) {
            Ok(job) => Ok(Some(job)),
            Err(error) => {
                self.change_async(self.set_aside(&row, &error)).await?;
                Err(error)
            }
        }
    }

    /// The change that takes the unreadable job of `row` out of the runnable ones, as `why`.
    pub(super) fn set_aside(
        &self,
        row: &ClaimedRow,
        why: &StoreError,
    ) -> impl FnMut(&mut PgRows<'_, '_>) -> Result<(), StoreError> + Send + 'static + use<> {
        let (id, owner, at, why) = (row.id.clone(), row.owner.clone(), self.now(), why.clone());
        move |rows| rules::set_aside(rows, &id, &owner, at, &why)
    }

    /// The summary rows that `sql` selects: id, piece, status, movement, wait reason, parent,
    /// created and updated at.
    pub(super) fn summaries(
        &self,
        sql: &'static str,
        params: OwnedParams,
    ) -> Result<Vec<JobSummary>, StoreError> {
        self.query(sql, params, |row, label| {
            let id: String = column(row, 0, label)?;
            let status: String = column(row, 2, label)?;
            let status = JobStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
                path: label.to_owned(),
                job: id.clone(),
                message: format!("unknown status `{status}`"),
            })?;
            Ok(JobSummary {
                piece: column(row, 1, label)?,
                status,
                movement: column(row, 3, label)?,
                wait_reason: column(row, 4, label)?,
                parent: column(row, 5, label)?,
                created_at_ms: column(row, 6, label)?,
                updated_at_ms: column(row, 7, label)?,
                id,
            })
        })
    }
}
