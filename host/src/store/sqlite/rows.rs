//! The statements of [`Rows`] in SQLite, inside the writer's transaction.
//!
//! Invariant: every statement goes through the connection's prepared-statement cache, and
//! reads see the transaction's own writes; the file's write lock, taken when the writer's
//! transaction began, keeps every job from other processes until the commit. A job's state and
//! a save's events and messages are written packed (`packed.rs`). A job's state is its `jobs`
//! row's `state` when that is set (a state that fits there), and otherwise its `job_states`
//! row's: every job has one from its creation, left as it was while the state is in the row,
//! so that a state moving into the row costs no write. A job's log is the chain of its `saves`
//! rows from its row's `log_head` back through each row's `prev`.

use rusqlite::{Connection, OptionalExtension, params};

use super::Db;
use super::packed::{Unpacked, pack};
use super::writer::Tx;
use crate::engine::JobStatus;
use crate::store::StoreError;
use crate::store::record::JobRow;
use crate::store::rows::{LogRow, RowText, Rows};

/// Every statement through SQLite's prepared-statement cache: parsing SQL anew for each call
/// was a large share of a park/resume cycle.
pub(super) trait Cached {
    fn exec_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
    fn row_cached<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
        read: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T>;
    fn rows_cached<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
        read: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Vec<T>>;
}

impl Cached for Connection {
    fn exec_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn row_cached<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
        read: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.prepare_cached(sql)?.query_row(params, read)
    }

    fn rows_cached<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
        read: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Vec<T>> {
        self.prepare_cached(sql)?.query_map(params, read)?.collect()
    }
}

/// The part of a `jobs` row other than its state, at its largest: a job id and its parent's,
/// the piece and movement, a status, a wait reason, a pinned plugin's hash, a lease owner and
/// the numbers.
const ROW_WITHOUT_STATE: usize = 256;

/// The most bytes a packed state may take to be kept in its job's row, in a file of
/// `page_size`-byte pages: as many as keep the row on its page. SQLite spills a row of more
/// than `page_size - 35` bytes onto overflow pages, which every change of the row (a claim, an
/// answer, a lease renewed) would write again; on its page, the state costs such a change
/// nothing, as a change writes the page whole whatever it holds.
pub(super) fn inline_state_bytes(page_size: usize) -> usize {
    page_size.saturating_sub(35 + ROW_WITHOUT_STATE)
}

/// A state read back: the job has none when neither place holds it.
fn state_text(db: &Db, id: &str, state: Option<Unpacked>) -> Result<String, StoreError> {
    state
        .ok_or_else(|| db.corrupt(id, "the job has no state"))?
        .0
        .map_err(|e| db.corrupt(id, e))
}

/// A job's row: status, state, pending answer, lease end.
pub(super) fn job_row(db: &Db, connection: &Connection, id: &str) -> Result<RowText, StoreError> {
    let row = connection
        .row_cached(
            "SELECT j.status, COALESCE(j.state, s.state), j.pending_resume, j.lease_until_ms \
             FROM jobs j LEFT JOIN job_states s ON s.id = j.id WHERE j.id = ?1",
            [id],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, Option<Unpacked>>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, Option<i64>>(3)?,
                ))
            },
        )
        .optional()
        .map_err(|e| db.db_error(e))?
        .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
    let status = JobStatus::parse(&row.0)
        .ok_or_else(|| db.corrupt(id, format!("unknown status `{}`", row.0)))?;
    Ok(RowText {
        status,
        state: state_text(db, id, row.1)?,
        pending_resume: row.2,
        lease_until_ms: row.3,
    })
}

/// The rows of `id`'s log with the columns `c(prev, …)` names, newest first, going on to a
/// row's `prev` while what follows `c.prev` holds: a walk of the chain, one look-up by rowid
/// a row. Completed by a `SELECT` from `c`.
macro_rules! log_walk {
    (c(prev, $($column:ident),+) $(while $more:literal)?) => {
        concat!(
            "WITH RECURSIVE c(prev", $(", ", stringify!($column),)+ ") AS (SELECT s.prev",
            $(", s.", stringify!($column),)+
            " FROM jobs j JOIN saves s ON s.id = j.log_head WHERE j.id = ?1 \
             UNION ALL SELECT s.prev", $(", s.", stringify!($column),)+
            " FROM c JOIN saves s ON s.id = c.prev", $(" WHERE ", $more,)? ") "
        )
    };
}
pub(super) use log_walk;

