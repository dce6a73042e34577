//! The statements of [`Rows`] in PostgreSQL, inside one transaction of a pool connection.
//!
//! Invariant: a change runs in `READ COMMITTED`, and every job it reads in order to write it
//! is read `FOR UPDATE`, so two changes of one job on two nodes take turns; the claim of the
//! next job skips rows another change holds (`SKIP LOCKED`) instead of queueing behind it. A
//! deadlock or serialization failure is remembered ([`PgRows::retry`]) so the pool runs the
//! change again from the start.

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{GenericClient, Row, Statement};

use crate::engine::JobStatus;
use crate::store::StoreError;
use crate::store::record::JobRow;
use crate::store::rows::{LogRow, RowText, Rows};

/// The statements a connection prepared, by their text: preparing costs a round trip.
#[derive(Default)]
pub(super) struct Statements(HashMap<&'static str, Statement>);

impl Statements {
    pub fn get(
        &mut self,
        client: &mut impl GenericClient,
        sql: &'static str,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql)?;
        self.0.insert(sql, statement.clone());
        Ok(statement)
    }
}

/// Whether the database rolled the transaction back so that it can be run again.
pub(super) fn is_retryable(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    error.code().is_some_and(|code| {
        *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// A database failure as the store reports it: the server's own message where it sent one.
pub(super) fn describe(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    // The client's own message is general ("error connecting to server"); its cause says why.
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// An open transaction as the store's rules see it.
pub(super) struct PgRows<'a, 't> {
    pub tx: &'a mut postgres::Transaction<'t>,
    pub statements: &'a mut Statements,
    /// The store, for errors.
    pub label: &'a str,
    /// A statement failed in a way that a new run of the whole change may not.
    pub retry: bool,
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl PgRows<'_, '_> {
    fn failed(&mut self, error: postgres::Error) -> StoreError {
        self.retry |= is_retryable(&error);
        StoreError::Database {
            path: self.label.to_owned(),
            message: describe(&error),
        }
    }

    fn query(&mut self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>, StoreError> {
        let statement = self
            .statements
            .get(self.tx, sql)
            .map_err(|e| self.failed(e))?;
        self.tx
            .query(&statement, params)
            .map_err(|e| self.failed(e))
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    fn execute(&mut self, sql: &'static str, params: Params<'_>) -> Result<usize, StoreError> {
        let statement = self
            .statements
            .get(self.tx, sql)
            .map_err(|e| self.failed(e))?;
        self.tx
            .execute(&statement, params)
            .map(|count| count as usize)
            .map_err(|e| self.failed(e))
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.tx.batch_execute(sql).map_err(|e| self.failed(e))
    }
}

/// A column read as `T`, or the store's error naming it.
pub(super) fn column<'r, T: postgres::types::FromSql<'r>>(
    row: &'r Row,
    index: usize,
    label: &str,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(|e| StoreError::Database {
        path: label.to_owned(),
        message: format!("column {index}: {}", describe(&e)),
    })
}

/// A job's row, read with `sql` (which selects status, state, pending answer and lease end).
pub(super) fn row_text(row: Option<Row>, id: &str, label: &str) -> Result<RowText, StoreError> {
    let row = row.ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
    let status: String = column(&row, 0, label)?;
    let status = JobStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
        path: label.to_owned(),
        job: id.to_owned(),
        message: format!("unknown status `{status}`"),
    })?;
    Ok(RowText {
        status,
        state: column(&row, 1, label)?,
        pending_resume: column(&row, 2, label)?,
        lease_until_ms: column(&row, 3, label)?,
    })
}

/// The message batches of a job's log, from the rows `messages_from, messages` in order.
pub(super) fn message_batches(
    rows: Vec<Row>,
    label: &str,
) -> Result<Vec<(usize, String)>, StoreError> {
    rows.iter()
        .map(|row| {
            Ok((
                column::<i64>(row, 0, label)? as usize,
                column(row, 1, label)?,
            ))
        })
        .collect()
}

pub(super) const JOB_FOR_UPDATE: &str = "SELECT j.status, s.state, j.pending_resume, \
     j.lease_until_ms FROM jobs j JOIN job_states s USING (id) WHERE j.id = $1 FOR UPDATE OF j";
pub(super) const JOB: &str = "SELECT j.status, s.state, j.pending_resume, j.lease_until_ms \
     FROM jobs j JOIN job_states s USING (id) WHERE j.id = $1";
pub(super) const MESSAGE_BATCHES: &str = "SELECT messages_from, messages FROM saves \
     WHERE job_id = $1 AND messages IS NOT NULL ORDER BY batch";

impl PgRows<'_, '_> {
    /// Keeps a plugin version's bytes under their content hash; kept already, nothing changes.
    pub fn keep_component(
        &mut self,
        content_hash: &str,
        name: &str,
        bytes: &[u8],
        at: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO components (content_hash, name, bytes, added_at_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (content_hash) DO NOTHING",
            &[&content_hash, &name, &bytes, &at],
        )
        .map(drop)
    }

    /// Records `content_hash` (`None`: removed) as plugin `name`'s version on every node, and
    /// tells the nodes at commit.
    pub fn publish_plugin(
        &mut self,
        name: &str,
        content_hash: Option<&str>,
        at: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "WITH published AS ( \
                 INSERT INTO plugins (name, content_hash, changed_at_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE \
                 SET content_hash = EXCLUDED.content_hash, changed_at_ms = EXCLUDED.changed_at_ms \
                 RETURNING name) \
             SELECT pg_notify('maestro_plugins', name) FROM published",
            &[&name, &content_hash, &at],
        )
        .map(drop)
    }
}

impl Rows for PgRows<'_, '_> {
    fn db_error(&self, error: impl std::fmt::Display) -> StoreError {
        StoreError::Database {
            path: self.label.to_owned(),
            message: error.to_string(),
        }
    }

    fn corrupt(&self, job: &str, error: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            path: self.label.to_owned(),
            job: job.to_owned(),
            message: error.to_string(),
        }
    }

    fn insert_job(&mut self, row: &JobRow, at: i64) -> Result<(), StoreError> {
        self.query(
            "WITH written AS (INSERT INTO jobs (id, piece, status, movement, parent, \
             created_at_ms, updated_at_ms) VALUES ($1, $2, 'pending', $3, $4, $6, $6) \
             RETURNING id, status), \
             stated AS (INSERT INTO job_states (id, state) SELECT id, $5 FROM written) \
             SELECT pg_notify('maestro_jobs', status || ' ' || id) FROM written",
            &[
                &row.id,
                &row.piece,
                &row.movement,
                &row.parent,
                &row.state,
                &at,
            ],
        )
        .map(drop)
    }

    fn job(&mut self, id: &str) -> Result<RowText, StoreError> {
        let row = self.query_opt(JOB_FOR_UPDATE, &[&id])?;
        row_text(row, id, self.label)
    }

    fn child(&mut self, id: &str, parent: &str) -> Result<Option<(String, String)>, StoreError> {
        let row = self.query_opt(
            "SELECT j.status, s.state FROM jobs j JOIN job_states s USING (id) \
             WHERE j.id = $1 AND j.parent = $2",
            &[&id, &parent],
        )?;
        row.map(|row| Ok((column(&row, 0, self.label)?, column(&row, 1, self.label)?)))
            .transpose()
    }

    fn children(&mut self, parent: &str) -> Result<Vec<String>, StoreError> {
        let rows = self.query("SELECT id FROM jobs WHERE parent = $1", &[&parent])?;
        rows.iter().map(|row| column(row, 0, self.label)).collect()
    }

    fn write_state(
        &mut self,
        job: &JobRow,
        at: i64,
        owner: Option<&str>,
    ) -> Result<usize, StoreError> {
        let still_running = job.status == JobStatus::Running;
        self.query(
            "WITH written AS (UPDATE jobs SET status = $2, movement = $3, wait_reason = $4, \
             parked_plugin = $5, pending_resume = NULL, updated_at_ms = $7, \
             wait_expires_at_ms = $10, piece = $11, \
             lease_owner = CASE WHEN $8::boolean THEN lease_owner END, \
             lease_until_ms = CASE WHEN $8::boolean THEN lease_until_ms END \
             WHERE id = $1 AND ($9::text IS NULL OR lease_owner = $9::text) \
             RETURNING id, status), \
             stated AS (UPDATE job_states SET state = $6 \
             WHERE id IN (SELECT id FROM written)) \
             SELECT pg_notify('maestro_jobs', status || ' ' || id) FROM written",
            &[
                &job.id,
                &job.status.as_str(),
                &job.movement,
                &job.wait_reason,
                &job.parked_plugin,
                &job.state,
                &at,
                &still_running,
                &owner,
                &job.wait_expires_at_ms,
                &job.piece,
            ],
        )
        .map(|written| written.len())
    }

    fn make_runnable(&mut self, id: &str, resume: &str, at: i64) -> Result<(), StoreError> {
        self.query(
            "WITH written AS (UPDATE jobs SET status = 'pending', pending_resume = $2, \
             updated_at_ms = $3, wait_expires_at_ms = NULL WHERE id = $1 RETURNING id, status) \
             SELECT pg_notify('maestro_jobs', status || ' ' || id) FROM written",
            &[&id, &resume, &at],
        )
        .map(drop)
    }

    fn take_lease(&mut self, id: &str, owner: &str, until: i64, at: i64) -> Result<(), StoreError> {
        self.execute(
            "UPDATE jobs SET status = 'running', lease_owner = $2, lease_until_ms = $3, \
             updated_at_ms = $4 WHERE id = $1",
            &[&id, &owner, &until, &at],
        )
        .map(drop)
    }

    fn next_runnable(&mut self, at: i64) -> Result<Option<String>, StoreError> {
        let pending = self.query_opt(
            "SELECT id FROM jobs WHERE status = 'pending' ORDER BY updated_at_ms, id LIMIT 1 \
             FOR UPDATE SKIP LOCKED",
            &[],
        )?;
        let row = match pending {
            Some(row) => Some(row),
            None => self.query_opt(
                "SELECT id FROM jobs WHERE status = 'running' AND lease_until_ms < $1 \
                 ORDER BY updated_at_ms, id LIMIT 1 FOR UPDATE SKIP LOCKED",
                &[&at],
            )?,
        };
        row.map(|row| column(&row, 0, self.label)).transpose()
    }

    fn set_aside(&mut self, id: &str, owner: &str, at: i64) -> Result<(), StoreError> {
        self.query(
            "WITH written AS (UPDATE jobs SET status = 'error', lease_owner = NULL, \
             lease_until_ms = NULL, updated_at_ms = $2 WHERE id = $1 AND lease_owner = $3 \
             RETURNING id, status) SELECT pg_notify('maestro_jobs', status || ' ' || id) \
             FROM written",
            &[&id, &at, &owner],
        )
        .map(drop)
    }

    fn ask_cancel(&mut self, id: &str, reason: &str) -> Result<(), StoreError> {
        self.execute(
            "UPDATE jobs SET cancel_requested = true, \
             cancel_reason = COALESCE(cancel_reason, $2) WHERE id = $1",
            &[&id, &reason],
        )
        .map(drop)
    }

    fn cancel_asked(
        &mut self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Option<String>>, StoreError> {
        let row = self.query_opt(
            "SELECT cancel_reason FROM jobs WHERE id = $1 AND lease_owner = $2 \
             AND cancel_requested",
            &[&id, &owner],
        )?;
        row.map(|row| column(&row, 0, self.label)).transpose()
    }

    fn renew(
        &mut self,
        id: &str,
        owner: &str,
        until: i64,
    ) -> Result<Option<(bool, Option<String>)>, StoreError> {
        let row = self.query_opt(
            "UPDATE jobs SET lease_until_ms = $3 WHERE id = $1 AND lease_owner = $2 \
             AND status = 'running' RETURNING cancel_requested, cancel_reason",
            &[&id, &owner, &until],
        )?;
        row.map(|row| Ok((column(&row, 0, self.label)?, column(&row, 1, self.label)?)))
            .transpose()
    }

    fn expire(&mut self, at: i64, expired: &str) -> Result<usize, StoreError> {
        self.query(
            "WITH written AS (UPDATE jobs SET status = 'pending', pending_resume = $2, \
             updated_at_ms = $1, wait_expires_at_ms = NULL \
             WHERE wait_expires_at_ms <= $1 AND pending_resume IS NULL \
             AND status IN ('waiting_human', 'waiting_subtasks') RETURNING id, status) \
             SELECT pg_notify('maestro_jobs', status || ' ' || id) FROM written",
            &[&at, &expired],
        )
        .map(|written| written.len())
    }

    fn last_batch(&mut self, id: &str) -> Result<(i64, i64), StoreError> {
        let row = self.query_opt(
            "SELECT batch, last_seq FROM saves WHERE job_id = $1 ORDER BY batch DESC LIMIT 1",
            &[&id],
        )?;
        match row {
            Some(row) => Ok((column(&row, 0, self.label)?, column(&row, 1, self.label)?)),
            None => Ok((0, 0)),
        }
    }

    fn insert_batch(&mut self, id: &str, row: &LogRow<'_>) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO saves (job_id, batch, first_seq, last_seq, at_ms, events, \
             messages_from, messages) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &id,
                &row.batch,
                &row.first_seq,
                &row.last_seq,
                &row.at_ms,
                &row.events,
                &row.messages_from,
                &row.messages,
            ],
        )
        .map(drop)
    }

    fn message_batches(&mut self, id: &str) -> Result<Vec<(usize, String)>, StoreError> {
        let rows = self.query(MESSAGE_BATCHES, &[&id])?;
        message_batches(rows, self.label)
    }

    fn finished_roots(
        &mut self,
        before: i64,
        after: (i64, &str),
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = self.query(
            "SELECT id, updated_at_ms FROM jobs WHERE parent IS NULL \
             AND status IN ('completed', 'aborted', 'cancelled', 'error') \
             AND updated_at_ms < $1 AND (updated_at_ms, id) > ($2, $3) \
             ORDER BY updated_at_ms, id LIMIT $4",
            &[&before, &after.0, &after.1, &(limit as i64)],
        )?;
        rows.iter()
            .map(|row| Ok((column(row, 0, self.label)?, column(row, 1, self.label)?)))
            .collect()
    }

    fn delete_job(&mut self, id: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM saves WHERE job_id = $1", &[&id])?;
        self.execute("DELETE FROM jobs WHERE id = $1", &[&id])
            .map(drop)
    }

    fn keep_secret(
        &mut self,
        name: &str,
        candidate: &[u8],
        at: i64,
    ) -> Result<Vec<u8>, StoreError> {
        self.execute(
            "INSERT INTO secrets (name, value, created_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
            &[&name, &candidate, &at],
        )?;
        let row = self
            .query_opt("SELECT value FROM secrets WHERE name = $1", &[&name])?
            .ok_or_else(|| self.db_error(format!("secret `{name}` vanished as it was kept")))?;
        column(&row, 0, self.label)
    }

    fn spend(&mut self, token: &str, until: i64, at: i64) -> Result<bool, StoreError> {
        self.execute("DELETE FROM spent WHERE until_ms < $1", &[&at])?;
        let added = self.execute(
            "INSERT INTO spent (token, until_ms) VALUES ($1, $2) ON CONFLICT (token) DO NOTHING",
            &[&token, &until],
        )?;
        Ok(added == 1)
    }

    fn undone_on_error<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.batch("SAVEPOINT part")?;
        let result = body(self);
        if result.is_err() {
            self.batch("ROLLBACK TO SAVEPOINT part")?;
        }
        self.batch("RELEASE SAVEPOINT part")?;
        result
    }
}
