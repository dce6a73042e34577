//! The events a session is folded from. Each carries everything its transition needs (including
//! any timestamp the caller wants kept), so applying one needs no clock and no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::artifact::ArtifactDraft;
use super::session::AcceptanceMode;
use super::waiting::SkillIndexEntry;

/// Everything that can happen to a session. The user events (`skill_selected`,
/// `intake_completed`, `user_*`, and a `resumed` that carries a human answer) reset the tool-loop
/// burst count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RuntimeEvent {
    /// idle → waiting_user/intake (with an initial skill) or waiting_user/skill_selection.
    SessionStarted {
        session_id: String,
        start: SkillStart,
        #[serde(default)]
        acceptance_mode: AcceptanceMode,
        /// Defaults to [`DEFAULT_MAX_BURST`](super::DEFAULT_MAX_BURST); must be at least 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_burst: Option<u32>,
    },
    /// The user picks one of the offered skills: skill_selection → intake.
    SkillSelected {
        skill: String,
        intake_prompt: String,
    },
    /// The user filled in the intake: intake → running, slots merged.
    IntakeCompleted {
        #[serde(default)]
        slots: BTreeMap<String, String>,
    },
    /// The user says yes: to the intake as it stands, to a pending decision, to going on after
    /// the burst limit, or to revising without further instruction.
    UserConfirmed,
    /// The user refuses the pending decision of an approve_step.
    UserDeclined {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Free text from the user: a chat turn, answers to a worker's questions, a revision
    /// instruction, or a reply after the burst limit.
    UserMessage {
        text: String,
    },
    /// A tool whose result goes back into the agent's messages; counts toward the burst.
    LoopToolCalled {
        tool: String,
    },
    /// A tool that proposes a step (such as running a worker), maybe needing approval first.
    BoundaryToolCalled {
        decision: MainAgentDecision,
        approval_required: bool,
    },
    WorkerStarted {
        worker_id: String,
    },
    WorkerAskedQuestions {
        worker_id: String,
        questions: Vec<String>,
    },
    WorkerCompleted {
        worker_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        artifact: Option<ArtifactDraft>,
        /// How this artifact is accepted, when it is not the session's mode (a movement of the
        /// piece overrides it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        acceptance_mode: Option<AcceptanceMode>,
    },
    UserAccepted {
        artifact_id: String,
    },
    UserRejected {
        artifact_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    UserRequestedRevision {
        artifact_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instruction: Option<String>,
    },
    /// A control-flow tool parked its call; `movement` is where the job resumes.
    Parked {
        call_id: String,
        movement: String,
        park: Park,
    },
    /// The parked call `call_id` may be re-invoked with `resume`.
    Resumed {
        call_id: String,
        resume: Resume,
    },
    /// terminal.complete, terminal.abort (and the guards), or a cancel: → done.
    Finished {
        outcome: FinishOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The loop ended with nothing settled, or another unrecoverable failure: → error.
    Failed {
        message: String,
    },
}

/// How a session starts: with a skill already chosen, or by letting the user choose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SkillStart {
    InitialSkill {
        skill: String,
        intake_prompt: String,
    },
    ChooseSkill {
        available_skills: Vec<SkillIndexEntry>,
    },
}

/// A step the main agent wants to take, held while it awaits approval or its worker's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MainAgentDecision {
    pub decision_id: String,
    pub tool: String,
    /// JSON text; the phase machine never reads it.
    pub arguments: String,
}

/// The park outcomes of DESIGN §5.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Park {
    /// park.ask → waiting_user/input.
    Ask {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        question: Option<String>,
    },
    /// park.browser-login → waiting_user/browser_login.
    BrowserLogin { url: String },
    /// park.tool-request (or a tool whose policy needs approval) → waiting_user/approve_step.
    ToolRequest { decision: MainAgentDecision },
    /// park.subtasks or WAIT_SUBTASKS → running with `worker_id` set: not a wait for the user.
    Subtasks {
        worker_id: String,
        subtask_ids: Vec<String>,
    },
}

