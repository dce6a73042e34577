//! The session: the fold of its event log, readable only through accessors so that nothing but
//! [`apply_event`] changes it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::artifact::{ArtifactRecord, ArtifactStatus, Fact};
use super::error::{PhaseLabel, TransitionError};
use super::event::{MainAgentDecision, ParkKind, RuntimeEvent};
use super::transition::transition;
use super::waiting::{RuntimePhase, WaitingKind, WaitingReason};

/// Loop-tool calls allowed between two user events when the session does not say otherwise.
pub const DEFAULT_MAX_BURST: u32 = 12;

/// What happens to a worker's artifact when the worker completes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AcceptanceMode {
    /// The user reviews it (waiting_user/review_artifact). The default: nothing becomes a fact
    /// unless someone said so.
    #[default]
    UserConfirmed,
    /// The session's policy accepts it and the agent goes straight on.
    Auto,
}

/// The business stage around the runtime phases: design (instantiation) → play → done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleStage {
    #[default]
    Design,
    Play,
    Done,
}

/// The parked call a `resumed` event must answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeContext {
    pub call_id: String,
    /// The movement the job re-enters: the current one, so a parked call is re-invoked.
    pub movement: String,
    pub parked: ParkKind,
}

/// Everything but the history. Transitions compute a new one from the old, so a refused event
/// leaves the session as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SessionState {
    pub(super) id: String,
    pub(super) phase: RuntimePhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) waiting_reason: Option<WaitingReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) current_worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) active_skill: Option<String>,
    pub(super) acceptance_mode: AcceptanceMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) resume_context: Option<ResumeContext>,
    #[serde(default)]
    pub(super) slots: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) artifacts: Vec<ArtifactRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) pending_decision: Option<MainAgentDecision>,
    pub(super) tool_loop_burst_count: u32,
    pub(super) max_burst: u32,
    pub(super) lifecycle_stage: LifecycleStage,
}

impl Default for SessionState {
    fn default() -> Self {
        Self {
            id: String::new(),
            phase: RuntimePhase::Idle,
            waiting_reason: None,
            current_worker_id: None,
            active_skill: None,
            acceptance_mode: AcceptanceMode::default(),
            resume_context: None,
            slots: BTreeMap::new(),
            artifacts: Vec::new(),
            pending_decision: None,
            tool_loop_burst_count: 0,
            max_burst: DEFAULT_MAX_BURST,
            lifecycle_stage: LifecycleStage::default(),
        }
    }
}

/// The human-facing view of a job. Stored as JSON with the state fields at the top level beside
/// `history`; loading checks the invariants again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UncheckedSession")]
pub struct RuntimeSession {
    #[serde(flatten)]
    state: SessionState,
    /// Empty for a session kept beside its log ([`RuntimeSession::step`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<RuntimeEvent>,
    /// Events applied so far, kept or not: the index the next one would take.
    #[serde(default)]
    steps: usize,
}

#[derive(Deserialize)]
struct UncheckedSession {
    #[serde(flatten)]
    state: SessionState,
    #[serde(default)]
    history: Vec<RuntimeEvent>,
    #[serde(default)]
    steps: Option<usize>,
}

impl TryFrom<UncheckedSession> for RuntimeSession {
    type Error = InvalidSession;

    fn try_from(unchecked: UncheckedSession) -> Result<Self, InvalidSession> {
        let session = Self {
            state: unchecked.state,
            steps: unchecked.steps.unwrap_or(unchecked.history.len()),
            history: unchecked.history,
        };
        session.check_invariants()?;
        Ok(session)
    }
}

/// A stored session whose fields contradict the phase machine's invariants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("session `{session_id}` breaks an invariant: {reason}")]
pub struct InvalidSession {
    pub session_id: String,
    pub reason: String,
}

/// Applies one event to a copy of `session`. Pure: the same session and event always give the same
/// answer, and `session` itself is never changed.
pub fn apply_event(
    session: &RuntimeSession,
    event: RuntimeEvent,
) -> Result<RuntimeSession, TransitionError> {
    let mut next = session.clone();
    next.apply(event)?;
    Ok(next)
}

