//! `transition`: the rules behind [`apply_event`](super::apply_event). It computes a new state from
//! a copy of the old one, so an event it refuses changes nothing. This file holds the dispatch, the
//! shared guards, and the session-level events; workers and review are in `work.rs`, parks in
//! `park.rs`.

use std::collections::BTreeMap;

use super::artifact::ArtifactStatus;
use super::error::Violation;
use super::event::{EventKind, FinishOutcome, MainAgentDecision, RuntimeEvent, SkillStart};
use super::park::{park, resume};
use super::session::{AcceptanceMode, DEFAULT_MAX_BURST, LifecycleStage, SessionState};
use super::waiting::{RuntimePhase, WaitingKind, WaitingReason};
use super::work::{review, start_worker, worker_asked_questions, worker_completed};

pub(super) fn transition(
    state: &SessionState,
    event: &RuntimeEvent,
) -> Result<SessionState, Violation> {
    if state.phase.is_terminal() {
        return Err(Violation::SessionEnded);
    }
    let mut next = state.clone();
    let kind = event.kind();
    match event {
        RuntimeEvent::SessionStarted {
            session_id,
            start: skill_start,
            acceptance_mode,
            max_burst,
        } => start(
            &mut next,
            session_id,
            skill_start,
            *acceptance_mode,
            *max_burst,
        )?,
        RuntimeEvent::SkillSelected {
            skill,
            intake_prompt,
        } => select_skill(&mut next, skill, intake_prompt)?,
        RuntimeEvent::IntakeCompleted { slots } => complete_intake(&mut next, slots)?,
        RuntimeEvent::UserConfirmed => confirm(&mut next)?,
        RuntimeEvent::UserDeclined { .. } => decline(&mut next)?,
        RuntimeEvent::UserMessage { .. } => user_message(&mut next)?,
        RuntimeEvent::LoopToolCalled { .. } => call_loop_tool(&mut next)?,
        RuntimeEvent::BoundaryToolCalled {
            decision,
            approval_required,
        } => call_boundary_tool(&mut next, decision, *approval_required)?,
        RuntimeEvent::WorkerStarted { worker_id } => start_worker(&mut next, worker_id)?,
        RuntimeEvent::WorkerAskedQuestions {
            worker_id,
            questions,
        } => worker_asked_questions(&mut next, worker_id, questions)?,
        RuntimeEvent::WorkerCompleted {
            worker_id,
            artifact,
            acceptance_mode,
        } => worker_completed(&mut next, worker_id, artifact.as_ref(), *acceptance_mode)?,
        RuntimeEvent::UserAccepted { artifact_id } => {
            review(&mut next, kind, artifact_id, ArtifactStatus::Accepted, None)?
        }
        RuntimeEvent::UserRejected { artifact_id, .. } => {
            review(&mut next, kind, artifact_id, ArtifactStatus::Rejected, None)?
        }
        RuntimeEvent::UserRequestedRevision {
            artifact_id,
            instruction,
        } => review(
            &mut next,
            kind,
            artifact_id,
            ArtifactStatus::RevisionRequested,
            instruction.as_deref(),
        )?,
        RuntimeEvent::Parked {
            call_id,
            movement,
            park: parked,
        } => park(&mut next, call_id, movement, parked)?,
        RuntimeEvent::Resumed {
            call_id,
            resume: answer,
        } => resume(&mut next, call_id, answer)?,
        RuntimeEvent::Finished { outcome, .. } => {
            // Only the agent itself completes; a guard or a cancel may stop it anywhere.
            if *outcome == FinishOutcome::Completed {
                next.require_agent_free(kind)?;
            }
            next.end(RuntimePhase::Done);
            next.lifecycle_stage = LifecycleStage::Done;
        }
        // The business stage is left where the failure found it.
        RuntimeEvent::Failed { .. } => next.end(RuntimePhase::Error),
    }
    Ok(next)
}

impl SessionState {
    pub(super) fn wait(&mut self, reason: WaitingReason) {
        self.phase = RuntimePhase::WaitingUser;
        self.waiting_reason = Some(reason);
    }

    pub(super) fn run(&mut self) {
        self.phase = RuntimePhase::Running;
        self.waiting_reason = None;
        self.lifecycle_stage = LifecycleStage::Play;
    }

    /// Only a user event starts a new burst.
    pub(super) fn user_acted(&mut self) {
        self.tool_loop_burst_count = 0;
    }

    fn end(&mut self, phase: RuntimePhase) {
        self.phase = phase;
        self.waiting_reason = None;
        self.current_worker_id = None;
        self.resume_context = None;
        self.pending_decision = None;
    }

    pub(super) fn waiting_kind(&self) -> Option<WaitingKind> {
        self.waiting_reason.as_ref().map(WaitingReason::kind)
    }

    /// The agent may act only while running with no worker holding the session.
    pub(super) fn require_agent_free(&self, event: EventKind) -> Result<(), Violation> {
        if self.phase != RuntimePhase::Running {
            return Err(Violation::wrong_phase(event));
        }
        match &self.current_worker_id {
            Some(worker_id) => Err(Violation::WorkerBlocking {
                worker_id: worker_id.clone(),
            }),
            None => Ok(()),
        }
    }

