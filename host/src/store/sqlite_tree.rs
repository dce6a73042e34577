//! Parent and child jobs in the SQLite store: a parent waiting for its subtasks becomes runnable
//! when the last of them ends, and a cancel reaches every descendant and wins over a park that
//! the run it was asked for saves afterwards.
//!
//! Invariant: these run inside the transaction of the change that caused them (a save, a
//! cancel), so a child's end and its parent's release are one atomic step: no child end is
//! missed and no parent is released twice.

use rusqlite::OptionalExtension;

use super::{Cached, Db, EventBatch, JobRow};
use crate::engine::{JobEvent, JobState, JobStatus, WaitRequest};
use crate::plugin::{Resume, SubtaskResult, SubtaskStatus};
use crate::store::StoreError;

/// What `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job (and its descendants that were not running) ended as cancelled.
    Cancelled,
    /// The job is running in a live runner: it was asked to stop at its next step.
    Requested,
}

impl Db {
    /// Makes `parent` runnable with its children's results if it waits for subtasks and every
    /// child it waits for has ended. Ids that name no child of `parent` are left out (the tool
    /// reports them as missing): no job reads another's result.
    pub(super) fn release_parent(
        &self,
        tx: &rusqlite::Connection,
        parent: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        let (status, state, pending, _) = match self.row(tx, parent) {
            Ok(row) => row,
            Err(StoreError::NotFound(_)) => return Ok(()),
            Err(error) => return Err(error),
        };
        if status != JobStatus::WaitingSubtasks || pending.is_some() {
            return Ok(());
        }
        let Some(WaitRequest::Subtasks { job_ids }) = state.wait.as_ref().map(|w| &w.request)
        else {
            return Ok(());
        };
        let mut results = Vec::new();
        for id in job_ids {
            let child = tx
                .row_cached(
                    "SELECT status, state FROM jobs WHERE id = ?1 AND parent = ?2",
                    rusqlite::params![id, parent],
                    |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
                )
                .optional()
                .map_err(|e| self.db_error(e))?;
            let Some((child_status, child_state)) = child else {
                continue;
            };
            let status = match JobStatus::parse(&child_status) {
                Some(JobStatus::Completed) => SubtaskStatus::Completed,
                Some(JobStatus::Aborted) => SubtaskStatus::Aborted,
                Some(JobStatus::Cancelled) => SubtaskStatus::Cancelled,
                Some(JobStatus::Error) => SubtaskStatus::Failed,
                Some(_) => return Ok(()),
                None => return Err(self.corrupt(id, format!("unknown status `{child_status}`"))),
            };
            let child: JobState =
                serde_json::from_str(&child_state).map_err(|e| self.corrupt(id, e))?;
            results.push(SubtaskResult {
                job_id: id.clone(),
                status,
                output: child.result.unwrap_or_default(),
            });
        }
        self.make_runnable(tx, parent, &Resume::SubtasksDone(results), at)
    }

    /// After `job` was written: release it if it parked on children that already ended, and
    /// release its parent if it just ended.
    pub(super) fn after_write(
        &self,
        tx: &rusqlite::Connection,
        job: &JobRow,
        at: i64,
    ) -> Result<(), StoreError> {
        if job.status == JobStatus::WaitingSubtasks {
            self.release_parent(tx, &job.id, at)?;
        }
        if job.status.is_final()
            && let Some(parent) = &job.parent
        {
            self.release_parent(tx, parent, at)?;
        }
        Ok(())
    }

    /// Cancels `id` and its descendants inside one transaction.
    pub(super) fn cancel_tree(
        &self,
        tx: &rusqlite::Connection,
        id: &str,
        reason: &str,
        at: i64,
    ) -> Result<CancelOutcome, StoreError> {
        let (status, mut state, _, lease_until) = self.row(tx, id)?;
        if status.is_final() {
            return Err(StoreError::Conflict {
                job: id.to_owned(),
                status,
                action: "cancelled",
            });
        }
        let live_run = status == JobStatus::Running && lease_until.is_some_and(|until| until >= at);
        for child in self.children_in(tx, id)? {
            match self.cancel_tree(tx, &child, "its parent job was cancelled", at) {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        if live_run {
            tx.exec_cached("UPDATE jobs SET cancel_requested = 1 WHERE id = ?1", [id])
                .map_err(|e| self.db_error(e))?;
            return Ok(CancelOutcome::Requested);
        }
        state.status = JobStatus::Cancelled;
        state.wait = None;
        state.result = Some(reason.to_owned());
        let row = JobRow::of(&state).map_err(|e| self.db_error(e))?;
        self.write_state(tx, &row, at, None)?;
        let event = JobEvent::Finished {
            status: JobStatus::Cancelled,
            detail: reason.to_owned(),
        };
        let event = EventBatch::of(&[event]).map_err(|e| self.db_error(e))?;
        self.append(tx, id, &event, at)?;
        self.after_write(tx, &row, at)?;
        Ok(CancelOutcome::Cancelled)
    }

    /// A run that is saved waiting (or runnable again) after a cancel was asked for it while it
    /// ran is saved cancelled instead, with its `finished` event: the cancel is never lost to a
    /// park. `None` when the save stands as it is.
    pub(super) fn cancel_overrides(
        &self,
        tx: &rusqlite::Connection,
        job: &JobRow,
        owner: &str,
    ) -> Result<Option<(JobRow, EventBatch)>, StoreError> {
        if job.status.is_final() || job.status == JobStatus::Running {
            return Ok(None);
        }
        let requested = tx
            .row_cached(
                "SELECT cancel_requested FROM jobs WHERE id = ?1 AND lease_owner = ?2",
                rusqlite::params![job.id, owner],
                |row| row.get::<_, bool>(0),
            )
            .optional()
            .map_err(|e| self.db_error(e))?
            .unwrap_or(false);
        if !requested {
            return Ok(None);
        }
        let mut state: JobState =
            serde_json::from_str(&job.state).map_err(|e| self.corrupt(&job.id, e))?;
        let detail = "cancelled while it ran: the cancel was asked for before the run stopped";
        state.status = JobStatus::Cancelled;
        state.wait = None;
        state.wait_expires_at_ms = None;
        state.result = Some(detail.to_owned());
        let row = JobRow::of(&state).map_err(|e| self.db_error(e))?;
        let finished = EventBatch::of(&[JobEvent::Finished {
            status: JobStatus::Cancelled,
            detail: detail.to_owned(),
        }])
        .map_err(|e| self.db_error(e))?;
        Ok(Some((row, finished)))
    }

    fn children_in(
        &self,
        tx: &rusqlite::Connection,
        parent: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut query = tx
            .prepare_cached("SELECT id FROM jobs WHERE parent = ?1")
            .map_err(|e| self.db_error(e))?;
        query
            .query_map([parent], |row| row.get::<_, String>(0))
            .map_err(|e| self.db_error(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.db_error(e))
    }
}
