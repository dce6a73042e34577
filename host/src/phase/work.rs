//! Workers and the review of what they produce. While a worker is set the agent is paused; when it
//! completes, its artifact is reviewed by the user or accepted by policy, per the acceptance mode.

use super::artifact::{ArtifactDraft, ArtifactRecord, ArtifactStatus};
use super::error::Violation;
use super::event::EventKind;
use super::session::{AcceptanceMode, SessionState};
use super::waiting::{RuntimePhase, WaitingReason};

pub(super) fn start_worker(s: &mut SessionState, worker_id: &str) -> Result<(), Violation> {
    if s.phase != RuntimePhase::Running {
        return Err(Violation::wrong_phase(EventKind::WorkerStarted));
    }
    if let Some(current) = &s.current_worker_id {
        return Err(Violation::WorkerAlreadyRunning {
            worker_id: current.clone(),
        });
    }
    s.current_worker_id = Some(worker_id.to_owned());
    // The worker carries out the approved decision, if there was one.
    s.pending_decision = None;
    Ok(())
}

pub(super) fn worker_asked_questions(
    s: &mut SessionState,
    worker_id: &str,
    questions: &[String],
) -> Result<(), Violation> {
    s.require_current_worker(EventKind::WorkerAskedQuestions, worker_id)?;
    if questions.is_empty() {
        return Err(Violation::NoQuestions);
    }
    s.wait(WaitingReason::WorkerQuestions {
        worker_id: worker_id.to_owned(),
        questions: questions.to_vec(),
    });
    Ok(())
}

pub(super) fn worker_completed(
    s: &mut SessionState,
    worker_id: &str,
    draft: Option<&ArtifactDraft>,
    acceptance_mode: Option<AcceptanceMode>,
) -> Result<(), Violation> {
    s.require_current_worker(EventKind::WorkerCompleted, worker_id)?;
    s.current_worker_id = None;
    let Some(draft) = draft else {
        return Ok(());
    };
    if s.artifacts.iter().any(|a| a.id() == draft.id) {
        return Err(Violation::DuplicateArtifact {
            artifact_id: draft.id.clone(),
        });
    }
    if let Some(revised) = &draft.revises
        && !s.artifacts.iter().any(|a| a.id() == revised)
    {
        return Err(Violation::UnknownArtifact {
            artifact_id: revised.clone(),
        });
    }
    let mut record = ArtifactRecord::drafted(draft.clone(), worker_id);
    record.advance(ArtifactStatus::UnderReview)?;
    match acceptance_mode.unwrap_or(s.acceptance_mode) {
        AcceptanceMode::UserConfirmed => s.wait(WaitingReason::ReviewArtifact {
            artifact_id: draft.id.clone(),
        }),
        // The policy is the reviewer: the artifact still passes through review, never around it.
        AcceptanceMode::Auto => record.advance(ArtifactStatus::Accepted)?,
    }
    s.artifacts.push(record);
    Ok(())
}

/// The user's verdict on the artifact under review.
pub(super) fn review(
    s: &mut SessionState,
    event: EventKind,
    artifact_id: &str,
    verdict: ArtifactStatus,
    instruction: Option<&str>,
) -> Result<(), Violation> {
    let Some(WaitingReason::ReviewArtifact {
        artifact_id: under_review,
    }) = &s.waiting_reason
    else {
        return Err(Violation::wrong_phase(event));
    };
    if under_review != artifact_id {
        return Err(Violation::ArtifactNotUnderReview {
            artifact_id: artifact_id.to_owned(),
            under_review: under_review.clone(),
        });
    }
    let record = s
        .artifacts
        .iter_mut()
        .find(|a| a.id() == artifact_id)
        .ok_or_else(|| Violation::UnknownArtifact {
            artifact_id: artifact_id.to_owned(),
        })?;
    record.advance(verdict)?;
    s.user_acted();
    // A revision asked for without saying what to change still needs the user's instruction.
    if verdict == ArtifactStatus::RevisionRequested && instruction.is_none() {
        s.wait(WaitingReason::Revision { instruction: None });
    } else {
        s.run();
    }
    Ok(())
}

impl SessionState {
    /// Worker events come only from the worker that holds the session, and not while it waits on
    /// subtasks (that wait ends with `resumed`).
    fn require_current_worker(&self, event: EventKind, worker_id: &str) -> Result<(), Violation> {
        if self.phase != RuntimePhase::Running {
            return Err(Violation::wrong_phase(event));
        }
        match &self.current_worker_id {
            None => return Err(Violation::NoWorker),
            Some(current) if current != worker_id => {
                return Err(Violation::WorkerMismatch {
                    current: current.clone(),
                    reported: worker_id.to_owned(),
                });
            }
            Some(_) => {}
        }
        self.require_not_parked()
    }
}

#[cfg(test)]
#[path = "work_tests.rs"]
mod tests;
