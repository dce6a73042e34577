//! A job as the phase machine sees it: its [`RuntimeSession`] is the fold of the job's own event
//! log, translated event by event.
//!
//! Invariant: pure (no store, no clock). The engine keeps the phase machine's rules itself — tool
//! calls only while running, the burst gate at `max_burst`, one park at a time, a human action
//! resets the burst — so the log of any job it ran folds without a refused event, and the session
//! can be rebuilt from the store at any time. A log that does not fold is an error naming the
//! event that broke it, never a guessed phase.
//!
//! The translation:
//! - `started` → `session_started` (the piece is the skill) and `intake_completed` with the
//!   input: a job's input is its intake;
//! - a tool call (not the piece's `transition`) → `loop_tool_called`;
//! - a park → `parked` (the call id is the wait's id, so its resume names the same one); a park
//!   for subtasks shows as running with a worker set;
//! - the burst gate is not a park of the phase machine: the call that reached the limit already
//!   moved it to waiting_user/input, and the human's go-ahead is `user_confirmed`, a stop or a
//!   reply `user_message`;
//! - `finished` → `finished` (completed, aborted, cancelled) or `failed` (error).

use std::collections::BTreeMap;

use super::events::JobEvent;
use super::job::{JobStatus, WaitRequest};
use super::tools::TRANSITION_TOOL;
use crate::phase::{
    AcceptanceMode, FinishOutcome, MainAgentDecision, Park, Resume, RuntimeEvent, RuntimeSession,
    SkillStart, SubtaskResult, TransitionError,
};
use crate::plugin;

/// The session of job `job_id` from its log, oldest event first.
pub fn job_session(job_id: &str, log: &[JobEvent]) -> Result<RuntimeSession, SessionLogError> {
    let mut session = RuntimeSession::new();
    let mut translator = Translator::default();
    for (index, event) in log.iter().enumerate() {
        for runtime_event in translator.translate(job_id, event) {
            session
                .apply(runtime_event)
                .map_err(|error| SessionLogError {
                    job_id: job_id.to_owned(),
                    event_index: index,
                    error,
                })?;
        }
    }
    Ok(session)
}

/// The phase machine's events for a whole log, without applying them.
pub fn runtime_events(job_id: &str, log: &[JobEvent]) -> Vec<RuntimeEvent> {
    let mut translator = Translator::default();
    log.iter()
        .flat_map(|event| translator.translate(job_id, event))
        .collect()
}

/// A job event the phase machine refused: the log and the engine's rules disagree.
#[derive(Debug, thiserror::Error)]
#[error("job `{job_id}`: event #{event_index} of its log does not fold into its session: {error}")]
pub struct SessionLogError {
    pub job_id: String,
    /// 0-based index in the job's log.
    pub event_index: usize,
    pub error: TransitionError,
}

/// The little the translation remembers between events: which wait is the burst gate.
#[derive(Default)]
struct Translator {
    burst_wait: Option<u32>,
}