/// A save's events and messages as one text, as its row's `events` column holds them: the
/// events' JSON, then a newline and the messages' JSON when there are any. Packed as one, the
/// messages cost little, as they repeat much of the events (a tool call's arguments, its
/// answer). Compact JSON has no newline of its own, so the first one divides the two. A row
/// written before schema 7 has no newline there, and its messages in its `messages` column.
fn log_text(events: &str, messages: Option<&str>) -> String {
    match messages {
        Some(messages) => format!("{events}\n{messages}"),
        None => events.to_owned(),
    }
}

/// The events of a row's [`log_text`].
pub(super) fn events_of(mut text: String) -> String {
    if let Some(end) = text.find('\n') {
        text.truncate(end);
    }
    text
}

/// The messages of a row's [`log_text`], if it holds any.
fn messages_of(text: &str) -> Option<String> {
    text.split_once('\n')
        .map(|(_, messages)| messages.to_owned())
}

/// The message batches of `id`'s log, in order.
pub(super) fn message_batches(
    db: &Db,
    connection: &Connection,
    id: &str,
) -> Result<Vec<(usize, String)>, StoreError> {
    connection
        .rows_cached(
            concat!(
                log_walk!(c(prev, batch, messages_from, messages, events)),
                "SELECT messages_from, messages, events FROM c WHERE messages_from IS NOT NULL \
                 ORDER BY batch"
            ),
            [id],
            |row| {
                let messages = match row.get::<_, Option<Unpacked>>(1)? {
                    Some(before_schema_7) => before_schema_7.0,
                    None => row.get::<_, Unpacked>(2)?.0.and_then(|text| {
                        messages_of(&text)
                            .ok_or_else(|| "a save without the messages it counts".to_owned())
                    }),
                };
                Ok((row.get::<_, i64>(0)? as usize, messages))
            },
        )
        .map_err(|e| db.db_error(e))?
        .into_iter()
        .map(|(first, messages)| Ok((first, messages?)))
        .collect::<Result<_, String>>()
        .map_err(|e| db.corrupt(id, e))
}

/// The writer's transaction as the store's rules see it.
pub(super) struct SqliteRows<'a, 'c> {
    pub db: &'a Db,
    pub tx: &'a Tx<'c>,
}

impl SqliteRows<'_, '_> {
    fn exec(&self, sql: &str, params: impl rusqlite::Params) -> Result<usize, StoreError> {
        self.tx
            .exec_cached(sql, params)
            .map_err(|e| self.db.db_error(e))
    }
}

impl Rows for SqliteRows<'_, '_> {
    fn db_error(&self, error: impl std::fmt::Display) -> StoreError {
        self.db.db_error(error)
    }

    fn corrupt(&self, job: &str, error: impl std::fmt::Display) -> StoreError {
        self.db.corrupt(job, error)
    }

