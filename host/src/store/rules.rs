//! The store's changes, whatever the database: what a create, an answer, a claim, a save, a
//! renewal, an expiry and a cancel check and write, over the statements of [`Rows`].
//!
//! Invariant: each function here is one change, run inside one transaction by its backend,
//! and refuses by checking before it writes; a part that may fail after writing (the save of
//! a save-and-claim) runs in [`Rows::undone_on_error`]. A backend may run a change again from
//! the start after a rollback (a deadlock, a batch replayed), so a change holds no state of
//! its own between runs.

use super::record::{EventBatch, JobRow, MessageTail, SaveRecord, StoredText};
use super::rows::{LogRow, RowText, Rows};
use super::{ClaimedJob, StoreError};
use crate::engine::{
    Answer, EngineAnswer, JobSession, JobState, JobStatus, WaitRequest, check_answer,
};

/// Now, in Unix milliseconds: what every row's times are in.
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// A claim of the next job fails only for the store as a whole: an unreadable row was set
/// aside, and the runner asks again.
pub(super) fn unreadable_is_none(
    claimed: Result<Option<ClaimedJob>, StoreError>,
) -> Result<Option<ClaimedJob>, StoreError> {
    match claimed {
        Err(StoreError::Corrupt { .. }) => Ok(None),
        other => other,
    }
}

/// How a job cancelled while it ran ends when its cancel came without a reason (stored before
/// reasons were kept).
pub(super) const CANCELLED_WHILE_RUNNING: &str = "cancelled by a user or operator";

/// The part of a stored state that an answer is checked against. Reading only it spares the
/// change the rest, the conversation above all.
#[derive(serde::Deserialize)]
struct StateWait {
    wait: Option<WaitToAnswer>,
    #[serde(default)]
    session: Option<JobSession>,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    reviewed_by_parent: bool,
}

#[derive(serde::Deserialize)]
struct WaitToAnswer {
    /// As in [`crate::engine::Wait`], where it may be missing.
    #[serde(default)]
    id: u32,
    request: WaitRequest,
}

/// A job's row as a claim took it. Parsing its state and messages is left to the caller, off
/// the connection that other changes wait for.
pub(super) struct ClaimedRow {
    pub id: String,
    pub owner: String,
    pub text: StoredText,
}

impl ClaimedRow {
    /// The job, or why it is unreadable (`corrupt` names the store).
    pub fn parse(
        &self,
        corrupt: impl FnOnce(&str, String) -> StoreError,
    ) -> Result<ClaimedJob, StoreError> {
        self.text.parse().map_err(|e| corrupt(&self.id, e))
    }
}

/// Stores `row` as a new, pending job.
pub(super) fn create(rows: &mut impl Rows, row: &JobRow, at: i64) -> Result<(), StoreError> {
    rows.insert_job(row, at)
}

/// A job's row with its state parsed.
pub(super) fn job_state(rows: &mut impl Rows, id: &str) -> Result<(RowText, JobState), StoreError> {
    let row = rows.job(id)?;
    let state = serde_json::from_str(&row.state).map_err(|e| rows.corrupt(id, e))?;
    Ok((row, state))
}

/// Records `answer` as the answer to the wait of `id`, the one numbered `expected` if given.
/// An answer a parent passes on to its worker is recorded as the answer it carries.
pub(super) fn answer(
    rows: &mut impl Rows,
    id: &str,
    answer: &Answer,
    expected: Option<u32>,
    at: i64,
) -> Result<(), StoreError> {
    let row = rows.job(id)?;
    if !row.status.is_waiting() {
        return Err(StoreError::NotWaiting {
            job: id.to_owned(),
            status: row.status,
            hint: if row.pending_resume.is_some() {
                " (it was already answered)"
            } else {
                ""
            },
        });
    }
    let state: StateWait = serde_json::from_str(&row.state).map_err(|e| rows.corrupt(id, e))?;
    let wait = state
        .wait
        .ok_or_else(|| rows.corrupt(id, "the job waits but has no wait record"))?;
    if let Some(given) = expected.filter(|given| *given != wait.id) {
        return Err(StoreError::StaleAnswer {
            job: id.to_owned(),
            given,
            current: wait.id,
        });
    }
    let wrong = |message: String| StoreError::WrongAnswer {
        job: id.to_owned(),
        message,
    };
    let checked = match answer {
        Answer::Engine(EngineAnswer::Forwarded { from, answer }) => {
            if state.parent.as_deref() != Some(from.as_str()) || !state.reviewed_by_parent {
                return Err(wrong(format!(
                    "job `{from}` passed on an answer, but this job is not its worker"
                )));
            }
            answer.as_ref()
        }
        answer => {
            if let Some(parent) = state.parent.as_deref().filter(|_| state.reviewed_by_parent)
                && wait.request.surfaces_at_parent()
            {
                return Err(wrong(format!(
                    "this job is a worker of job `{parent}`: its questions and drafts are \
                     answered there, so that both keep the same verdict"
                )));
            }
            answer
        }
    };
    wait.request.accepts(checked).map_err(&wrong)?;
    if let Some(session) = &state.session {
        check_answer(session, id, wait.id, &wait.request, checked)
            .map_err(|refused| wrong(format!("its session refuses it: {refused}")))?;
    }
    make_runnable(rows, id, checked, at)
}

