//! How a job is laid out in a store, whatever the database: a row with the job's columns and
//! its state but its conversation, and a log of one row per save holding the events the save
//! added and the messages it wrote.
//!
//! Invariant: a save writes the job's row and one log row with the run's new events and the
//! messages after those the store held as they are when it handed the job out
//! ([`crate::engine::Conversation::unchanged`]); no log row when there is neither, and a second
//! one for the end of a run cancelled meanwhile. The conversation is never written whole again,
//! so the bytes a save writes follow what the run added, not how long the job has been going.
//! A new job (and one stored before the log held messages) keeps its conversation in its state,
//! which no log row holds yet; its first save writes it to the log whole and takes it out of
//! the state. Reading the log's message batches in order, each cutting the conversation where
//! it starts and adding its messages, gives the conversation back. The mark does not move on a
//! save: a runner saves once per claim, and a second save from the same value rewrites from
//! the same place, which is correct but not cheaper. Everything here is serialized by the
//! caller, off the thread that commits, which runs SQL (and, in SQLite, compresses the large
//! texts it writes: `sqlite/packed.rs`).

use serde::{Deserialize, Serialize};

use super::{ClaimedJob, StoredEvent, TimedEvent};
use crate::engine::{Answer, Conversation, JobEvent, JobState, JobStatus};
use crate::llm::Message;

/// A job's columns as a save writes them.
pub(super) struct JobRow {
    pub id: String,
    pub piece: String,
    pub status: JobStatus,
    pub movement: String,
    pub parent: Option<String>,
    pub wait_reason: Option<&'static str>,
    /// The content hash of the plugin a parked call is pinned to.
    pub parked_plugin: Option<String>,
    pub wait_expires_at_ms: Option<i64>,
    /// [`JobState::without_conversation`], as JSON; a new job's whole state.
    pub state: String,
}

impl JobRow {
    /// The row a save writes: the conversation goes to the log.
    pub fn of(job: &JobState) -> Result<Self, serde_json::Error> {
        Ok(Self::with_state(
            job,
            serde_json::to_string(&job.without_conversation())?,
        ))
    }

    /// The row of a new job, whose conversation waits in its state for the job's first save.
    pub fn with_conversation(job: &JobState) -> Result<Self, serde_json::Error> {
        Ok(Self::with_state(job, serde_json::to_string(job)?))
    }

    fn with_state(job: &JobState, state: String) -> Self {
        let parked_plugin = job
            .parked_plugin()
            .map(|plugin| plugin.content_hash.clone());
        Self {
            id: job.id.clone(),
            piece: job.piece.clone(),
            status: job.status,
            movement: job.movement.clone(),
            parent: job.parent.clone(),
            wait_reason: job
                .wait
                .as_ref()
                .and_then(|wait| wait.reason)
                .map(|reason| reason.as_str()),
            parked_plugin,
            wait_expires_at_ms: job.wait.as_ref().and(job.wait_expires_at_ms),
            state,
        }
    }
}

/// The messages a save writes: the conversation is what the store holds, cut at `first`, with
/// these after it.
pub(super) struct MessageTail {
    pub first: usize,
    pub count: usize,
    /// The messages as a JSON array.
    pub json: String,
}

impl MessageTail {
    pub fn of(conversation: &Conversation) -> Result<Self, serde_json::Error> {
        Ok(Self {
            first: conversation.unchanged(),
            count: conversation.unsaved().len(),
            json: serde_json::to_string(conversation.unsaved())?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The events of one save as their row stores them.
pub(super) struct EventBatch {
    pub count: usize,
    pub json: String,
}

impl EventBatch {
    pub fn of(events: &[TimedEvent]) -> Result<Self, serde_json::Error> {
        let stamped: Vec<Stamped<&JobEvent>> = events
            .iter()
            .map(|timed| Stamped {
                event: &timed.event,
                at_ms: timed.at_ms,
            })
            .collect();
        Ok(Self {
            count: events.len(),
            json: serde_json::to_string(&stamped)?,
        })
    }

    /// One event that happens as it is written (an answer, a cancel, an end outside a run).
    pub fn one(event: JobEvent) -> Result<Self, serde_json::Error> {
        Self::of(&[event.into()])
    }
}

/// An event in a log batch: the event's own fields, and `at_ms` when it happened before the
/// batch was written (a batch written before events were timed has none).
#[derive(Serialize, Deserialize)]
struct Stamped<E> {
    #[serde(flatten)]
    event: E,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at_ms: Option<i64>,
}

/// Everything one save writes.
pub(super) struct SaveRecord {
    pub row: JobRow,
    pub messages: MessageTail,
    pub events: EventBatch,
}

impl SaveRecord {
    pub fn of(job: &JobState, events: &[TimedEvent]) -> Result<Self, serde_json::Error> {
        Ok(Self {
            row: JobRow::of(job)?,
            messages: MessageTail::of(&job.conversation)?,
            events: EventBatch::of(events)?,
        })
    }
}

/// A job as a store read it back, still as text: its state without the conversation, the
/// message batches of its log in order (where each starts, and its messages), and the answer a
/// resumed run applies.
pub(super) struct StoredText {
    pub state: String,
    pub messages: Vec<(usize, String)>,
    pub resume: Option<String>,
}

impl StoredText {
    /// The job these texts make; an error says which part does not parse.
    pub fn parse(&self) -> Result<ClaimedJob, String> {
        let mut state: JobState = serde_json::from_str(&self.state).map_err(|e| e.to_string())?;
        // A conversation still in the state comes first; no save has logged it yet, so the
        // next save writes it whole (it is not `as_stored`).
        let kept_in_state = !state.conversation.is_empty();
        let mut messages = std::mem::take(&mut state.conversation).to_vec();
        for (first, text) in &self.messages {
            let batch: Vec<Message> =
                serde_json::from_str(text).map_err(|e| format!("messages from {first}: {e}"))?;
            if *first > messages.len() {
                return Err(format!(
                    "messages from {first} follow only {} before them",
                    messages.len()
                ));
            }
            messages.truncate(*first);
            messages.extend(batch);
        }
        state.conversation = if kept_in_state {
            Conversation::from(messages)
        } else {
            Conversation::as_stored(messages)
        };
        let resume = self
            .resume
            .as_deref()
            .map(serde_json::from_str::<Answer>)
            .transpose()
            .map_err(|e| format!("its pending answer: {e}"))?;
        Ok(ClaimedJob { state, resume })
    }
}

/// The events of a job's log batches (first event number, written at, events as a JSON
/// array), numbered, those after `after` only; an error says which batch does not parse.
pub(super) fn numbered_events(
    batches: Vec<(i64, i64, String)>,
    after: u64,
) -> Result<Vec<StoredEvent>, String> {
    let mut events = Vec::new();
    for (first, at_ms, text) in batches {
        let batch: Vec<Stamped<JobEvent>> =
            serde_json::from_str(&text).map_err(|e| format!("events from {first}: {e}"))?;
        let numbered = (first as u64..).zip(batch);
        events.extend(
            numbered
                .filter(|(seq, _)| *seq > after)
                .map(|(seq, stamped)| StoredEvent {
                    seq,
                    at_ms: stamped.at_ms.unwrap_or(at_ms),
                    event: stamped.event,
                }),
        );
    }
    Ok(events)
}
