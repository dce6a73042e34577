//! The piece runner: from one movement's result to the job's next step, and the loop over
//! movements that drives a job until it ends or parks.
//!
//! Invariant: [`map_movement_result`] is the table of DESIGN §5, kept exactly and pure: a
//! movement name continues the piece; `COMPLETE` completes; `ABORT` aborts (or cancels, when
//! the cause is a cancellation); `ASK` parks as `waiting_human`/input (aborts past the ask
//! limit); `WAIT_SUBTASKS` parks as `waiting_subtasks`; `WAITING_HUMAN_BROWSER` and
//! `WAITING_HUMAN_TOOL_REQUEST` park as `waiting_human` with their reason, and so do the
//! engine's `WAITING_HUMAN_REVIEW` (an artifact's review or a revision's instruction) and
//! `WAITING_HUMAN_WORKER` (a worker's question); no `next` is an error. Every park carries a
//! resume movement — a park without one is an error, never a silent end.

use serde::{Deserialize, Serialize};
use tracing::Instrument;

use super::agent_loop::{self, LoopContext};
use super::answer::Answer;
use super::events::{JobEvent, Observer};
use super::job::{JobState, JobStatus, ResumePoint, Wait};
use super::wait::WaitReason;
use crate::llm::Message;
use crate::piece::{DefaultNext, Sentinel};
use crate::plugin::{Resume, SubtaskResult, SubtaskStatus};

/// Where a movement says the piece goes: another movement or a sentinel (`MovementResult.next`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Movement(String),
    Sentinel(Sentinel),
}

/// The engine's guards: each ends a job that would otherwise run away, and names itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guard {
    MaxMovements,
    MaxIterations,
    TextOnlyLimit,
    AskLimit,
    BurstLimit,
    ParkLimit,
    /// Nobody answered one of the engine's own waits in time (a piece to choose, an intake, a
    /// review, a worker's question): without a human, none of them can go on.
    WaitExpired,
}

impl Guard {
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::WaitExpired => "wait_expired",
            Guard::MaxMovements => "max_movements",
            Guard::MaxIterations => "max_iterations",
            Guard::TextOnlyLimit => "text_only_limit",
            Guard::AskLimit => "ask_limit",
            Guard::BurstLimit => "burst_limit",
            Guard::ParkLimit => "park_limit",
        }
    }
}

/// How one movement ended (the seed's `finishMovement` argument).
#[derive(Debug, Clone, PartialEq)]
pub struct MovementResult {
    /// `None`: the loop ended with nothing settled.
    pub next: Option<Target>,
    /// Set for every park: where the job resumes.
    pub resume_movement: Option<String>,
    pub wait_reason: Option<WaitReason>,
    /// What a park waits for and how it resumes.
    pub wait: Option<Wait>,
    /// The output (COMPLETE), the reason (ABORT) or the error (no `next`).
    pub detail: String,
    /// Set when a guard produced the ABORT.
    pub guard: Option<Guard>,
    /// Set when the ABORT is a cancellation by a user or operator.
    pub cancelled: bool,
}

impl MovementResult {
    fn with_next(next: Option<Target>, detail: String) -> Self {
        Self {
            next,
            resume_movement: None,
            wait_reason: None,
            wait: None,
            detail,
            guard: None,
            cancelled: false,
        }
    }

    pub fn goto(movement: impl Into<String>) -> Self {
        Self::with_next(Some(Target::Movement(movement.into())), String::new())
    }

    pub fn complete(output: impl Into<String>) -> Self {
        Self::with_next(Some(Target::Sentinel(Sentinel::Complete)), output.into())
    }

    pub fn abort(reason: impl Into<String>) -> Self {
        Self::with_next(Some(Target::Sentinel(Sentinel::Abort)), reason.into())
    }

    pub fn guard(guard: Guard, detail: impl Into<String>) -> Self {
        Self {
            guard: Some(guard),
            ..Self::abort(detail)
        }
    }

    /// A cancel, with the reason its asker gave, if any.
    pub fn cancelled(reason: Option<&str>) -> Self {
        Self {
            cancelled: true,
            ..Self::abort(reason.unwrap_or("cancelled by a user or operator"))
        }
    }

