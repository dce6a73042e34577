//! A job as the phase machine sees it: its [`RuntimeSession`] is the fold of the job's own event
//! log, translated event by event.
//!
//! Invariant: pure (no store, no clock), and one translation for both uses: the engine asks a
//! job's live [`JobSession`] before it records an event ([`JobSession::observe`] refuses what
//! the phase machine refuses, and then nothing is recorded), and [`job_session`] folds a stored
//! log through the same translation. So the live session is always the fold of the log (without
//! its history), and a log that does not fold is an error naming the event that broke it, never
//! a guessed phase.
//!
//! The translation:
//! - `started` → `session_started` (the piece is the skill; without one, the pieces to choose
//!   from), then `intake_completed` with the input when the piece has no intake of its own;
//!   `skill_chosen` → `skill_selected` (the same rule for the intake); `intake_completed` as is;
//! - a tool call (not the piece's `transition`) → `loop_tool_called`;
//! - a park of a tool → `parked` (the call id is the wait's id, so its resume names the same
//!   one); a park for subtasks shows as running with a worker set;
//! - the burst gate is not a park of the phase machine: the call that reached the limit already
//!   moved it to waiting_user/input, and the human's go-ahead is `user_confirmed`, a stop or a
//!   reply `user_message`;
//! - the engine's own waits (a piece to choose, an intake, a review, a revision's instruction,
//!   the worker, its question) are reached by their own events, so their parks and resumes
//!   translate to nothing: `artifact_drafted` → `worker_completed` with the artifact (after
//!   `worker_started` for a draft of the job's own call, which works as a worker of one step),
//!   `reviewed` → the verdict, `revision_instructed` and `worker_answered` → `user_message`,
//!   `worker_started`, `worker_asked` → `worker_asked_questions`, `worker_ended` →
//!   `worker_completed` without an artifact;
//! - `finished` → `finished` (completed, aborted, cancelled) or `failed` (error).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::answer::{Answer, HumanVerdict};
use super::events::JobEvent;
use super::job::JobStatus;
use super::tools::TRANSITION_TOOL;
use super::wait::WaitRequest;
use crate::phase::{
    FinishOutcome, MainAgentDecision, Park, Resume, RuntimeEvent, RuntimeSession, SkillStart,
    SubtaskResult, TransitionError,
};
use crate::plugin;

/// The session of a job, kept with the job and stepped through each event before it is
/// recorded.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JobSession {
    session: RuntimeSession,
    #[serde(default)]
    open: Option<OpenWait>,
}

/// The job's current wait, as far as the translation of its resume needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct OpenWait {
    wait: u32,
    kind: WaitKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WaitKind {
    /// A park of the phase machine: its resume is `resumed`.
    Park,
    /// The burst gate: its resume is the human's go-ahead, stop or reply.
    Burst,
    /// One of the engine's own waits: its resume comes as the events that follow.
    Engine,
}

impl JobSession {
    /// The phase machine's session (without a history: the log is the job's events).
    pub fn session(&self) -> &RuntimeSession {
        &self.session
    }

    /// Steps the session through `event`, or refuses it and changes nothing.
    pub fn observe(&mut self, job_id: &str, event: &JobEvent) -> Result<(), TransitionError> {
        let mut next = self.clone();
        for runtime_event in next.translate(job_id, event) {
            next.session.step(&runtime_event)?;
        }
        *self = next;
        Ok(())
    }

    /// Whether `event` would be accepted now, changing nothing.
    pub fn check(&self, job_id: &str, event: &JobEvent) -> Result<(), TransitionError> {
        self.clone().observe(job_id, event)
    }

