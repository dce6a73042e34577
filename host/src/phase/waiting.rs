//! The five runtime phases, and why a session in `waiting_user` is waiting.

use serde::{Deserialize, Serialize};

/// Where a session stands. Only `waiting_user` carries a [`WaitingReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimePhase {
    /// Created, not started.
    #[default]
    Idle,
    /// The agent is in a tool-loop burst, or a worker is executing.
    Running,
    /// Nothing moves until the user acts.
    WaitingUser,
    /// Ended normally (completed, aborted or cancelled).
    Done,
    /// Ended by an unrecoverable failure.
    Error,
}

snake_case_names!(RuntimePhase {
    Idle => "idle",
    Running => "running",
    WaitingUser => "waiting_user",
    Done => "done",
    Error => "error",
});

impl RuntimePhase {
    /// `done` and `error` accept no further event.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Error)
    }
}

/// One skill the user may choose from when a session starts without one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillIndexEntry {
    pub name: String,
    pub description: String,
}

/// What the user is asked for. A parked tool request is an `approve_step`, like an agent decision
/// that needs approval: either way the user approves or refuses one pending decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitingReason {
    SkillSelection {
        available_skills: Vec<SkillIndexEntry>,
    },
    Intake {
        prompt: String,
    },
    Input {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    ApproveStep {
        decision_id: String,
    },
    ReviewArtifact {
        artifact_id: String,
    },
    WorkerQuestions {
        worker_id: String,
        questions: Vec<String>,
    },
    Revision {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instruction: Option<String>,
    },
    /// The BrowseWeb park: a human must log in in a browser before the call is re-invoked.
    BrowserLogin {
        url: String,
    },
}

impl WaitingReason {
    pub fn kind(&self) -> WaitingKind {
        match self {
            Self::SkillSelection { .. } => WaitingKind::SkillSelection,
            Self::Intake { .. } => WaitingKind::Intake,
            Self::Input { .. } => WaitingKind::Input,
            Self::ApproveStep { .. } => WaitingKind::ApproveStep,
            Self::ReviewArtifact { .. } => WaitingKind::ReviewArtifact,
            Self::WorkerQuestions { .. } => WaitingKind::WorkerQuestions,
            Self::Revision { .. } => WaitingKind::Revision,
            Self::BrowserLogin { .. } => WaitingKind::BrowserLogin,
        }
    }
}

/// The kind of a [`WaitingReason`] without its data, for labels and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitingKind {
    SkillSelection,
    Intake,
    Input,
    ApproveStep,
    ReviewArtifact,
    WorkerQuestions,
    Revision,
    BrowserLogin,
}

snake_case_names!(WaitingKind {
    SkillSelection => "skill_selection",
    Intake => "intake",
    Input => "input",
    ApproveStep => "approve_step",
    ReviewArtifact => "review_artifact",
    WorkerQuestions => "worker_questions",
    Revision => "revision",
    BrowserLogin => "browser_login",
});
