//! Parent and child jobs in the SQLite store: a parent waiting for its subtasks becomes runnable
//! when the last of them ends; a parent waiting for its worker becomes runnable when the worker
//! asks a question, hands in a draft or ends, with that news; and a cancel reaches every
//! descendant and wins over a park that the run it was asked for saves afterwards. Retention
//! deletes whole trees only, once every job of one has ended.
//!
//! Invariant: these run inside the transaction of the change that caused them (a save, a
//! cancel), so a child's end and its parent's release are one atomic step: no child end is
//! missed and no parent is released twice. A parent that starts waiting for its worker is told
//! at once what the worker already did, so news that came while the parent ran is not lost.

use rusqlite::OptionalExtension;

use super::{Cached, Db};
use crate::engine::{
    Answer, EngineAnswer, JobState, JobStatus, WaitRequest, WorkerNews, end_outside, facts_of,
};
use crate::phase::ArtifactDraft;
use crate::plugin::{Resume, SubtaskResult, SubtaskStatus};
use crate::store::StoreError;
use crate::store::record::{EventBatch, JobRow, MessageTail};

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
            let status = JobStatus::parse(&child_status)
                .ok_or_else(|| self.corrupt(id, format!("unknown status `{child_status}`")))?;
            if !status.is_final() {
                return Ok(());
            }
            let child: JobState =
                serde_json::from_str(&child_state).map_err(|e| self.corrupt(id, e))?;
            results.push(ended(&child, status));
        }
        self.make_runnable(
            tx,
            parent,
            &Answer::Resume(Resume::SubtasksDone(results)),
            at,
        )
    }

    /// Makes `parent` runnable with what its worker did, if it waits for a worker that has
    /// news: a question, a draft to review, its end.
    pub(super) fn release_for_worker(
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
        let Some(WaitRequest::Worker { worker }) = state.wait.as_ref().map(|w| &w.request) else {
            return Ok(());
        };
        let child = match self.row(tx, worker) {
            Ok((status, child, None, _)) if child.parent.as_deref() == Some(parent) => {
                (status, child)
            }
            Ok(_) | Err(StoreError::NotFound(_)) => return Ok(()),
            Err(error) => return Err(error),
        };
        let Some(news) = news_of(worker, &child.1, child.0) else {
            return Ok(());
        };
        self.make_runnable(tx, parent, &Answer::Engine(EngineAnswer::Worker(news)), at)
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
            self.release_for_worker(tx, &job.id, at)?;
        }
        if let Some(parent) = &job.parent {
            if job.status.is_final() {
                self.release_parent(tx, parent, at)?;
            }
            self.release_for_worker(tx, parent, at)?;
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
            // The first reason asked of a live run stands, as in its runner's cancel flag.
            tx.exec_cached(
                "UPDATE jobs SET cancel_requested = 1, \
                 cancel_reason = COALESCE(cancel_reason, ?2) WHERE id = ?1",
                rusqlite::params![id, reason],
            )
            .map_err(|e| self.db_error(e))?;
            return Ok(CancelOutcome::Requested);
        }
        let event = end_outside(&mut state, JobStatus::Cancelled, reason);
        let row = JobRow::of(&state).map_err(|e| self.db_error(e))?;
        self.write_state(tx, &row, at, None)?;
        let event = EventBatch::of(&[event]).map_err(|e| self.db_error(e))?;
        // A job cancelled before any save still has its conversation in its state, which the
        // row just written no longer holds: it goes to the log.
        let messages = MessageTail::of(&state.conversation).map_err(|e| self.db_error(e))?;
        self.append(tx, id, &event, Some(&messages), at)?;
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
                "SELECT cancel_reason FROM jobs WHERE id = ?1 AND lease_owner = ?2 \
                 AND cancel_requested",
                rusqlite::params![job.id, owner],
                |row| row.get::<_, Option<String>>(0),
            )
            .optional()
            .map_err(|e| self.db_error(e))?;
        let Some(reason) = requested else {
            return Ok(None);
        };
        let mut state: JobState =
            serde_json::from_str(&job.state).map_err(|e| self.corrupt(&job.id, e))?;
        let detail = reason.unwrap_or_else(|| {
            "cancelled while it ran: the cancel was asked for before the run stopped".to_owned()
        });
        let finished = end_outside(&mut state, JobStatus::Cancelled, &detail);
        let row = JobRow::of(&state).map_err(|e| self.db_error(e))?;
        let finished = EventBatch::of(&[finished]).map_err(|e| self.db_error(e))?;
        Ok(Some((row, finished)))
    }

    /// Deletes up to `limit` trees whose top-level job ended before `before` and whose every
    /// descendant ended too, oldest first; how many jobs went. Trees still busy are passed over,
    /// so a batch that deletes nothing means nothing is left to delete.
    pub(super) fn prune_trees(
        &self,
        tx: &rusqlite::Connection,
        before: i64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut query = tx
            .prepare_cached(
                "SELECT id, updated_at_ms FROM jobs WHERE parent IS NULL \
                 AND status IN ('completed', 'aborted', 'cancelled', 'error') \
                 AND updated_at_ms < ?1 AND (updated_at_ms, id) > (?2, ?3) \
                 ORDER BY updated_at_ms, id LIMIT ?4",
            )
            .map_err(|e| self.db_error(e))?;
        let (mut after_ms, mut after_id) = (i64::MIN, String::new());
        let (mut trees, mut deleted) = (0, 0);
        while trees < limit {
            let roots = query
                .query_map(
                    rusqlite::params![before, after_ms, after_id, (limit - trees) as i64],
                    |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)),
                )
                .map_err(|e| self.db_error(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.db_error(e))?;
            let Some((last_id, last_ms)) = roots.last().cloned() else {
                break;
            };
            (after_ms, after_id) = (last_ms, last_id);
            for (root, _) in roots {
                let tree = self.tree_of(tx, root)?;
                if self.all_final(tx, &tree[1..])? {
                    for id in &tree {
                        tx.exec_cached("DELETE FROM saves WHERE job_id = ?1", [id])
                            .map_err(|e| self.db_error(e))?;
                        tx.exec_cached("DELETE FROM jobs WHERE id = ?1", [id])
                            .map_err(|e| self.db_error(e))?;
                    }
                    trees += 1;
                    deleted += tree.len();
                }
            }
        }
        Ok(deleted)
    }

    /// `root` and all its descendants, `root` first.
    fn tree_of(&self, tx: &rusqlite::Connection, root: String) -> Result<Vec<String>, StoreError> {
        let mut tree = vec![root];
        let mut next = 0;
        while next < tree.len() {
            let children = self.children_in(tx, &tree[next])?;
            tree.extend(children);
            next += 1;
        }
        Ok(tree)
    }

    fn all_final(&self, tx: &rusqlite::Connection, ids: &[String]) -> Result<bool, StoreError> {
        for id in ids {
            if !self.row_text(tx, id)?.0.is_final() {
                return Ok(false);
            }
        }
        Ok(true)
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

/// How `child`, ended with `status`, reports to its parent: with its facts.
fn ended(child: &JobState, status: JobStatus) -> SubtaskResult {
    SubtaskResult {
        job_id: child.id.clone(),
        status: match status {
            JobStatus::Completed => SubtaskStatus::Completed,
            JobStatus::Aborted => SubtaskStatus::Aborted,
            JobStatus::Cancelled => SubtaskStatus::Cancelled,
            _ => SubtaskStatus::Failed,
        },
        output: child.result.clone().unwrap_or_default(),
        facts: child.phase_session().map(facts_of).unwrap_or_default(),
    }
}

/// What the worker `child` (with `status`) has for its parent: its end, or the question or draft
/// it waits on; `None` while it runs or waits for anything else.
fn news_of(worker: &str, child: &JobState, status: JobStatus) -> Option<WorkerNews> {
    if status.is_final() {
        return Some(WorkerNews::Ended(ended(child, status)));
    }
    let wait = child
        .wait
        .as_ref()
        .filter(|_| status == JobStatus::WaitingHuman)?;
    match &wait.request {
        WaitRequest::Question { question } => Some(WorkerNews::Asked {
            worker: worker.to_owned(),
            wait: wait.id,
            question: question.clone(),
        }),
        WaitRequest::ArtifactReview { artifact_id, .. } => {
            let record = child.phase_session()?.artifact(artifact_id)?;
            Some(WorkerNews::Drafted {
                worker: worker.to_owned(),
                wait: wait.id,
                artifact: ArtifactDraft {
                    id: record.id().to_owned(),
                    title: record.title().to_owned(),
                    kind: record.kind().to_owned(),
                    media_type: record.media_type().to_owned(),
                    content: record.content().to_owned(),
                    revises: record.revises().map(str::to_owned),
                },
            })
        }
        _ => None,
    }
}