    /// The session's events for `event`, remembering what the next ones need.
    fn translate(&mut self, job_id: &str, event: &JobEvent) -> Vec<RuntimeEvent> {
        let intake_of = |prompt: &Option<String>, input: &str| match prompt {
            Some(_) => None,
            None => Some(RuntimeEvent::IntakeCompleted {
                slots: input_slot(input),
            }),
        };
        match event {
            JobEvent::Started {
                piece,
                input,
                max_burst,
                acceptance,
                choose_from,
                intake,
                ..
            } => {
                let start = if choose_from.is_empty() {
                    SkillStart::InitialSkill {
                        skill: piece.clone(),
                        intake_prompt: intake.clone().unwrap_or_default(),
                    }
                } else {
                    SkillStart::ChooseSkill {
                        available_skills: choose_from.clone(),
                    }
                };
                let started = RuntimeEvent::SessionStarted {
                    session_id: job_id.to_owned(),
                    start,
                    acceptance_mode: *acceptance,
                    max_burst: Some(*max_burst),
                };
                let intake = intake_of(intake, input).filter(|_| choose_from.is_empty());
                std::iter::once(started).chain(intake).collect()
            }
            JobEvent::SkillChosen {
                piece,
                intake,
                input,
            } => {
                let chosen = RuntimeEvent::SkillSelected {
                    skill: piece.clone(),
                    intake_prompt: intake.clone().unwrap_or_default(),
                };
                std::iter::once(chosen)
                    .chain(intake_of(intake, input))
                    .collect()
            }
            JobEvent::IntakeCompleted { slots } => vec![RuntimeEvent::IntakeCompleted {
                slots: slots.clone(),
            }],
            JobEvent::ToolCalled { tool, .. } if tool != TRANSITION_TOOL => {
                vec![RuntimeEvent::LoopToolCalled { tool: tool.clone() }]
            }
            JobEvent::Parked {
                wait,
                request,
                resume_movement,
                ..
            } => {
                let (kind, park) = match park_of(*wait, request) {
                    Some(park) => (WaitKind::Park, Some(park)),
                    None if matches!(request, WaitRequest::BurstConfirmation { .. }) => {
                        (WaitKind::Burst, None)
                    }
                    None => (WaitKind::Engine, None),
                };
                self.open = Some(OpenWait { wait: *wait, kind });
                park.map(|park| RuntimeEvent::Parked {
                    call_id: wait_key(*wait),
                    movement: resume_movement.clone(),
                    park,
                })
                .into_iter()
                .collect()
            }
            JobEvent::Resumed { wait, resume, .. } => {
                let open = self.open.take().filter(|open| open.wait == *wait);
                match (open.map(|open| open.kind), resume) {
                    (Some(WaitKind::Burst), Answer::Resume(plugin::Resume::Approved)) => {
                        vec![RuntimeEvent::UserConfirmed]
                    }
                    (
                        Some(WaitKind::Burst),
                        Answer::Resume(
                            plugin::Resume::Denied(text) | plugin::Resume::Answered(text),
                        ),
                    ) => vec![RuntimeEvent::UserMessage { text: text.clone() }],
                    // Nobody said go on: the guard that ends the job follows.
                    (Some(WaitKind::Burst | WaitKind::Engine), _) => Vec::new(),
                    // A park's resume, or one the log has no park for: the phase machine
                    // judges it.
                    (Some(WaitKind::Park) | None, answer) => vec![match resume_of(answer) {
                        Some(resume) => RuntimeEvent::Resumed {
                            call_id: wait_key(*wait),
                            resume,
                        },
                        // Only a broken log gets here (the store refuses such an answer):
                        // the session says so rather than guess.
                        None => RuntimeEvent::Failed {
                            message: format!(
                                "wait {wait} was resumed with `{}`, which answers no park",
                                answer.name()
                            ),
                        },
                    }],
                }
            }
            JobEvent::ArtifactDrafted {
                artifact,
                by,
                worker,
                acceptance,
            } => {
                let completed = RuntimeEvent::WorkerCompleted {
                    worker_id: by.clone(),
                    artifact: Some(artifact.clone()),
                    acceptance_mode: *acceptance,
                };
                if *worker {
                    vec![completed]
                } else {
                    // A draft of the job's own call: the call works as a worker of one step.
                    vec![
                        RuntimeEvent::WorkerStarted {
                            worker_id: by.clone(),
                        },
                        completed,
                    ]
                }
            }
            JobEvent::Reviewed {
                artifact_id,
                verdict,
            } => {
                let artifact_id = artifact_id.clone();
                vec![match verdict {
                    HumanVerdict::Accept => RuntimeEvent::UserAccepted { artifact_id },
                    HumanVerdict::Reject { reason } => RuntimeEvent::UserRejected {
                        artifact_id,
                        reason: Some(reason.clone()),
                    },
                    HumanVerdict::Revise { instruction } => RuntimeEvent::UserRequestedRevision {
                        artifact_id,
                        instruction: instruction.clone(),
                    },
                }]
            }
            JobEvent::RevisionInstructed { text, .. } | JobEvent::WorkerAnswered { text, .. } => {
                vec![RuntimeEvent::UserMessage { text: text.clone() }]
            }
            JobEvent::WorkerStarted { worker, .. } => vec![RuntimeEvent::WorkerStarted {
                worker_id: worker.clone(),
            }],
            JobEvent::WorkerAsked { worker, question } => {
                vec![RuntimeEvent::WorkerAskedQuestions {
                    worker_id: worker.clone(),
                    questions: vec![question.clone()],
                }]
            }
            JobEvent::WorkerEnded { worker, .. } => vec![RuntimeEvent::WorkerCompleted {
                worker_id: worker.clone(),
                artifact: None,
                acceptance_mode: None,
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

/// Whether the session of `job_id` takes `answer` to its wait `wait`: the `resumed` event, and
/// for the engine's own waits the event the engine records right after it (a verdict, a
/// revision's instruction, the intake, an answer for the worker). What a store asks before it
/// records an answer.
pub fn check_answer(
    live: &JobSession,
    job_id: &str,
    wait: u32,
    request: &WaitRequest,
    answer: &Answer,
) -> Result<(), TransitionError> {
    let mut next = live.clone();
    let resumed = JobEvent::Resumed {
        wait,
        movement: String::new(),
        resume: answer.clone(),
    };
    next.observe(job_id, &resumed)?;
    if let Some(follow) = follow_up(request, answer) {
        next.observe(job_id, &follow)?;
    }
    Ok(())
}

/// The event the engine records once it applies `answer` to one of its own waits, where the
/// session has a rule for it.
fn follow_up(request: &WaitRequest, answer: &Answer) -> Option<JobEvent> {
    use super::answer::EngineAnswer;
    let instruction = match answer {
        Answer::Resume(plugin::Resume::Answered(text)) => Some(text.clone()),
        Answer::Engine(EngineAnswer::Review {
            verdict: HumanVerdict::Revise {
                instruction: Some(text),
            },
            ..
        }) => Some(text.clone()),
        _ => None,
    };
    match (request, answer) {
        (
            WaitRequest::ArtifactReview { artifact_id, .. },
            Answer::Engine(EngineAnswer::Review { verdict, .. }),
        ) => Some(JobEvent::Reviewed {
            artifact_id: artifact_id.clone(),
            verdict: verdict.clone(),
        }),
        (WaitRequest::RevisionInstruction { artifact_id, .. }, _) => {
            instruction.map(|text| JobEvent::RevisionInstructed {
                artifact_id: artifact_id.clone(),
                text,
            })
        }
        (WaitRequest::WorkerQuestion { worker, .. }, _) => {
            instruction.map(|text| JobEvent::WorkerAnswered {
                worker: worker.clone(),
                text,
            })
        }
        (WaitRequest::Intake { .. }, Answer::Engine(EngineAnswer::Intake { slots })) => {
            Some(JobEvent::IntakeCompleted {
                slots: slots.clone(),
            })
        }
        _ => None,
    }
}

/// The session of job `job_id` from its log, oldest event first, with its history.
pub fn job_session(job_id: &str, log: &[JobEvent]) -> Result<RuntimeSession, SessionLogError> {
    let mut session = RuntimeSession::new();
    let mut translation = JobSession::default();
    for (index, event) in log.iter().enumerate() {
        for runtime_event in translation.translate(job_id, event) {
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

/// The live session of a job whose log is `log`: for a job stored before sessions were kept
/// with jobs.
pub fn live_session(job_id: &str, log: &[JobEvent]) -> Result<JobSession, SessionLogError> {
    let mut live = JobSession::default();
    for (index, event) in log.iter().enumerate() {
        live.observe(job_id, event)
            .map_err(|error| SessionLogError {
                job_id: job_id.to_owned(),
                event_index: index,
                error,
            })?;
    }
    Ok(live)
}

/// The phase machine's events for a whole log, without applying them.
pub fn runtime_events(job_id: &str, log: &[JobEvent]) -> Vec<RuntimeEvent> {
    let mut translation = JobSession::default();
    log.iter()
        .flat_map(|event| translation.translate(job_id, event))
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

fn input_slot(input: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(crate::piece::INPUT_SLOT.to_owned(), input.to_owned())])
}

/// The phase machine's name for a wait: parks and resumes are matched by it.
fn wait_key(wait: u32) -> String {
    format!("wait-{wait}")
}

/// `None` for the waits that are not parks of the phase machine.
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
        WaitRequest::BurstConfirmation { .. }
        | WaitRequest::SkillSelection { .. }
        | WaitRequest::Intake { .. }
        | WaitRequest::ArtifactReview { .. }
        | WaitRequest::RevisionInstruction { .. }
        | WaitRequest::Worker { .. }
        | WaitRequest::WorkerQuestion { .. } => return None,
    })
}

/// The phase machine's resume for an answer; `None` for the engine's own answers and the
/// resumes of 0.2.0 parks, which answer the engine's waits, never a park of the phase machine.
fn resume_of(answer: &Answer) -> Option<Resume> {
    let Answer::Resume(resume) = answer else {
        return None;
    };
    Some(match resume {
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
        plugin::Resume::Reviewed(_) | plugin::Resume::WorkerDone(_) => return None,
    })
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
