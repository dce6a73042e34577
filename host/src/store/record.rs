//! How a job is laid out in a store, whatever the database: a row of small columns with the
//! job's state but its conversation, the conversation one message a row, and the events one
//! batch a save.
//!
//! Invariant: a save writes the job's row, the messages after the ones the store already holds
//! as they are ([`crate::engine::Conversation::unchanged`]), and the run's new events; never the
//! whole conversation again. So the bytes a save writes follow what the run added, not how long
//! the job has been going. Everything here is serialized by the caller, off the thread that
//! commits, which only runs SQL.

use super::ClaimedJob;
use crate::engine::{Answer, Conversation, JobEvent, JobState, JobStatus, ResumePoint};
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
    /// [`JobState::without_conversation`], as JSON.
    pub state: String,
}

impl JobRow {
    pub fn of(job: &JobState) -> Result<Self, serde_json::Error> {
        let parked_plugin = job.wait.as_ref().and_then(|wait| match &wait.resume {
            ResumePoint::ParkedCall { plugin, .. } | ResumePoint::ApprovalGate { plugin, .. } => {
                Some(plugin.content_hash.clone())
            }
            ResumePoint::EnterMovement
            | ResumePoint::BurstGate { .. }
            | ResumePoint::EnterPiece => None,
        });
        Ok(Self {
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
            state: serde_json::to_string(&job.without_conversation())?,
        })
    }
}

/// The messages a save writes: the store replaces what it holds from `first` on with these.
pub(super) struct MessageTail {
    pub first: usize,
    /// Each message as JSON, in order.
    pub messages: Vec<String>,
}

impl MessageTail {
    pub fn of(conversation: &Conversation) -> Result<Self, serde_json::Error> {
        Ok(Self {
            first: conversation.unchanged(),
            messages: conversation
                .unsaved()
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// The events of one save as their row stores them.
pub(super) struct EventBatch {
    pub count: usize,
    pub json: String,
}

impl EventBatch {
    pub fn of(events: &[JobEvent]) -> Result<Self, serde_json::Error> {
        Ok(Self {
            count: events.len(),
            json: serde_json::to_string(events)?,
        })
    }
}

/// Everything one save writes.
pub(super) struct SaveRecord {
    pub row: JobRow,
    pub messages: MessageTail,
    pub events: EventBatch,
}

impl SaveRecord {
    pub fn of(job: &JobState, events: &[JobEvent]) -> Result<Self, serde_json::Error> {
        Ok(Self {
            row: JobRow::of(job)?,
            messages: MessageTail::of(&job.conversation)?,
            events: EventBatch::of(events)?,
        })
    }
}

/// A job as a store read it back, still as text: its state without the conversation, its
/// messages in order, and the answer a resumed run applies.
pub(super) struct StoredText {
    pub state: String,
    pub messages: Vec<String>,
    pub resume: Option<String>,
}

impl StoredText {
    /// The job these texts make; an error says which part does not parse.
    pub fn parse(&self) -> Result<ClaimedJob, String> {
        let mut state: JobState = serde_json::from_str(&self.state).map_err(|e| e.to_string())?;
        let messages = self
            .messages
            .iter()
            .enumerate()
            .map(|(index, text)| {
                serde_json::from_str::<Message>(text).map_err(|e| format!("message {index}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        state.conversation = Conversation::as_stored(messages);
        let resume = self
            .resume
            .as_deref()
            .map(serde_json::from_str::<Answer>)
            .transpose()
            .map_err(|e| format!("its pending answer: {e}"))?;
        Ok(ClaimedJob { state, resume })
    }
}
