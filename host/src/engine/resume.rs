//! How a parked call goes on once its wait is answered: re-invoked with the answer on the exact
//! plugin version that parked it, run (or not) after the approval gate or the burst gate, or
//! settled by the handoff of an artifact or a worker.
//!
//! Invariant: an approval that was denied or expired never runs its call, and a parked call whose
//! plugin version is no longer loaded ends the movement unsettled, naming that version — it is
//! never run on another one.

use super::agent_loop::{Flow, LoopContext, answer, dispatch, invoke};
use super::answer::Answer;
use super::handoff;
use super::job::{JobState, PinnedPlugin, ResumePoint, Wait};
use super::piece_runner::{Guard, MovementResult};
use crate::llm::ToolCall;
use crate::piece::Movement;
use crate::plugin::{CallRequest, Plugin, Resume};

/// The answer to a park of this movement: re-invoke the parked call, or settle the approval.
pub(super) async fn settle_resume(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    wait: Wait,
    answer_given: Answer,
) -> Flow {
    let (call, pin, gate) = match wait.resume {
        ResumePoint::ParkedCall { call, plugin } if handoff::settles(&wait.request) => {
            let parked = handoff::Parked { call, pin: plugin };
            return handoff::settle(cx, movement, job, wait.request, parked, answer_given).await;
        }
        ResumePoint::ParkedCall { call, plugin } => (call, plugin, false),
        ResumePoint::ApprovalGate { call, plugin, .. } => (call, plugin, true),
        ResumePoint::EnterMovement | ResumePoint::EnterPiece => {
            return Flow::Finish(MovementResult::unsettled(
                "a resume that enters a movement reached the agent loop",
            ));
        }
        ResumePoint::BurstGate { call } => {
            return settle_burst(cx, movement, job, &call, answer_given).await;
        }
    };
    let Answer::Resume(answer_given) = answer_given else {
        return Flow::Finish(MovementResult::unsettled(format!(
            "parked call `{}` was answered with `{}`, which is not a resume",
            call.call_id,
            answer_given.name()
        )));
    };
    if !gate {
        return match pinned(cx, &call, &pin) {
            Ok(plugin) => invoke(cx, movement, job, &plugin, call.resumed(answer_given), pin).await,
            Err(message) => Flow::Finish(MovementResult::unsettled(message)),
        };
    }
    // A denied or expired approval never runs the call, so it needs no plugin.
    match answer_given {
        Resume::Approved => match pinned(cx, &call, &pin) {
            Ok(plugin) => invoke(cx, movement, job, &plugin, call, pin).await,
            Err(message) => Flow::Finish(MovementResult::unsettled(message)),
        },
        Resume::Denied(reason) => {
            let note = format!("A human denied this call: {reason}");
            answer(cx, job, &call.call_id, &call.tool, note, true);
            Flow::Continue
        }
        Resume::Expired => {
            let note = "The approval request expired before anyone answered; the call did not run.";
            answer(cx, job, &call.call_id, &call.tool, note.into(), true);
            Flow::Continue
        }
        other => Flow::Finish(MovementResult::unsettled(format!(
            "an approval was answered with {other:?}"
        ))),
    }
}

/// The plugin version a parked call belongs to; `Err` says it is gone.
pub(super) fn pinned(
    cx: &LoopContext<'_>,
    call: &CallRequest,
    pin: &PinnedPlugin,
) -> Result<std::sync::Arc<Plugin>, String> {
    cx.catalog
        .pinned(&pin.content_hash)
        .cloned()
        .ok_or_else(|| {
            format!(
                "call `{}` parked on plugin `{}` version {}, which is no longer loaded",
                call.call_id, pin.name, pin.content_hash
            )
        })
}

/// A human's word on the call the burst limit held back.
async fn settle_burst(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    call: &ToolCall,
    answer_given: Answer,
) -> Flow {
    let note = match answer_given {
        Answer::Resume(Resume::Approved) => return dispatch(cx, movement, job, call).await,
        Answer::Resume(Resume::Denied(reason)) => format!(
            "Not run: after a burst of tool calls a human stopped this one. Their reason: {reason}"
        ),
        Answer::Resume(Resume::Answered(text)) => format!(
            "Not run: after a burst of tool calls the user was asked whether to go on and \
             replied: {text}"
        ),
        Answer::Resume(Resume::Expired) => {
            let note = "Not run: nobody said to go on after the burst of tool calls.";
            answer(cx, job, &call.id, &call.name, note.into(), true);
            return Flow::Finish(MovementResult::guard(
                Guard::BurstLimit,
                format!(
                    "the job made {} tool calls without a human and nobody said to go on",
                    job.phase_session()
                        .map_or(0, crate::phase::RuntimeSession::max_burst)
                ),
            ));
        }
        other => {
            return Flow::Finish(MovementResult::unsettled(format!(
                "a burst confirmation was answered with {other:?}"
            )));
        }
    };
    answer(cx, job, &call.id, &call.name, note, true);
    Flow::Continue
}