impl Park {
    pub fn kind(&self) -> ParkKind {
        match self {
            Self::Ask { .. } => ParkKind::Ask,
            Self::BrowserLogin { .. } => ParkKind::BrowserLogin,
            Self::ToolRequest { .. } => ParkKind::ToolRequest,
            Self::Subtasks { .. } => ParkKind::Subtasks,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkKind {
    Ask,
    BrowserLogin,
    ToolRequest,
    Subtasks,
}

snake_case_names!(ParkKind {
    Ask => "ask",
    BrowserLogin => "browser_login",
    ToolRequest => "tool_request",
    Subtasks => "subtasks",
});

/// What a parked call is re-invoked with (the WIT `resume` variant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resume {
    Answered {
        answer: String,
    },
    Approved,
    Denied {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    LoggedIn {
        message: String,
    },
    SubtasksDone {
        results: Vec<SubtaskResult>,
    },
    /// The wait ran out; fits any park.
    Expired,
}

impl Resume {
    pub fn kind(&self) -> ResumeKind {
        match self {
            Self::Answered { .. } => ResumeKind::Answered,
            Self::Approved => ResumeKind::Approved,
            Self::Denied { .. } => ResumeKind::Denied,
            Self::LoggedIn { .. } => ResumeKind::LoggedIn,
            Self::SubtasksDone { .. } => ResumeKind::SubtasksDone,
            Self::Expired => ResumeKind::Expired,
        }
    }

    /// Whether this resume can answer that park.
    pub fn fits(&self, parked: ParkKind) -> bool {
        match self.kind() {
            ResumeKind::Answered => parked == ParkKind::Ask,
            ResumeKind::Approved | ResumeKind::Denied => parked == ParkKind::ToolRequest,
            ResumeKind::LoggedIn => parked == ParkKind::BrowserLogin,
            ResumeKind::SubtasksDone => parked == ParkKind::Subtasks,
            ResumeKind::Expired => true,
        }
    }

    /// A human acted, so the burst count starts over; subtasks finishing or a wait expiring is
    /// not a user event.
    pub fn is_user_action(&self) -> bool {
        !matches!(self, Self::SubtasksDone { .. } | Self::Expired)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeKind {
    Answered,
    Approved,
    Denied,
    LoggedIn,
    SubtasksDone,
    Expired,
}

snake_case_names!(ResumeKind {
    Answered => "answered",
    Approved => "approved",
    Denied => "denied",
    LoggedIn => "logged_in",
    SubtasksDone => "subtasks_done",
    Expired => "expired",
});

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskResult {
    pub job_id: String,
    /// The child's final output; the phase machine never reads it.
    pub output: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishOutcome {
    /// terminal.complete: the agent says the job is done.
    Completed,
    /// terminal.abort, or a guard (max_movements, text-only limit, max iterations, ask limit).
    Aborted,
    /// A user or operator stopped the session.
    Cancelled,
}

/// The name of an event without its data, for labels and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    SessionStarted,
    SkillSelected,
    IntakeCompleted,
    UserConfirmed,
    UserDeclined,
    UserMessage,
    LoopToolCalled,
    BoundaryToolCalled,
    WorkerStarted,
    WorkerAskedQuestions,
    WorkerCompleted,
    UserAccepted,
    UserRejected,
    UserRequestedRevision,
    Parked,
    Resumed,
    Finished,
    Failed,
}

snake_case_names!(EventKind {
    SessionStarted => "session_started",
    SkillSelected => "skill_selected",
    IntakeCompleted => "intake_completed",
    UserConfirmed => "user_confirmed",
    UserDeclined => "user_declined",
    UserMessage => "user_message",
    LoopToolCalled => "loop_tool_called",
    BoundaryToolCalled => "boundary_tool_called",
    WorkerStarted => "worker_started",
    WorkerAskedQuestions => "worker_asked_questions",
    WorkerCompleted => "worker_completed",
    UserAccepted => "user_accepted",
    UserRejected => "user_rejected",
    UserRequestedRevision => "user_requested_revision",
    Parked => "parked",
    Resumed => "resumed",
    Finished => "finished",
    Failed => "failed",
});

impl EventKind {
    /// Where the event is accepted: the one table the transition guards and their errors share.
    pub fn accepted_in(self) -> &'static str {
        use EventKind::*;
        match self {
            SessionStarted => "idle",
            SkillSelected => "waiting_user/skill_selection",
            IntakeCompleted => "waiting_user/intake",
            UserConfirmed => {
                "waiting_user/intake, waiting_user/approve_step, waiting_user/input or waiting_user/revision"
            }
            UserDeclined => "waiting_user/approve_step",
            UserMessage => {
                "running, waiting_user/input, waiting_user/worker_questions or waiting_user/revision"
            }
            LoopToolCalled | BoundaryToolCalled | WorkerStarted | Parked => "running",
            WorkerAskedQuestions | WorkerCompleted => "running with that worker set",
            UserAccepted | UserRejected | UserRequestedRevision => "waiting_user/review_artifact",
            Resumed => "a parked state: waiting_user after a park, or running while subtasks run",
            Finished => "any phase but done and error (completed: running with no worker)",
            Failed => "any phase but done and error",
        }
    }
}

impl RuntimeEvent {
    pub fn kind(&self) -> EventKind {
        match self {
            Self::SessionStarted { .. } => EventKind::SessionStarted,
            Self::SkillSelected { .. } => EventKind::SkillSelected,
            Self::IntakeCompleted { .. } => EventKind::IntakeCompleted,
            Self::UserConfirmed => EventKind::UserConfirmed,
            Self::UserDeclined { .. } => EventKind::UserDeclined,
            Self::UserMessage { .. } => EventKind::UserMessage,
            Self::LoopToolCalled { .. } => EventKind::LoopToolCalled,
            Self::BoundaryToolCalled { .. } => EventKind::BoundaryToolCalled,
            Self::WorkerStarted { .. } => EventKind::WorkerStarted,
            Self::WorkerAskedQuestions { .. } => EventKind::WorkerAskedQuestions,
            Self::WorkerCompleted { .. } => EventKind::WorkerCompleted,
            Self::UserAccepted { .. } => EventKind::UserAccepted,
            Self::UserRejected { .. } => EventKind::UserRejected,
            Self::UserRequestedRevision { .. } => EventKind::UserRequestedRevision,
            Self::Parked { .. } => EventKind::Parked,
            Self::Resumed { .. } => EventKind::Resumed,
            Self::Finished { .. } => EventKind::Finished,
            Self::Failed { .. } => EventKind::Failed,
        }
    }
}