/// Rebuilds a session from its log, starting from the idle session.
pub fn fold(
    events: impl IntoIterator<Item = RuntimeEvent>,
) -> Result<RuntimeSession, TransitionError> {
    let mut session = RuntimeSession::new();
    for event in events {
        session.apply(event)?;
    }
    Ok(session)
}

impl RuntimeSession {
    /// The idle session every log is folded from; its id comes with `session_started`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `event` in place, or refuses it and changes nothing. Same rules as
    /// [`apply_event`], without copying the history.
    pub fn apply(&mut self, event: RuntimeEvent) -> Result<(), TransitionError> {
        self.step(&event)?;
        self.history.push(event);
        Ok(())
    }

    /// Applies `event` without keeping it in the history, for a caller that keeps the log
    /// itself (a job's session lives beside the job's event log). Same rules as
    /// [`apply`](Self::apply); a session stepped through a log equals the fold of that log
    /// but for its history.
    pub fn step(&mut self, event: &RuntimeEvent) -> Result<(), TransitionError> {
        self.state = self.next_state(event)?;
        self.steps += 1;
        Ok(())
    }

    /// Whether `event` would be accepted now, changing nothing.
    pub fn check(&self, event: &RuntimeEvent) -> Result<(), TransitionError> {
        self.next_state(event).map(|_| ())
    }

    fn next_state(&self, event: &RuntimeEvent) -> Result<SessionState, TransitionError> {
        transition(&self.state, event).map_err(|violation| TransitionError {
            event_index: self.steps,
            event: event.kind(),
            phase: self.phase_label(),
            violation,
        })
    }

    /// The session without its history: what a session stepped through the same log holds.
    pub fn without_history(&self) -> RuntimeSession {
        RuntimeSession {
            state: self.state.clone(),
            history: Vec::new(),
            steps: self.steps,
        }
    }

    /// The only way to hand artifacts to later movements or to subtasks: accepted ones, in the
    /// order they were produced.
    pub fn facts(&self) -> Vec<Fact> {
        self.state
            .artifacts
            .iter()
            .filter(|record| record.status() == ArtifactStatus::Accepted)
            .filter_map(|record| Fact::try_from(record.clone()).ok())
            .collect()
    }

    /// Every artifact whatever its status, for showing and reviewing. Not facts: downstream
    /// code takes [`facts`](Self::facts).
    pub fn artifacts(&self) -> &[ArtifactRecord] {
        &self.state.artifacts
    }

    pub fn artifact(&self, artifact_id: &str) -> Option<&ArtifactRecord> {
        self.state.artifacts.iter().find(|a| a.id() == artifact_id)
    }

    /// Empty until `session_started`.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    pub fn phase(&self) -> RuntimePhase {
        self.state.phase
    }

    /// Set exactly when the phase is `waiting_user`.
    pub fn waiting_reason(&self) -> Option<&WaitingReason> {
        self.state.waiting_reason.as_ref()
    }

    pub fn phase_label(&self) -> PhaseLabel {
        PhaseLabel {
            phase: self.state.phase,
            waiting: self.state.waiting_reason.as_ref().map(WaitingReason::kind),
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.state.phase.is_terminal()
    }

    /// Set while a worker (or a wait for subtasks) holds the session; the agent is paused.
    pub fn current_worker_id(&self) -> Option<&str> {
        self.state.current_worker_id.as_deref()
    }

    pub fn active_skill(&self) -> Option<&str> {
        self.state.active_skill.as_deref()
    }

    pub fn acceptance_mode(&self) -> AcceptanceMode {
        self.state.acceptance_mode
    }

    pub fn resume_context(&self) -> Option<&ResumeContext> {
        self.state.resume_context.as_ref()
    }

    pub fn slots(&self) -> &BTreeMap<String, String> {
        &self.state.slots
    }

    /// A decision awaiting approval (in approve_step) or approved and awaiting its worker.
    pub fn pending_decision(&self) -> Option<&MainAgentDecision> {
        self.state.pending_decision.as_ref()
    }

    pub fn history(&self) -> &[RuntimeEvent] {
        &self.history
    }

    /// Loop-tool calls since the last user event; never above [`max_burst`](Self::max_burst).
    pub fn tool_loop_burst_count(&self) -> u32 {
        self.state.tool_loop_burst_count
    }

    pub fn max_burst(&self) -> u32 {
        self.state.max_burst
    }

    pub fn lifecycle_stage(&self) -> LifecycleStage {
        self.state.lifecycle_stage
    }

    /// Checks the invariants the phase machine keeps; sessions it built always pass, so this is
    /// for sessions loaded from storage.
    pub fn check_invariants(&self) -> Result<(), InvalidSession> {
        match self.state.invariant_breach() {
            None => Ok(()),
            Some(reason) => Err(InvalidSession {
                session_id: self.state.id.clone(),
                reason,
            }),
        }
    }
}