/// Makes the waiting job `id` runnable with the answer to its wait, which the next claim hands
/// to the run.
pub(super) fn make_runnable(
    rows: &mut impl Rows,
    id: &str,
    resume: &Answer,
    at: i64,
) -> Result<(), StoreError> {
    let resume = serde_json::to_string(resume).map_err(|e| rows.db_error(e))?;
    rows.make_runnable(id, &resume, at)
}

/// Takes `id` for `owner` if it is runnable: pending, or running under an expired lease.
pub(super) fn claim(
    rows: &mut impl Rows,
    id: &str,
    owner: &str,
    lease_ms: i64,
    at: i64,
) -> Result<Option<ClaimedRow>, StoreError> {
    let row = rows.job(id)?;
    let lease_expired = row.lease_until_ms.is_none_or(|until| until < at);
    let runnable =
        row.status == JobStatus::Pending || (row.status == JobStatus::Running && lease_expired);
    if !runnable {
        return Ok(None);
    }
    rows.take_lease(id, owner, at + lease_ms, at)?;
    let messages = rows.message_batches(id)?;
    Ok(Some(ClaimedRow {
        id: id.to_owned(),
        owner: owner.to_owned(),
        text: StoredText {
            state: row.state,
            messages,
            resume: row.pending_resume,
        },
    }))
}

/// Takes the oldest runnable job (pending, or running under an expired lease) for `owner`.
pub(super) fn claim_next(
    rows: &mut impl Rows,
    owner: &str,
    lease_ms: i64,
    at: i64,
) -> Result<Option<ClaimedRow>, StoreError> {
    match rows.next_runnable(at)? {
        // Found by its status, the row has one that parses: what can be unreadable is its
        // state, which the caller parses (see `set_aside`).
        Some(id) => claim(rows, &id, owner, lease_ms, at),
        None => Ok(None),
    }
}

/// Takes an unreadable job out of the runnable ones, as `error`: it would otherwise be offered
/// to every runner for ever. Its text stays in the store for a human.
pub(super) fn set_aside(
    rows: &mut impl Rows,
    id: &str,
    owner: &str,
    at: i64,
    why: &StoreError,
) -> Result<(), StoreError> {
    tracing::error!("{why}; the job is marked as error");
    rows.set_aside(id, owner, at)
}

/// Writes what a save of `id` adds to its log, as its next batch: `events`, numbered on from
/// the last ones, and the conversation's new `messages` (none: `None`). Nothing when there is
/// neither.
pub(super) fn append(
    rows: &mut impl Rows,
    id: &str,
    events: &EventBatch,
    messages: Option<&MessageTail>,
    at: i64,
) -> Result<(), StoreError> {
    let messages = messages.filter(|tail| !tail.is_empty());
    if events.count == 0 && messages.is_none() {
        return Ok(());
    }
    let (batch, last) = rows.last_batch(id)?;
    rows.insert_batch(
        id,
        &LogRow {
            batch: batch + 1,
            first_seq: last + 1,
            last_seq: last + events.count as i64,
            at_ms: at,
            events: &events.json,
            messages_from: messages.map(|tail| tail.first as i64),
            messages: messages.map(|tail| tail.json.as_str()),
        },
    )
}

/// Writes a job's row, new messages and events while `owner` holds its lease.
pub(super) fn save(
    rows: &mut impl Rows,
    record: &SaveRecord,
    owner: &str,
    at: i64,
) -> Result<(), StoreError> {
    let job = &record.row;
    let cancelled = super::tree::cancel_overrides(rows, job, owner)?;
    let written = cancelled.as_ref().map_or(job, |(row, _)| row);
    if rows.write_state(written, at, Some(owner))? == 0 {
        rows.job(&job.id)?;
        return Err(StoreError::LeaseLost {
            job: job.id.clone(),
            owner: owner.to_owned(),
        });
    }
    append(rows, &job.id, &record.events, Some(&record.messages), at)?;
    if let Some((_, finished)) = &cancelled {
        append(rows, &job.id, finished, None, at)?;
    }
    super::tree::after_write(rows, written, at)
}

/// A runner's step from one job to the next: the save (or why it was refused, leaving no
/// trace) and the next job claimed.
pub(super) fn save_and_claim_next(
    rows: &mut impl Rows,
    record: &Result<SaveRecord, StoreError>,
    owner: &str,
    lease_ms: i64,
    at: i64,
) -> (
    Result<(), StoreError>,
    Result<Option<ClaimedRow>, StoreError>,
) {
    let saved = match record {
        Ok(record) => rows.undone_on_error(|rows| save(rows, record, owner, at)),
        Err(error) => Err(error.clone()),
    };
    (saved, claim_next(rows, owner, lease_ms, at))
}

/// Extends `owner`'s lease on `id` and says whether a cancel was asked, with its reason.
pub(super) fn renew(
    rows: &mut impl Rows,
    id: &str,
    owner: &str,
    until: i64,
) -> Result<Option<String>, StoreError> {
    match rows.renew(id, owner, until)? {
        Some((asked, reason)) => {
            Ok(asked.then(|| reason.unwrap_or_else(|| CANCELLED_WHILE_RUNNING.into())))
        }
        None => Err(StoreError::LeaseLost {
            job: id.to_owned(),
            owner: owner.to_owned(),
        }),
    }
}

/// Resumes every wait whose expiry is due at `at` with `expired`; how many.
pub(super) fn expire(rows: &mut impl Rows, at: i64) -> Result<usize, StoreError> {
    let expired = serde_json::to_string(&Answer::Resume(crate::plugin::Resume::Expired))
        .map_err(|e| rows.db_error(e))?;
    rows.expire(at, &expired)
}