    /// A wait that a park opened is closed by `resumed` alone, so that the parked call is
    /// re-invoked exactly once.
    pub(super) fn require_not_parked(&self) -> Result<(), Violation> {
        match &self.resume_context {
            Some(context) => Err(Violation::AwaitingResume {
                call_id: context.call_id.clone(),
            }),
            None => Ok(()),
        }
    }
}

fn start(
    s: &mut SessionState,
    session_id: &str,
    skill_start: &SkillStart,
    acceptance_mode: AcceptanceMode,
    max_burst: Option<u32>,
) -> Result<(), Violation> {
    if s.phase != RuntimePhase::Idle {
        return Err(Violation::wrong_phase(EventKind::SessionStarted));
    }
    if session_id.is_empty() {
        return Err(Violation::EmptySessionId);
    }
    s.max_burst = max_burst.unwrap_or(DEFAULT_MAX_BURST);
    if s.max_burst == 0 {
        return Err(Violation::ZeroMaxBurst);
    }
    s.id = session_id.to_owned();
    s.acceptance_mode = acceptance_mode;
    s.lifecycle_stage = LifecycleStage::Design;
    match skill_start {
        SkillStart::InitialSkill {
            skill,
            intake_prompt,
        } => {
            s.active_skill = Some(skill.clone());
            s.wait(WaitingReason::Intake {
                prompt: intake_prompt.clone(),
            });
        }
        SkillStart::ChooseSkill { available_skills } => {
            if available_skills.is_empty() {
                return Err(Violation::NoSkillsToChoose);
            }
            s.wait(WaitingReason::SkillSelection {
                available_skills: available_skills.clone(),
            });
        }
    }
    Ok(())
}

fn select_skill(s: &mut SessionState, skill: &str, intake_prompt: &str) -> Result<(), Violation> {
    let Some(WaitingReason::SkillSelection { available_skills }) = &s.waiting_reason else {
        return Err(Violation::wrong_phase(EventKind::SkillSelected));
    };
    if !available_skills.iter().any(|entry| entry.name == skill) {
        return Err(Violation::UnknownSkill {
            skill: skill.to_owned(),
        });
    }
    s.active_skill = Some(skill.to_owned());
    s.wait(WaitingReason::Intake {
        prompt: intake_prompt.to_owned(),
    });
    s.user_acted();
    Ok(())
}

fn complete_intake(
    s: &mut SessionState,
    slots: &BTreeMap<String, String>,
) -> Result<(), Violation> {
    if s.waiting_kind() != Some(WaitingKind::Intake) {
        return Err(Violation::wrong_phase(EventKind::IntakeCompleted));
    }
    s.slots.extend(
        slots
            .iter()
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    s.run();
    s.user_acted();
    Ok(())
}

fn confirm(s: &mut SessionState) -> Result<(), Violation> {
    match s.waiting_kind() {
        // Approving keeps the decision pending: the worker that carries it out clears it.
        Some(WaitingKind::ApproveStep | WaitingKind::Input) => s.require_not_parked()?,
        Some(WaitingKind::Intake | WaitingKind::Revision) => {}
        _ => return Err(Violation::wrong_phase(EventKind::UserConfirmed)),
    }
    s.run();
    s.user_acted();
    Ok(())
}

fn decline(s: &mut SessionState) -> Result<(), Violation> {
    if s.waiting_kind() != Some(WaitingKind::ApproveStep) {
        return Err(Violation::wrong_phase(EventKind::UserDeclined));
    }
    s.require_not_parked()?;
    s.pending_decision = None;
    s.run();
    s.user_acted();
    Ok(())
}

fn user_message(s: &mut SessionState) -> Result<(), Violation> {
    match s.waiting_kind() {
        None if s.phase == RuntimePhase::Running => s.require_agent_free(EventKind::UserMessage)?,
        Some(WaitingKind::Input) => {
            s.require_not_parked()?;
            s.run();
        }
        // The worker, if any, stays set: it goes on with the answers.
        Some(WaitingKind::WorkerQuestions | WaitingKind::Revision) => s.run(),
        _ => return Err(Violation::wrong_phase(EventKind::UserMessage)),
    }
    s.user_acted();
    Ok(())
}

fn call_loop_tool(s: &mut SessionState) -> Result<(), Violation> {
    s.require_agent_free(EventKind::LoopToolCalled)?;
    s.tool_loop_burst_count += 1;
    if s.tool_loop_burst_count >= s.max_burst {
        s.wait(WaitingReason::Input {
            message: Some(format!(
                "tool-loop burst limit reached: {} tool calls since the last user event",
                s.max_burst
            )),
        });
    }
    Ok(())
}

fn call_boundary_tool(
    s: &mut SessionState,
    decision: &MainAgentDecision,
    approval_required: bool,
) -> Result<(), Violation> {
    s.require_agent_free(EventKind::BoundaryToolCalled)?;
    if let Some(pending) = &s.pending_decision {
        return Err(Violation::DecisionAlreadyPending {
            decision_id: pending.decision_id.clone(),
        });
    }
    s.pending_decision = Some(decision.clone());
    if approval_required {
        s.wait(WaitingReason::ApproveStep {
            decision_id: decision.decision_id.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "transition_tests.rs"]
mod tests;