impl SessionState {
    fn invariant_breach(&self) -> Option<String> {
        let waiting = self.waiting_reason.as_ref();
        if (self.phase == RuntimePhase::WaitingUser) != waiting.is_some() {
            return Some(format!(
                "phase `{}` with waiting reason {:?}",
                self.phase,
                waiting.map(WaitingReason::kind)
            ));
        }
        if self.max_burst == 0 || self.tool_loop_burst_count > self.max_burst {
            return Some(format!(
                "burst count {} against max_burst {}",
                self.tool_loop_burst_count, self.max_burst
            ));
        }
        let mut ids = BTreeSet::new();
        if let Some(duplicate) = self.artifacts.iter().find(|a| !ids.insert(a.id())) {
            return Some(format!("artifact `{}` appears twice", duplicate.id()));
        }
        if self.phase.is_terminal()
            && (self.current_worker_id.is_some()
                || self.resume_context.is_some()
                || self.pending_decision.is_some())
        {
            return Some("an ended session still holds a worker, a park or a decision".into());
        }
        self.waiting_breach()
            .or_else(|| self.park_breach())
            .or_else(|| self.review_breach())
    }

    /// While the session lives, an artifact is drafted only inside a transition, and under review
    /// only while the user is asked to review it.
    fn review_breach(&self) -> Option<String> {
        if self.phase.is_terminal() {
            return None;
        }
        let reviewed = match &self.waiting_reason {
            Some(WaitingReason::ReviewArtifact { artifact_id }) => Some(artifact_id.as_str()),
            _ => None,
        };
        self.artifacts
            .iter()
            .find(|a| match a.status() {
                ArtifactStatus::Drafted => true,
                ArtifactStatus::UnderReview => Some(a.id()) != reviewed,
                _ => false,
            })
            .map(|a| format!("artifact `{}` is {} outside its review", a.id(), a.status()))
    }

    /// Each waiting reason points at something the session actually holds.
    fn waiting_breach(&self) -> Option<String> {
        match self.waiting_reason.as_ref()? {
            WaitingReason::ApproveStep { decision_id } => {
                let pending = self.pending_decision.as_ref().map(|d| &d.decision_id);
                (pending != Some(decision_id))
                    .then(|| format!("approve_step for `{decision_id}` without that decision"))
            }
            WaitingReason::ReviewArtifact { artifact_id } => {
                let status = self.artifacts.iter().find(|a| a.id() == artifact_id);
                (status.map(ArtifactRecord::status) != Some(ArtifactStatus::UnderReview))
                    .then(|| format!("review_artifact for `{artifact_id}`, not under review"))
            }
            WaitingReason::WorkerQuestions { worker_id, .. } => (self.current_worker_id.as_ref()
                != Some(worker_id))
            .then(|| format!("worker_questions from `{worker_id}`, not the current worker")),
            _ => None,
        }
    }

    /// A park is always visible in the phase it maps to (DESIGN §5).
    fn park_breach(&self) -> Option<String> {
        let parked = self.resume_context.as_ref()?.parked;
        let waiting = self.waiting_reason.as_ref().map(WaitingReason::kind);
        let consistent = match parked {
            ParkKind::Ask => waiting == Some(WaitingKind::Input),
            ParkKind::BrowserLogin => waiting == Some(WaitingKind::BrowserLogin),
            ParkKind::ToolRequest => waiting == Some(WaitingKind::ApproveStep),
            ParkKind::Subtasks => {
                self.phase == RuntimePhase::Running && self.current_worker_id.is_some()
            }
        };
        (!consistent).then(|| format!("a `{parked}` park in phase `{}`", self.phase))
    }
}
