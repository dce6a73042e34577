//! What a job hands over and gets back while a call is parked: the verdict on an artifact it
//! handed in ([`super::artifacts`]), and news of its worker or an answer for it
//! ([`super::workers`]).
//!
//! Invariant: a wait here re-invokes the parked call only once what it waited for has happened
//! (a verdict, the worker's end), and a wait that expires never goes on as if answered: waiting
//! for the worker, the worker is cancelled and the call learns it; a review, an instruction or a
//! question cannot go on without a human, so the job ends with the guard `wait_expired`.

use super::agent_loop::{Flow, LoopContext, invoke};
use super::answer::{Answer, EngineAnswer};
use super::artifacts::{self, UnderReview};
use super::events::JobEvent;
use super::job::{JobState, JobStatus, PinnedPlugin, ResumePoint};
use super::piece_runner::{Guard, MovementResult};
use super::resume::pinned;
use super::wait::WaitRequest;
use super::workers;
use crate::phase::RuntimePhase;
use crate::piece::Movement;
use crate::plugin::{CallRequest, Resume};

/// A parked call and the plugin version it belongs to.
pub(super) struct Parked {
    pub call: CallRequest,
    pub pin: PinnedPlugin,
}

impl Parked {
    pub fn resume_point(self) -> ResumePoint {
        ResumePoint::ParkedCall {
            call: self.call,
            plugin: self.pin,
        }
    }
}

/// A movement that cannot go on, saying why.
pub(super) fn unsettled(message: String) -> Flow {
    Flow::Finish(MovementResult::unsettled(message))
}

/// Whether a wait of this kind is settled here (otherwise its answer is a plain resume).
pub(super) fn settles(request: &WaitRequest) -> bool {
    matches!(
        request,
        WaitRequest::ArtifactReview { .. }
            | WaitRequest::RevisionInstruction { .. }
            | WaitRequest::Worker { .. }
            | WaitRequest::WorkerQuestion { .. }
    )
}

/// The answer to a wait of this module: a verdict, a revision's instruction, news of the worker
/// or an answer to its question.
pub(super) async fn settle(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    request: WaitRequest,
    parked: Parked,
    answer_given: Answer,
) -> Flow {
    if answer_given.is_expired() {
        return expired(cx, movement, job, &request, parked).await;
    }
    match (request, answer_given) {
        (
            WaitRequest::ArtifactReview {
                artifact_id,
                title,
                worker,
                worker_wait,
                ..
            },
            Answer::Engine(EngineAnswer::Review { verdict, .. }),
        ) => {
            let draft = UnderReview {
                artifact_id,
                title,
                worker,
                worker_wait,
            };
            artifacts::review(cx, movement, job, draft, verdict, parked).await
        }
        (
            WaitRequest::RevisionInstruction {
                artifact_id,
                title,
                worker,
                worker_wait,
            },
            answer_given,
        ) => {
            let draft = UnderReview {
                artifact_id,
                title,
                worker,
                worker_wait,
            };
            artifacts::instruct(cx, movement, job, draft, answer_given, parked).await
        }
        (WaitRequest::Worker { worker }, Answer::Engine(EngineAnswer::Worker(news))) => {
            workers::news(cx, movement, job, worker, news, parked).await
        }
        (
            WaitRequest::WorkerQuestion {
                worker,
                worker_wait,
                ..
            },
            Answer::Resume(Resume::Answered(text)),
        ) => workers::answered(cx, job, worker, worker_wait, text, parked).await,
        (request, other) => unsettled(format!(
            "a wait for {} was answered with `{}`",
            request.describe(),
            other.name()
        )),
    }
}

/// Nobody answered in time. Waiting for the worker, the job gives up on it (cancelled) and the
/// call learns the wait expired; a review, an instruction or a worker's question cannot go on
/// without a human, so the job ends.
async fn expired(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    request: &WaitRequest,
    parked: Parked,
) -> Flow {
    let worker = match request {
        WaitRequest::Worker { worker }
        | WaitRequest::WorkerQuestion { worker, .. }
        | WaitRequest::ArtifactReview {
            worker: Some(worker),
            ..
        }
        | WaitRequest::RevisionInstruction {
            worker: Some(worker),
            ..
        } => Some(worker.clone()),
        _ => None,
    };
    if let (Some(worker), Some(jobs)) = (&worker, cx.child_jobs)
        && let Err(message) = jobs
            .cancel(worker, "its parent stopped waiting for it")
            .await
    {
        tracing::warn!(job = %job.id, %worker, "cannot cancel the worker: {message}");
    }
    let holds_worker = job
        .phase_session()
        .is_some_and(|session| session.phase() == RuntimePhase::Running);
    if let (WaitRequest::Worker { worker }, true) = (request, holds_worker) {
        let ended = JobEvent::WorkerEnded {
            worker: worker.clone(),
            status: JobStatus::Cancelled,
        };
        if let Err(refused) = cx.record(job, ended) {
            return unsettled(format!(
                "the job's session refused its worker's end: {refused}"
            ));
        }
        let plugin = match pinned(cx, &parked.call, &parked.pin) {
            Ok(plugin) => plugin,
            Err(message) => return unsettled(message),
        };
        let Parked { call, pin } = parked;
        return invoke(
            cx,
            movement,
            job,
            &plugin,
            call.resumed(Resume::Expired),
            pin,
        )
        .await;
    }
    Flow::Finish(MovementResult::guard(
        Guard::WaitExpired,
        format!("nobody gave the job {} in time", request.describe()),
    ))
}
