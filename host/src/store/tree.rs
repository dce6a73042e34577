//! Parent and child jobs, whatever the database: a parent waiting for its subtasks becomes runnable
//! when the last of them ends; a parent waiting for its worker becomes runnable when the worker
//! asks a question, hands in a draft or ends, with that news; and a cancel reaches every
//! descendant and wins over a park that the run it was asked for saves afterwards. Retention
//! deletes whole trees only, once every job of one has ended.
//!
//! Invariant: these run inside the transaction of the change that caused them (a save, a
//! cancel), so a child's end and its parent's release are one atomic step: no child end is
//! missed and no parent is released twice. A child's change reads its parent with [`Rows::job`],
//! which keeps the parent from other changes until the commit: of two children that end at
//! once in two processes, the later sees the earlier's end. A parent that starts waiting for its worker is told
//! at once what the worker already did, so news that came while the parent ran is not lost.

use super::rows::{Rows, parse_status};
use super::rules::{append, job_state, make_runnable};
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

/// `parent`'s row and state if it waits for subtasks or a worker and nobody answered it yet.
fn waiting_parent(rows: &mut impl Rows, parent: &str) -> Result<Option<JobState>, StoreError> {
    match job_state(rows, parent) {
        Ok((row, state))
            if row.status == JobStatus::WaitingSubtasks && row.pending_resume.is_none() =>
        {
            Ok(Some(state))
        }
        Ok(_) | Err(StoreError::NotFound(_)) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Makes `parent` runnable with its children's results if it waits for subtasks and every
/// child it waits for has ended. Ids that name no child of `parent` are left out (the tool
/// reports them as missing): no job reads another's result.
pub(super) fn release_parent(
    rows: &mut impl Rows,
    parent: &str,
    at: i64,
) -> Result<(), StoreError> {
    let Some(state) = waiting_parent(rows, parent)? else {
        return Ok(());
    };
    let Some(WaitRequest::Subtasks { job_ids }) = state.wait.as_ref().map(|w| &w.request) else {
        return Ok(());
    };
    let mut results = Vec::new();
    for id in job_ids {
        let Some((child_status, child_state)) = rows.child(id, parent)? else {
            continue;
        };
        let status = parse_status(rows, id, &child_status)?;
        if !status.is_final() {
            return Ok(());
        }
        let child: JobState =
            serde_json::from_str(&child_state).map_err(|e| rows.corrupt(id, e))?;
        results.push(ended(&child, status));
    }
    make_runnable(
        rows,
        parent,
        &Answer::Resume(Resume::SubtasksDone(results)),
        at,
    )
}

/// Makes `parent` runnable with what its worker did, if it waits for a worker that has news:
/// a question, a draft to review, its end.
pub(super) fn release_for_worker(
    rows: &mut impl Rows,
    parent: &str,
    at: i64,
) -> Result<(), StoreError> {
    let Some(state) = waiting_parent(rows, parent)? else {
        return Ok(());
    };
    let Some(WaitRequest::Worker { worker }) = state.wait.as_ref().map(|w| &w.request) else {
        return Ok(());
    };
    let (status, child) = match job_state(rows, worker) {
        Ok((row, child))
            if row.pending_resume.is_none() && child.parent.as_deref() == Some(parent) =>
        {
            (row.status, child)
        }
        Ok(_) | Err(StoreError::NotFound(_)) => return Ok(()),
        Err(error) => return Err(error),
    };
    let Some(news) = news_of(worker, &child, status) else {
        return Ok(());
    };
    make_runnable(
        rows,
        parent,
        &Answer::Engine(EngineAnswer::Worker(news)),
        at,
    )
}

/// After `job` was written: release it if it parked on children that already ended, and
/// release its parent if it just ended.
pub(super) fn after_write(rows: &mut impl Rows, job: &JobRow, at: i64) -> Result<(), StoreError> {
    if job.status == JobStatus::WaitingSubtasks {
        release_parent(rows, &job.id, at)?;
        release_for_worker(rows, &job.id, at)?;
    }
    if let Some(parent) = &job.parent {
        if job.status.is_final() {
            release_parent(rows, parent, at)?;
        }
        release_for_worker(rows, parent, at)?;
    }
    Ok(())
}

/// Cancels `id` and its descendants inside one transaction.
pub(super) fn cancel_tree(
    rows: &mut impl Rows,
    id: &str,
    reason: &str,
    at: i64,
) -> Result<CancelOutcome, StoreError> {
    let (row, mut state) = job_state(rows, id)?;
    if row.status.is_final() {
        return Err(StoreError::Conflict {
            job: id.to_owned(),
            status: row.status,
            action: "cancelled",
        });
    }
    let live_run =
        row.status == JobStatus::Running && row.lease_until_ms.is_some_and(|until| until >= at);
    for child in rows.children(id)? {
        match cancel_tree(rows, &child, "its parent job was cancelled", at) {
            Ok(_) | Err(StoreError::Conflict { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    if live_run {
        rows.ask_cancel(id, reason)?;
        return Ok(CancelOutcome::Requested);
    }
    let event = end_outside(&mut state, JobStatus::Cancelled, reason);
    let row = JobRow::of(&state).map_err(|e| rows.db_error(e))?;
    rows.write_state(&row, at, None)?;
    let event = EventBatch::one(event).map_err(|e| rows.db_error(e))?;
    // A job cancelled before any save still has its conversation in its state, which the row
    // just written no longer holds: it goes to the log.
    let messages = MessageTail::of(&state.conversation).map_err(|e| rows.db_error(e))?;
    append(rows, id, &event, Some(&messages), at)?;
    after_write(rows, &row, at)?;
    Ok(CancelOutcome::Cancelled)
}

/// A run that is saved waiting (or runnable again) after a cancel was asked for it while it
/// ran is saved cancelled instead, with its `finished` event: the cancel is never lost to a
/// park. `None` when the save stands as it is.
pub(super) fn cancel_overrides(
    rows: &mut impl Rows,
    job: &JobRow,
    owner: &str,
) -> Result<Option<(JobRow, EventBatch)>, StoreError> {
    if job.status.is_final() || job.status == JobStatus::Running {
        return Ok(None);
    }
    let Some(reason) = rows.cancel_asked(&job.id, owner)? else {
        return Ok(None);
    };
    let mut state: JobState =
        serde_json::from_str(&job.state).map_err(|e| rows.corrupt(&job.id, e))?;
    let detail = reason.unwrap_or_else(|| {
        "cancelled while it ran: the cancel was asked for before the run stopped".to_owned()
    });
    let finished = end_outside(&mut state, JobStatus::Cancelled, &detail);
    let row = JobRow::of(&state).map_err(|e| rows.db_error(e))?;
    let finished = EventBatch::one(finished).map_err(|e| rows.db_error(e))?;
    Ok(Some((row, finished)))
}

/// Deletes up to `limit` trees whose top-level job ended before `before` and whose every
/// descendant ended too, oldest first; how many jobs went. Trees still busy are passed over,
/// so a batch that deletes nothing means nothing is left to delete.
pub(super) fn prune_trees(
    rows: &mut impl Rows,
    before: i64,
    limit: usize,
) -> Result<usize, StoreError> {
    let (mut after_ms, mut after_id) = (i64::MIN, String::new());
    let (mut trees, mut deleted) = (0, 0);
    while trees < limit {
        let roots = rows.finished_roots(before, (after_ms, &after_id), limit - trees)?;
        let Some((last_id, last_ms)) = roots.last().cloned() else {
            break;
        };
        (after_ms, after_id) = (last_ms, last_id);
        for (root, _) in roots {
            let tree = tree_of(rows, root)?;
            if all_final(rows, &tree[1..])? {
                for id in &tree {
                    rows.delete_job(id)?;
                }
                trees += 1;
                deleted += tree.len();
            }
        }
    }
    Ok(deleted)
}

/// `root` and all its descendants, `root` first.
fn tree_of(rows: &mut impl Rows, root: String) -> Result<Vec<String>, StoreError> {
    let mut tree = vec![root];
    let mut next = 0;
    while next < tree.len() {
        let children = rows.children(&tree[next])?;
        tree.extend(children);
        next += 1;
    }
    Ok(tree)
}

fn all_final(rows: &mut impl Rows, ids: &[String]) -> Result<bool, StoreError> {
    for id in ids {
        if !rows.job(id)?.status.is_final() {
            return Ok(false);
        }
    }
    Ok(true)
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