    fn insert_job(&mut self, row: &JobRow, at: i64) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO jobs (id, piece, status, movement, parent, created_at_ms, \
             updated_at_ms) VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?5)",
            params![row.id, row.piece, row.movement, row.parent, at],
        )?;
        // In `job_states` even when it would fit the row: a state that grows at its first
        // park (they mostly do) then rewrites that row in place instead of inserting one.
        self.exec(
            "INSERT INTO job_states (id, state) VALUES (?1, ?2)",
            params![row.id, pack(&row.state)],
        )
        .map(drop)
    }

    fn job(&mut self, id: &str) -> Result<RowText, StoreError> {
        job_row(self.db, self.tx, id)
    }

    fn child(&mut self, id: &str, parent: &str) -> Result<Option<(String, String)>, StoreError> {
        self.tx
            .row_cached(
                "SELECT j.status, COALESCE(j.state, s.state) FROM jobs j \
                 LEFT JOIN job_states s ON s.id = j.id WHERE j.id = ?1 AND j.parent = ?2",
                params![id, parent],
                |row| Ok((row.get(0)?, row.get::<_, Option<Unpacked>>(1)?)),
            )
            .optional()
            .map_err(|e| self.db.db_error(e))?
            .map(|(status, state)| Ok((status, state_text(self.db, id, state)?)))
            .transpose()
    }

    fn children(&mut self, parent: &str) -> Result<Vec<String>, StoreError> {
        self.tx
            .rows_cached("SELECT id FROM jobs WHERE parent = ?1", [parent], |row| {
                row.get(0)
            })
            .map_err(|e| self.db.db_error(e))
    }

    fn write_state(
        &mut self,
        job: &JobRow,
        at: i64,
        owner: Option<&str>,
    ) -> Result<usize, StoreError> {
        let still_running = job.status == JobStatus::Running;
        let state = pack(&job.state);
        let inline = state.len() <= inline_state_bytes(self.db.page_size);
        let written = self.exec(
            "UPDATE jobs SET status = ?2, movement = ?3, wait_reason = ?4, parked_plugin = ?5, \
             pending_resume = NULL, updated_at_ms = ?6, wait_expires_at_ms = ?9, piece = ?10, \
             state = ?11, lease_owner = CASE WHEN ?7 THEN lease_owner END, \
             lease_until_ms = CASE WHEN ?7 THEN lease_until_ms END \
             WHERE id = ?1 AND (?8 IS NULL OR lease_owner = ?8)",
            params![
                job.id,
                job.status.as_str(),
                job.movement,
                job.wait_reason,
                job.parked_plugin,
                at,
                still_running,
                owner,
                job.wait_expires_at_ms,
                job.piece,
                inline.then_some(&state)
            ],
        )?;
        if written > 0 && !inline {
            self.exec(
                "INSERT INTO job_states (id, state) VALUES (?1, ?2) \
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state",
                params![job.id, state],
            )?;
        }
        Ok(written)
    }

    fn make_runnable(&mut self, id: &str, resume: &str, at: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE jobs SET status = 'pending', pending_resume = ?2, updated_at_ms = ?3, \
             wait_expires_at_ms = NULL WHERE id = ?1",
            params![id, resume, at],
        )
        .map(drop)
    }

    fn take_lease(&mut self, id: &str, owner: &str, until: i64, at: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE jobs SET status = 'running', lease_owner = ?2, lease_until_ms = ?3, \
             updated_at_ms = ?4 WHERE id = ?1",
            params![id, owner, until, at],
        )
        .map(drop)
    }

    fn next_runnable(&mut self, at: i64) -> Result<Option<String>, StoreError> {
        // Two indexed look-ups rather than one query with OR, which would scan every row: a
        // store holds many parked jobs and few runnable ones.
        let pending = self
            .tx
            .row_cached(
                "SELECT id FROM jobs WHERE status = 'pending' ORDER BY updated_at_ms, id LIMIT 1",
                [],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.db.db_error(e))?;
        if pending.is_some() {
            return Ok(pending);
        }
        self.tx
            .row_cached(
                "SELECT id FROM jobs WHERE status = 'running' AND lease_until_ms < ?1 \
                 ORDER BY updated_at_ms, id LIMIT 1",
                [at],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.db.db_error(e))
    }

    fn set_aside(&mut self, id: &str, owner: &str, at: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE jobs SET status = 'error', lease_owner = NULL, lease_until_ms = NULL, \
             updated_at_ms = ?2 WHERE id = ?1 AND lease_owner = ?3",
            params![id, at, owner],
        )
        .map(drop)
    }

    fn ask_cancel(&mut self, id: &str, reason: &str) -> Result<(), StoreError> {
        self.exec(
            "UPDATE jobs SET cancel_requested = 1, \
             cancel_reason = COALESCE(cancel_reason, ?2) WHERE id = ?1",
            params![id, reason],
        )
        .map(drop)
    }

    fn cancel_asked(
        &mut self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Option<String>>, StoreError> {
        self.tx
            .row_cached(
                "SELECT cancel_reason FROM jobs WHERE id = ?1 AND lease_owner = ?2 \
                 AND cancel_requested",
                params![id, owner],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.db.db_error(e))
    }

    fn renew(
        &mut self,
        id: &str,
        owner: &str,
        until: i64,
    ) -> Result<Option<(bool, Option<String>)>, StoreError> {
        self.tx
            .row_cached(
                "UPDATE jobs SET lease_until_ms = ?3 WHERE id = ?1 AND lease_owner = ?2 \
                 AND status = 'running' RETURNING cancel_requested, cancel_reason",
                params![id, owner, until],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(|e| self.db.db_error(e))
    }

    fn expire(&mut self, at: i64, expired: &str) -> Result<usize, StoreError> {
        self.exec(
            "UPDATE jobs SET status = 'pending', pending_resume = ?2, updated_at_ms = ?1, \
             wait_expires_at_ms = NULL \
             WHERE wait_expires_at_ms <= ?1 AND pending_resume IS NULL \
             AND status IN ('waiting_human', 'waiting_subtasks')",
            params![at, expired],
        )
    }

    fn last_batch(&mut self, id: &str) -> Result<(i64, i64), StoreError> {
        self.tx
            .row_cached(
                "SELECT s.batch, s.last_seq FROM jobs j JOIN saves s ON s.id = j.log_head \
                 WHERE j.id = ?1",
                [id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.db.db_error(e))
    }

    fn insert_batch(&mut self, id: &str, row: &LogRow<'_>) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO saves (job_id, batch, first_seq, last_seq, at_ms, events, \
             messages_from, prev) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, (SELECT log_head FROM jobs WHERE id = ?1))",
            params![
                id,
                row.batch,
                row.first_seq,
                row.last_seq,
                row.at_ms,
                pack(&log_text(row.events, row.messages)),
                row.messages_from,
            ],
        )?;
        self.exec(
            "UPDATE jobs SET log_head = last_insert_rowid() WHERE id = ?1",
            [id],
        )
        .map(drop)
    }

    fn message_batches(&mut self, id: &str) -> Result<Vec<(usize, String)>, StoreError> {
        message_batches(self.db, self.tx, id)
    }

    fn finished_roots(
        &mut self,
        before: i64,
        after: (i64, &str),
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        self.tx
            .rows_cached(
                "SELECT id, updated_at_ms FROM jobs WHERE parent IS NULL \
                 AND status IN ('completed', 'aborted', 'cancelled', 'error') \
                 AND updated_at_ms < ?1 AND (updated_at_ms, id) > (?2, ?3) \
                 ORDER BY updated_at_ms, id LIMIT ?4",
                params![before, after.0, after.1, limit as i64],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(|e| self.db.db_error(e))
    }

    fn delete_job(&mut self, id: &str) -> Result<(), StoreError> {
        self.exec(
            concat!(
                log_walk!(c(prev, id)),
                "DELETE FROM saves WHERE id IN (SELECT id FROM c)"
            ),
            [id],
        )?;
        self.exec("DELETE FROM job_states WHERE id = ?1", [id])?;
        self.exec("DELETE FROM jobs WHERE id = ?1", [id]).map(drop)
    }

    fn keep_secret(
        &mut self,
        name: &str,
        candidate: &[u8],
        at: i64,
    ) -> Result<Vec<u8>, StoreError> {
        self.exec(
            "INSERT INTO secrets (name, value, created_at_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO NOTHING",
            params![name, candidate, at],
        )?;
        self.tx
            .row_cached("SELECT value FROM secrets WHERE name = ?1", [name], |row| {
                row.get::<_, Vec<u8>>(0)
            })
            .map_err(|e| self.db.db_error(e))
    }

    fn spend(&mut self, token: &str, until: i64, at: i64) -> Result<bool, StoreError> {
        self.exec("DELETE FROM spent WHERE until_ms < ?1", [at])?;
        let added = self.exec(
            "INSERT INTO spent (token, until_ms) VALUES (?1, ?2) ON CONFLICT (token) DO NOTHING",
            params![token, until],
        )?;
        Ok(added == 1)
    }

    fn undone_on_error<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (db, tx) = (self.db, self.tx);
        tx.undone_on_error(db, || body(self))
    }
}
