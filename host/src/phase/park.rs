//! Parks and resumes (DESIGN §5). A park records the call to re-invoke and shows as the matching
//! wait; a resume answers that one call, once, and the session runs again.

use super::error::Violation;
use super::event::{EventKind, Park, ParkKind, Resume};
use super::session::{ResumeContext, SessionState};
use super::waiting::{RuntimePhase, WaitingReason};

pub(super) fn park(
    s: &mut SessionState,
    call_id: &str,
    movement: &str,
    parked: &Park,
) -> Result<(), Violation> {
    if s.phase != RuntimePhase::Running {
        return Err(Violation::wrong_phase(EventKind::Parked));
    }
    if let Some(context) = &s.resume_context {
        return Err(Violation::AlreadyParked {
            call_id: context.call_id.clone(),
        });
    }
    // A worker's own tools may park too, so ask, browser login and tool request keep the worker.
    match parked {
        Park::Ask { question } => s.wait(WaitingReason::Input {
            message: question.clone(),
        }),
        Park::BrowserLogin { url } => s.wait(WaitingReason::BrowserLogin { url: url.clone() }),
        Park::ToolRequest { decision } => {
            if let Some(pending) = &s.pending_decision {
                return Err(Violation::DecisionAlreadyPending {
                    decision_id: pending.decision_id.clone(),
                });
            }
            s.pending_decision = Some(decision.clone());
            s.wait(WaitingReason::ApproveStep {
                decision_id: decision.decision_id.clone(),
            });
        }
        // Waiting for subtasks is not waiting for the user: it runs, held by the worker.
        Park::Subtasks { worker_id, .. } => {
            if let Some(current) = &s.current_worker_id {
                return Err(Violation::WorkerAlreadyRunning {
                    worker_id: current.clone(),
                });
            }
            s.current_worker_id = Some(worker_id.clone());
        }
    }
    s.resume_context = Some(ResumeContext {
        call_id: call_id.to_owned(),
        movement: movement.to_owned(),
        parked: parked.kind(),
    });
    Ok(())
}

pub(super) fn resume(
    s: &mut SessionState,
    call_id: &str,
    answer: &Resume,
) -> Result<(), Violation> {
    let Some(context) = s.resume_context.take() else {
        return Err(Violation::NothingParked);
    };
    if context.call_id != call_id {
        return Err(Violation::ParkedCallMismatch {
            parked: context.call_id,
            got: call_id.to_owned(),
        });
    }
    if !answer.fits(context.parked) {
        return Err(Violation::ResumeMismatch {
            parked: context.parked,
            resume: answer.kind(),
        });
    }
    match context.parked {
        // The re-invoked call carries the verdict; the decision is settled either way.
        ParkKind::ToolRequest => s.pending_decision = None,
        ParkKind::Subtasks => s.current_worker_id = None,
        ParkKind::Ask | ParkKind::BrowserLogin => {}
    }
    if answer.is_user_action() {
        s.user_acted();
    }
    s.run();
    Ok(())
}

#[cfg(test)]
#[path = "park_tests.rs"]
mod tests;
