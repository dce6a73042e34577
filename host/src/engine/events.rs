//! What happens in a job, as events: the job's log, the CLI's step printout and (later) the
//! live stream all read the same values.
//!
//! Invariant: events are facts that already happened, emitted in order; observing them cannot
//! change the run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::answer::{Answer, HumanVerdict};
use super::job::JobStatus;
use super::wait::{WaitReason, WaitRequest};
use crate::phase::{AcceptanceMode, ArtifactDraft, SkillIndexEntry};

/// One thing that happened in a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JobEvent {
    Started {
        /// Empty for a job whose piece a human chooses among `choose_from`.
        piece: String,
        input: String,
        parent: Option<String>,
        /// The tool-call burst the job may make before a human must say go on.
        #[serde(default = "super::job::default_max_burst")]
        max_burst: u32,
        /// How the job's artifacts become facts.
        #[serde(default)]
        acceptance: AcceptanceMode,
        /// The pieces a human chooses from, for a job started without one.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        choose_from: Vec<SkillIndexEntry>,
        /// The piece's intake prompt; without one, the input is the intake.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        intake: Option<String>,
    },
    /// A human chose the piece of a job started without one.
    SkillChosen {
        piece: String,
        /// The piece's intake prompt; without one, the input is the intake.
        intake: Option<String>,
        input: String,
    },
    /// The intake was filled in (or confirmed as it stood): these are its slots.
    IntakeCompleted {
        slots: BTreeMap<String, String>,
    },
    MovementEntered {
        movement: String,
        /// 1-based count of movements entered so far in this job.
        count: u32,
    },
    ModelReplied {
        movement: String,
        text: Option<String>,
        tool_calls: Vec<String>,
    },
    ToolCalled {
        movement: String,
        call_id: String,
        tool: String,
        arguments: String,
    },
    ToolAnswered {
        movement: String,
        call_id: String,
        tool: String,
        content: String,
        is_error: bool,
    },
    Transition {
        from: String,
        to: String,
    },
    Parked {
        /// The wait's id (the job's park count): its `resumed` event names it too.
        #[serde(default)]
        wait: u32,
        status: JobStatus,
        resume_movement: String,
        reason: Option<WaitReason>,
        request: WaitRequest,
    },
    Resumed {
        /// The id of the wait this answers.
        #[serde(default)]
        wait: u32,
        movement: String,
        /// The answer (a login's session is withheld).
        resume: Answer,
    },
    /// An artifact was handed in for review: by a tool call of this job, or by the job's
    /// worker (`worker`). `acceptance` is how it is accepted, when the movement says otherwise
    /// than the piece.
    ArtifactDrafted {
        artifact: ArtifactDraft,
        /// The call that handed it in, or the worker.
        by: String,
        #[serde(default)]
        worker: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        acceptance: Option<AcceptanceMode>,
    },
    /// A human's verdict on the artifact under review.
    Reviewed {
        artifact_id: String,
        verdict: HumanVerdict,
    },
    /// The instruction of a revision asked for without one.
    RevisionInstructed {
        artifact_id: String,
        text: String,
    },
    /// A worker (a child job) started, or went on after its parent answered it.
    WorkerStarted {
        worker: String,
    },
    /// The worker asked a question, which waits for an answer here.
    WorkerAsked {
        worker: String,
        question: String,
    },
    /// A human answered the worker's question here; the answer goes on to the worker.
    WorkerAnswered {
        worker: String,
        text: String,
    },
    /// The worker ended.
    WorkerEnded {
        worker: String,
        status: JobStatus,
    },
    Finished {
        status: JobStatus,
        detail: String,
    },
}

/// Receives a job's events as they happen.
pub trait Observer: Send + Sync {
    fn on_event(&self, job_id: &str, event: &JobEvent);

    /// The job and the events of its run are now durable (a worker saved them), with `status`.
    fn on_saved(&self, _job_id: &str, _status: JobStatus) {}
}

/// Ignores every event.
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&self, _job_id: &str, _event: &JobEvent) {}
}

/// Keeps every event, for tests and for callers that store them after the run.
#[derive(Default)]
pub struct RecordingObserver {
    events: std::sync::Mutex<Vec<(String, JobEvent)>>,
}

impl RecordingObserver {
    pub fn events(&self) -> Vec<(String, JobEvent)> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The events of one job, oldest first.
    pub fn of(&self, job_id: &str) -> Vec<JobEvent> {
        self.events()
            .into_iter()
            .filter(|(job, _)| job == job_id)
            .map(|(_, event)| event)
            .collect()
    }
}

impl Observer for RecordingObserver {
    fn on_event(&self, job_id: &str, event: &JobEvent) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((job_id.to_owned(), event.clone()));
    }
}
