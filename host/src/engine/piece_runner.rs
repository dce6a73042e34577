//! The piece runner: from one movement's result to the job's next step, and the loop over
//! movements that drives a job until it ends or parks.
//!
//! Invariant: [`map_movement_result`] is the table of DESIGN §5, kept exactly and pure: a
//! movement name continues the piece; `COMPLETE` completes; `ABORT` aborts (or cancels, when
//! the cause is a cancellation); `ASK` parks as `waiting_human`/input (aborts past the ask
//! limit); `WAIT_SUBTASKS` parks as `waiting_subtasks`; `WAITING_HUMAN_BROWSER` and
//! `WAITING_HUMAN_TOOL_REQUEST` park as `waiting_human` with their reason; no `next` is an error.
//! Every park carries a resume movement — a park without one is an error, never a silent end.

use serde::{Deserialize, Serialize};

use super::agent_loop::{self, LoopContext};
use super::events::JobEvent;
use super::job::{JobState, JobStatus, ResumePoint, Wait, WaitReason};
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
}

impl Guard {
    pub fn as_str(self) -> &'static str {
        match self {
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

    pub fn cancelled() -> Self {
        Self {
            cancelled: true,
            ..Self::abort("cancelled by a user or operator")
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
                | Sentinel::WaitingHumanToolRequest => {
                    let expected = match park {
                        Sentinel::Ask => WaitReason::Input,
                        Sentinel::WaitingHumanBrowser => WaitReason::BrowserLogin,
                        _ => WaitReason::ToolRequest,
                    };
                    match wait_reason {
                        Some(reason) if reason == expected => done(PieceRunResult::WaitingHuman {
                            resume_movement,
                            reason,
                            wait,
                        }),
                        other => done(PieceRunResult::Error {
                            message: format!(
                                "{park} needs the wait reason {}, got {}",
                                expected.as_str(),
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
    mut resume: Option<(ResumePoint, Resume)>,
) -> PieceRunResult {
    if let Some((ResumePoint::EnterMovement, answer)) = &resume {
        // A rule parked the job on WAIT_SUBTASKS: the children's results become part of the
        // conversation, and the piece continues at default_next (kept as the job's movement).
        let results = match answer {
            Resume::SubtasksDone(results) => results.clone(),
            _ => Vec::new(),
        };
        let summary = subtasks_summary(&results, matches!(answer, Resume::Expired));
        job.conversation.push(Message::User {
            text: summary.clone(),
        });
        resume = None;
        match DefaultNext::from_default_next(&job.movement) {
            Ok(DefaultNext::Movement(_)) => job.entered = false,
            Ok(DefaultNext::Complete) => {
                return finish(cx, job, PieceRunResult::Completed { output: summary });
            }
            Ok(DefaultNext::Abort) => {
                let reason = format!("the piece ends in ABORT after its subtasks. {summary}");
                return finish(
                    cx,
                    job,
                    PieceRunResult::Aborted {
                        reason,
                        guard: None,
                    },
                );
            }
            Err(sentinel) => {
                let message = format!("cannot resume at the sentinel {sentinel}");
                return finish(cx, job, PieceRunResult::Error { message });
            }
        }
    }
    loop {
        let Some(movement) = cx.piece.movement(&job.movement) else {
            let message = format!(
                "piece `{}` has no movement `{}`",
                cx.piece.name.value, job.movement
            );
            return finish(cx, job, PieceRunResult::Error { message });
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
                return finish(cx, job, result);
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
        let result = agent_loop::run_movement(cx, movement, job, resume.take()).await;
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
            Step::Done(result) => return finish(cx, job, result),
        }
    }
}

fn finish(cx: &LoopContext<'_>, job: &mut JobState, mut result: PieceRunResult) -> PieceRunResult {
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
            park(cx, job, resume_movement, wait);
        }
        PieceRunResult::WaitingSubtasks {
            resume_movement,
            wait,
        } => park(cx, job, resume_movement, wait),
        PieceRunResult::Completed { output } => end(cx, job, output),
        PieceRunResult::Aborted { reason, .. } | PieceRunResult::Cancelled { reason } => {
            end(cx, job, reason)
        }
        PieceRunResult::Error { message } => end(cx, job, message),
    }
    result
}

fn park(cx: &LoopContext<'_>, job: &mut JobState, resume_movement: &str, wait: &Wait) {
    // A tool park resumes inside the movement it interrupted; a rule park enters a new one.
    job.entered = resume_movement == job.movement && wait.resume != ResumePoint::EnterMovement;
    job.movement = resume_movement.to_owned();
    job.wait = Some(wait.clone());
    cx.emit(
        job,
        JobEvent::Parked {
            wait: wait.id,
            status: job.status,
            resume_movement: resume_movement.to_owned(),
            reason: wait.reason,
            request: wait.request.clone(),
        },
    );
}

fn end(cx: &LoopContext<'_>, job: &mut JobState, detail: &str) {
    job.wait = None;
    job.result = Some(detail.to_owned());
    cx.emit(
        job,
        JobEvent::Finished {
            status: job.status,
            detail: detail.to_owned(),
        },
    );
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
