//! What the store's rules (`rules.rs`, `tree.rs`) ask of a database inside one transaction:
//! each a single statement on the `jobs` table or the `saves` log, written once per backend.
//!
//! Invariant: a method reads or writes only what its name says, with the transaction's
//! guarantees: a change that reads a job with [`Rows::job`] and then writes it cannot
//! interleave with another change of that job (SQLite holds the file's write lock for the whole
//! transaction; PostgreSQL locks the row until the commit). Every error names the store.

use std::fmt::Display;

use super::StoreError;
use super::record::JobRow;
use crate::engine::JobStatus;

/// A job's row as a change reads it back, its state still as text.
pub(super) struct RowText {
    pub status: JobStatus,
    pub state: String,
    /// The answer a resumed run applies, as JSON.
    pub pending_resume: Option<String>,
    pub lease_until_ms: Option<i64>,
}

/// One batch of a job's log, as written by a save.
pub(super) struct LogRow<'a> {
    pub batch: i64,
    pub first_seq: i64,
    pub last_seq: i64,
    pub at_ms: i64,
    pub events: &'a str,
    /// Where the conversation is cut before `messages` are added.
    pub messages_from: Option<i64>,
    pub messages: Option<&'a str>,
}

/// The operations of one open transaction.
pub(super) trait Rows {
    /// A failure of the database itself, naming the store.
    fn db_error(&self, error: impl Display) -> StoreError;

    /// A job whose stored record cannot be read, naming the store.
    fn corrupt(&self, job: &str, error: impl Display) -> StoreError;

    /// Inserts a new pending job.
    fn insert_job(&mut self, row: &JobRow, at: i64) -> Result<(), StoreError>;

    /// A job's row, kept from other changes until this one commits; `NotFound` when there is
    /// none.
    fn job(&mut self, id: &str) -> Result<RowText, StoreError>;

    /// `id`'s status and state if it is a child of `parent`.
    fn child(&mut self, id: &str, parent: &str) -> Result<Option<(String, String)>, StoreError>;

    /// The ids of `parent`'s children, in no particular order.
    fn children(&mut self, parent: &str) -> Result<Vec<String>, StoreError>;

    /// Writes the job's columns and state and clears its pending answer; with `owner`, only
    /// while `owner` holds the lease, which is kept while the job is still running. Returns
    /// how many rows it wrote.
    fn write_state(
        &mut self,
        row: &JobRow,
        at: i64,
        owner: Option<&str>,
    ) -> Result<usize, StoreError>;

    /// Makes a waiting job pending with the answer (JSON) its next run applies.
    fn make_runnable(&mut self, id: &str, resume: &str, at: i64) -> Result<(), StoreError>;

    /// Marks `id` running under `owner` until `until`.
    fn take_lease(&mut self, id: &str, owner: &str, until: i64, at: i64) -> Result<(), StoreError>;

    /// The oldest runnable job: pending, or else running under a lease that ended before `at`.
    /// A job another open change already holds is passed over where the database can tell.
    fn next_runnable(&mut self, at: i64) -> Result<Option<String>, StoreError>;

    /// Marks `id` as `error` while `owner` holds its lease.
    fn set_aside(&mut self, id: &str, owner: &str, at: i64) -> Result<(), StoreError>;

    /// Asks the live run of `id` to stop; the first reason asked stands.
    fn ask_cancel(&mut self, id: &str, reason: &str) -> Result<(), StoreError>;

    /// Whether a cancel was asked of `id` while `owner` held it, and with which reason.
    fn cancel_asked(&mut self, id: &str, owner: &str)
    -> Result<Option<Option<String>>, StoreError>;

    /// Extends `owner`'s lease on the running job `id` to `until`; `None` when `owner` does not
    /// hold it; else whether a cancel was asked, and its reason.
    fn renew(
        &mut self,
        id: &str,
        owner: &str,
        until: i64,
    ) -> Result<Option<(bool, Option<String>)>, StoreError>;

    /// Makes every wait due at `at` pending with `expired` (JSON); how many.
    fn expire(&mut self, at: i64, expired: &str) -> Result<usize, StoreError>;

    /// The number and last event number of `id`'s last log batch; `(0, 0)` when it has none.
    fn last_batch(&mut self, id: &str) -> Result<(i64, i64), StoreError>;

    /// Appends a batch to `id`'s log.
    fn insert_batch(&mut self, id: &str, row: &LogRow<'_>) -> Result<(), StoreError>;

    /// The message batches of `id`'s log in order: where each starts, and its messages.
    fn message_batches(&mut self, id: &str) -> Result<Vec<(usize, String)>, StoreError>;

    /// Up to `limit` top-level jobs that ended before `before`, after `after` in the order of
    /// (ended at, id): their ids and when they ended.
    fn finished_roots(
        &mut self,
        before: i64,
        after: (i64, &str),
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError>;

    /// Deletes a job and its log.
    fn delete_job(&mut self, id: &str) -> Result<(), StoreError>;

    /// The secret `name` of this install: the one already kept, or else `candidate`, kept now.
    fn keep_secret(&mut self, name: &str, candidate: &[u8], at: i64)
    -> Result<Vec<u8>, StoreError>;

    /// Records `token` as spent until `until`, forgetting every token whose time ended before
    /// `at`; whether it was not spent before.
    fn spend(&mut self, token: &str, until: i64, at: i64) -> Result<bool, StoreError>;

    /// Runs `body`, a part of a change that may fail while the rest goes on, so that a failure
    /// leaves no trace of it.
    fn undone_on_error<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;
}

/// A job's status as stored, or why it is unreadable.
pub(super) fn parse_status(
    rows: &impl Rows,
    id: &str,
    status: &str,
) -> Result<JobStatus, StoreError> {
    JobStatus::parse(status).ok_or_else(|| rows.corrupt(id, format!("unknown status `{status}`")))
}