impl Translator {
    fn translate(&mut self, job_id: &str, event: &JobEvent) -> Vec<RuntimeEvent> {
        match event {
            JobEvent::Started {
                piece,
                input,
                max_burst,
                ..
            } => vec![
                RuntimeEvent::SessionStarted {
                    session_id: job_id.to_owned(),
                    start: SkillStart::InitialSkill {
                        skill: piece.clone(),
                        intake_prompt: String::new(),
                    },
                    // Nothing a job produces becomes a fact without someone accepting it.
                    acceptance_mode: AcceptanceMode::UserConfirmed,
                    max_burst: Some(*max_burst),
                },
                RuntimeEvent::IntakeCompleted {
                    slots: BTreeMap::from([("input".to_owned(), input.clone())]),
                },
            ],
            JobEvent::ToolCalled { tool, .. } if tool != TRANSITION_TOOL => {
                vec![RuntimeEvent::LoopToolCalled { tool: tool.clone() }]
            }
            JobEvent::Parked {
                wait,
                request,
                resume_movement,
                ..
            } => match park_of(*wait, request) {
                Some(park) => vec![RuntimeEvent::Parked {
                    call_id: wait_key(*wait),
                    movement: resume_movement.clone(),
                    park,
                }],
                None => {
                    self.burst_wait = Some(*wait);
                    Vec::new()
                }
            },
            JobEvent::Resumed { wait, resume, .. } if self.burst_wait == Some(*wait) => {
                self.burst_wait = None;
                match resume {
                    plugin::Resume::Approved => vec![RuntimeEvent::UserConfirmed],
                    plugin::Resume::Denied(text) | plugin::Resume::Answered(text) => {
                        vec![RuntimeEvent::UserMessage { text: text.clone() }]
                    }
                    // Nobody said go on: the guard that ends the job follows.
                    _ => Vec::new(),
                }
            }
            JobEvent::Resumed { wait, resume, .. } => vec![RuntimeEvent::Resumed {
                call_id: wait_key(*wait),
                resume: resume_of(resume),
            }],
            JobEvent::Finished { status, detail } => vec![finish_of(*status, detail)],
            JobEvent::ToolCalled { .. }
            | JobEvent::MovementEntered { .. }
            | JobEvent::ModelReplied { .. }
            | JobEvent::ToolAnswered { .. }
            | JobEvent::Transition { .. } => Vec::new(),
        }
    }
}

/// The phase machine's name for a wait: parks and resumes are matched by it.
fn wait_key(wait: u32) -> String {
    format!("wait-{wait}")
}

/// `None` for the burst gate, which is not a park of the phase machine.
fn park_of(wait: u32, request: &WaitRequest) -> Option<Park> {
    Some(match request {
        WaitRequest::Question { question } => Park::Ask {
            question: Some(question.clone()),
        },
        WaitRequest::BrowserLogin { url, .. } => Park::BrowserLogin { url: url.clone() },
        WaitRequest::ToolApproval {
            tool, arguments, ..
        } => Park::ToolRequest {
            decision: MainAgentDecision {
                decision_id: wait_key(wait),
                tool: tool.clone(),
                arguments: arguments.clone(),
            },
        },
        WaitRequest::Subtasks { job_ids } => Park::Subtasks {
            worker_id: format!("subtasks-of-{}", wait_key(wait)),
            subtask_ids: job_ids.clone(),
        },
        WaitRequest::BurstConfirmation { .. } => return None,
    })
}

fn resume_of(resume: &plugin::Resume) -> Resume {
    match resume {
        plugin::Resume::Answered(answer) => Resume::Answered {
            answer: answer.clone(),
        },
        plugin::Resume::Approved => Resume::Approved,
        plugin::Resume::Denied(reason) => Resume::Denied {
            reason: Some(reason.clone()),
        },
        // The session keeps no secret: a login's cookie stays out of it.
        plugin::Resume::LoggedIn(_) => Resume::LoggedIn {
            message: "logged in".to_owned(),
        },
        plugin::Resume::SubtasksDone(results) => Resume::SubtasksDone {
            results: results
                .iter()
                .map(|result| SubtaskResult {
                    job_id: result.job_id.clone(),
                    output: result.output.clone(),
                })
                .collect(),
        },
        plugin::Resume::Expired => Resume::Expired,
    }
}

fn finish_of(status: JobStatus, detail: &str) -> RuntimeEvent {
    let finished = |outcome| RuntimeEvent::Finished {
        outcome,
        reason: Some(detail.to_owned()).filter(|d| !d.is_empty()),
    };
    match status {
        JobStatus::Completed => finished(FinishOutcome::Completed),
        JobStatus::Aborted => finished(FinishOutcome::Aborted),
        JobStatus::Cancelled => finished(FinishOutcome::Cancelled),
        JobStatus::Error
        | JobStatus::Pending
        | JobStatus::Running
        | JobStatus::WaitingHuman
        | JobStatus::WaitingSubtasks => RuntimeEvent::Failed {
            message: detail.to_owned(),
        },
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