    pub fn park(sentinel: Sentinel, resume_movement: impl Into<String>, wait: Wait) -> Self {
        Self {
            resume_movement: Some(resume_movement.into()),
            wait_reason: wait.reason,
            wait: Some(wait),
            ..Self::with_next(Some(Target::Sentinel(sentinel)), String::new())
        }
    }

    pub fn unsettled(detail: impl Into<String>) -> Self {
        Self::with_next(None, detail.into())
    }
}

/// How a run of a job ended (`PieceRunResult`): final, or parked with where to resume.
#[derive(Debug, Clone, PartialEq)]
pub enum PieceRunResult {
    Completed {
        output: String,
    },
    Aborted {
        reason: String,
        guard: Option<Guard>,
    },
    Cancelled {
        reason: String,
    },
    WaitingHuman {
        resume_movement: String,
        reason: WaitReason,
        wait: Wait,
    },
    WaitingSubtasks {
        resume_movement: String,
        wait: Wait,
    },
    Error {
        message: String,
    },
}

impl PieceRunResult {
    pub fn status(&self) -> JobStatus {
        match self {
            PieceRunResult::Completed { .. } => JobStatus::Completed,
            PieceRunResult::Aborted { .. } => JobStatus::Aborted,
            PieceRunResult::Cancelled { .. } => JobStatus::Cancelled,
            PieceRunResult::WaitingHuman { .. } => JobStatus::WaitingHuman,
            PieceRunResult::WaitingSubtasks { .. } => JobStatus::WaitingSubtasks,
            PieceRunResult::Error { .. } => JobStatus::Error,
        }
    }
}

/// What the runner does after a movement.
// Made once per movement and consumed at once: boxing the result would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Continue(String),
    Done(PieceRunResult),
}

/// What the mapping needs to know about the job besides the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapContext {
    /// `ASK` parks already made by this job.
    pub asks_so_far: u32,
    pub max_asks: u32,
}

/// DESIGN §5, row by row.
pub fn map_movement_result(result: MovementResult, context: MapContext) -> Step {
    let MovementResult {
        next,
        resume_movement,
        wait_reason,
        wait,
        detail,
        guard,
        cancelled,
    } = result;
    let sentinel = match next {
        None => {
            return Step::Done(PieceRunResult::Error {
                message: if detail.is_empty() {
                    "the movement ended with nothing settled".to_owned()
                } else {
                    detail
                },
            });
        }
        Some(Target::Movement(movement)) => return Step::Continue(movement),
        Some(Target::Sentinel(sentinel)) => sentinel,
    };
    let done = |result| Step::Done(result);
    match sentinel {
        Sentinel::Complete => done(PieceRunResult::Completed { output: detail }),
        Sentinel::Abort if cancelled => done(PieceRunResult::Cancelled { reason: detail }),
        Sentinel::Abort => done(PieceRunResult::Aborted {
            reason: detail,
            guard,
        }),
        park => {
            let (Some(resume_movement), Some(wait)) = (resume_movement, wait) else {
                return done(PieceRunResult::Error {
                    message: format!(
                        "{park} was raised without a resume movement and a wait: a park must \
                         say where the job resumes"
                    ),
                });
            };
            match park {
                // A burst confirmation parks like a question but is the engine's own, not the
                // agent's: it does not count toward the ask limit.
                Sentinel::Ask
                    if context.asks_so_far >= context.max_asks && wait.request.is_question() =>
                {
                    done(PieceRunResult::Aborted {
                        reason: format!(
                            "the job asked the user {} times, the limit is {}",
                            context.asks_so_far + 1,
                            context.max_asks
                        ),
                        guard: Some(Guard::AskLimit),
                    })
                }
                Sentinel::WaitSubtasks => done(PieceRunResult::WaitingSubtasks {
                    resume_movement,
                    wait,
                }),
                Sentinel::Ask
                | Sentinel::WaitingHumanBrowser
                | Sentinel::WaitingHumanToolRequest
                | Sentinel::WaitingHumanReview
                | Sentinel::WaitingHumanWorker => {
                    let expected: &[WaitReason] = match park {
                        Sentinel::Ask => &[WaitReason::Input],
                        Sentinel::WaitingHumanBrowser => &[WaitReason::BrowserLogin],
                        Sentinel::WaitingHumanToolRequest => &[WaitReason::ToolRequest],
                        Sentinel::WaitingHumanReview => {
                            &[WaitReason::ReviewArtifact, WaitReason::Revision]
                        }
                        _ => &[WaitReason::WorkerQuestions],
                    };
                    match wait_reason {
                        Some(reason) if expected.contains(&reason) => {
                            done(PieceRunResult::WaitingHuman {
                                resume_movement,
                                reason,
                                wait,
                            })
                        }
                        other => done(PieceRunResult::Error {
                            message: format!(
                                "{park} needs the wait reason {}, got {}",
                                expected
                                    .iter()
                                    .map(|reason| reason.as_str())
                                    .collect::<Vec<_>>()
                                    .join(" or "),
                                other.map_or("none", WaitReason::as_str)
                            ),
                        }),
                    }
                }
                Sentinel::Complete | Sentinel::Abort => unreachable!("handled above"),
            }
        }
    }
}

