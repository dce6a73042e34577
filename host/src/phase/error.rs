//! Why an event was refused. Every message names the event, the phase it met, and the rule broken.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::artifact::ArtifactStatus;
use super::event::{EventKind, ParkKind, ResumeKind};
use super::waiting::{RuntimePhase, WaitingKind};

/// An event the session refused; the session is left unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("event #{event_index} `{event}` rejected in phase `{phase}`: {violation}")]
pub struct TransitionError {
    /// The position the event would have taken in the session's history.
    pub event_index: usize,
    pub event: EventKind,
    pub phase: PhaseLabel,
    pub violation: Violation,
}

/// A phase with its waiting reason, written `waiting_user/intake`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseLabel {
    pub phase: RuntimePhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingKind>,
}

impl fmt::Display for PhaseLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.waiting {
            Some(waiting) => write!(f, "{}/{waiting}", self.phase),
            None => write!(f, "{}", self.phase),
        }
    }
}

/// The rule an event broke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Violation {
    #[error("the session has ended, and done and error accept no events")]
    SessionEnded,
    #[error("this event is accepted only in {accepted_in}")]
    WrongPhase { accepted_in: String },
    #[error("the session id is empty")]
    EmptySessionId,
    #[error("max_burst must be at least 1")]
    ZeroMaxBurst,
    #[error("there are no skills to choose from")]
    NoSkillsToChoose,
    #[error("skill `{skill}` is not among the skills offered")]
    UnknownSkill { skill: String },
    #[error("worker `{worker_id}` is running, so the agent is paused until it completes")]
    WorkerBlocking { worker_id: String },
    #[error("no worker is running")]
    NoWorker,
    #[error("worker `{reported}` is not the current worker `{current}`")]
    WorkerMismatch { current: String, reported: String },
    #[error("worker `{worker_id}` is already running")]
    WorkerAlreadyRunning { worker_id: String },
    #[error("a worker must ask at least one question")]
    NoQuestions,
    #[error("decision `{decision_id}` is still pending")]
    DecisionAlreadyPending { decision_id: String },
    #[error("artifact `{artifact_id}` already exists")]
    DuplicateArtifact { artifact_id: String },
    #[error("artifact `{artifact_id}` does not exist")]
    UnknownArtifact { artifact_id: String },
    #[error("artifact `{artifact_id}` is not the one under review (`{under_review}`)")]
    ArtifactNotUnderReview {
        artifact_id: String,
        under_review: String,
    },
    #[error("artifact `{artifact_id}` cannot go from {from} to {to}")]
    IllegalArtifactStep {
        artifact_id: String,
        from: ArtifactStatus,
        to: ArtifactStatus,
    },
    #[error("call `{call_id}` is parked: answer it with a `resumed` event")]
    AwaitingResume { call_id: String },
    #[error("call `{call_id}` is already parked")]
    AlreadyParked { call_id: String },
    #[error("no call is parked")]
    NothingParked,
    #[error("call `{got}` is not the parked call `{parked}`")]
    ParkedCallMismatch { parked: String, got: String },
    #[error("a `{resume}` resume cannot answer a `{parked}` park")]
    ResumeMismatch {
        parked: ParkKind,
        resume: ResumeKind,
    },
}

impl Violation {
    pub(super) fn wrong_phase(event: EventKind) -> Self {
        Self::WrongPhase {
            accepted_in: event.accepted_in().to_owned(),
        }
    }
}