/// Drives `job` through its movements until it ends or parks, then writes the result into the
/// job (status, wait, result) and emits the closing event.
pub(crate) async fn run_piece(
    cx: &LoopContext<'_>,
    job: &mut JobState,
    mut resume: Option<(Wait, Answer)>,
) -> PieceRunResult {
    if let Some((wait, answer)) = &resume
        && wait.resume == ResumePoint::EnterMovement
    {
        let answer = answer.as_resume();
        // A rule parked the job on WAIT_SUBTASKS: the children's results become part of the
        // conversation, and the piece continues at default_next (kept as the job's movement).
        let results = match answer {
            Some(Resume::SubtasksDone(results)) => results.clone(),
            _ => Vec::new(),
        };
        let summary = subtasks_summary(&results, matches!(answer, Some(Resume::Expired)));
        job.conversation.push(Message::User {
            text: summary.clone(),
        });
        resume = None;
        match DefaultNext::from_default_next(&job.movement) {
            Ok(DefaultNext::Movement(_)) => job.entered = false,
            Ok(DefaultNext::Complete) => {
                return finish(
                    cx.observer,
                    job,
                    PieceRunResult::Completed { output: summary },
                );
            }
            Ok(DefaultNext::Abort) => {
                let reason = format!("the piece ends in ABORT after its subtasks. {summary}");
                return finish(
                    cx.observer,
                    job,
                    PieceRunResult::Aborted {
                        reason,
                        guard: None,
                    },
                );
            }
            Err(sentinel) => {
                let message = format!("cannot resume at the sentinel {sentinel}");
                return finish(cx.observer, job, PieceRunResult::Error { message });
            }
        }
    }
    loop {
        let Some(movement) = cx.piece.movement(&job.movement) else {
            let message = format!(
                "piece `{}` has no movement `{}`",
                cx.piece.name.value, job.movement
            );
            return finish(cx.observer, job, PieceRunResult::Error { message });
        };
        if !job.entered {
            if job.movements_entered >= cx.piece.max_movements.value {
                let result = PieceRunResult::Aborted {
                    reason: format!(
                        "entering `{}` would exceed max_movements ({})",
                        job.movement, cx.piece.max_movements.value
                    ),
                    guard: Some(Guard::MaxMovements),
                };
                return finish(cx.observer, job, result);
            }
            job.movements_entered += 1;
            job.entered = true;
            job.turns = 0;
            job.movement_parks = 0;
            job.text_only_streak = 0;
            cx.emit(
                job,
                JobEvent::MovementEntered {
                    movement: job.movement.clone(),
                    count: job.movements_entered,
                },
            );
        }
        let span = tracing::info_span!("movement", maestro.movement = %job.movement);
        let result = agent_loop::run_movement(cx, movement, job, resume.take())
            .instrument(span)
            .await;
        let step = map_movement_result(
            result,
            MapContext {
                asks_so_far: job.asks,
                max_asks: cx.limits.max_asks,
            },
        );
        match step {
            Step::Continue(next) => {
                let from = std::mem::replace(&mut job.movement, next.clone());
                job.entered = false;
                cx.emit(job, JobEvent::Transition { from, to: next });
            }
            Step::Done(result) => return finish(cx.observer, job, result),
        }
    }
}

/// Writes how the run ended into the job (status, wait, result) and records the closing event.
pub(crate) fn finish(
    observer: &dyn Observer,
    job: &mut JobState,
    mut result: PieceRunResult,
) -> PieceRunResult {
    job.status = result.status();
    if let PieceRunResult::WaitingHuman { wait, .. }
    | PieceRunResult::WaitingSubtasks { wait, .. } = &mut result
    {
        job.parks += 1;
        wait.id = job.parks;
    }
    match &result {
        PieceRunResult::WaitingHuman {
            resume_movement,
            reason,
            wait,
        } => {
            if *reason == WaitReason::Input && wait.request.is_question() {
                job.asks += 1;
            }
            park(observer, job, resume_movement, wait);
        }
        PieceRunResult::WaitingSubtasks {
            resume_movement,
            wait,
        } => park(observer, job, resume_movement, wait),
        PieceRunResult::Completed { output } => end(observer, job, output),
        PieceRunResult::Aborted { reason, .. } | PieceRunResult::Cancelled { reason } => {
            end(observer, job, reason)
        }
        PieceRunResult::Error { message } => end(observer, job, message),
    }
    result
}

fn park(observer: &dyn Observer, job: &mut JobState, resume_movement: &str, wait: &Wait) {
    // A tool park resumes inside the movement it interrupted; a rule park enters a new one,
    // and a job that has not entered its piece enters its first movement.
    let inside = matches!(
        wait.resume,
        ResumePoint::ParkedCall { .. }
            | ResumePoint::ApprovalGate { .. }
            | ResumePoint::BurstGate { .. }
    );
    job.entered = inside && resume_movement == job.movement;
    job.movement = resume_movement.to_owned();
    job.wait = Some(wait.clone());
    let parked = JobEvent::Parked {
        wait: wait.id,
        status: job.status,
        resume_movement: resume_movement.to_owned(),
        reason: wait.reason,
        request: wait.request.clone(),
    };
    if let Err(refused) = super::record(observer, job, parked) {
        // The engine checks every park before it makes one; should the session still refuse,
        // the job ends in an error that says so instead of waiting on what cannot resume.
        job.status = JobStatus::Error;
        end(
            observer,
            job,
            &format!("the job's session refused its park: {refused}"),
        );
    }
}

fn end(observer: &dyn Observer, job: &mut JobState, detail: &str) {
    job.wait = None;
    job.result = Some(detail.to_owned());
    let finished = JobEvent::Finished {
        status: job.status,
        detail: detail.to_owned(),
    };
    if let Err(refused) = super::record(observer, job, finished) {
        // Only the agent completes a job, and only while it runs free; anything else that
        // still ends here ends in an error, which the session takes in every phase.
        job.status = JobStatus::Error;
        let detail = format!("{detail} (the job's session refused its end: {refused})");
        job.result = Some(detail.clone());
        let failed = JobEvent::Finished {
            status: JobStatus::Error,
            detail,
        };
        if let Err(refused) = super::record(observer, job, failed) {
            tracing::error!(job = %job.id, "the job's session took no end: {refused}");
        }
    }
}

/// The note the model reads when a rule-based wait for subtasks is over.
fn subtasks_summary(results: &[SubtaskResult], expired: bool) -> String {
    if expired {
        return "The wait for the subtasks expired before they all ended.".to_owned();
    }
    let mut text = format!("The {} subtask(s) ended:", results.len());
    for result in results {
        let status = match result.status {
            SubtaskStatus::Completed => "completed",
            SubtaskStatus::Aborted => "aborted",
            SubtaskStatus::Cancelled => "cancelled",
            SubtaskStatus::Failed => "failed",
        };
        text.push_str(&format!(
            "\n- {} {status}: {}",
            result.job_id, result.output
        ));
    }
    text
}

#[cfg(test)]
#[path = "piece_runner_tests.rs"]
mod tests;
