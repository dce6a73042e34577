//! Workers: child jobs that hold the job's session while they run, whose questions and drafts
//! come to this job's human.
//!
//! Invariant: a worker starts only a piece its movement lists under `workers`, or any piece for
//! a plugin whose policy grants `spawn_subtasks`, and only when the job's session takes it; its
//! questions and drafts are answered at its parent, whose answers and verdicts reach the
//! worker's wait by [`ChildJobs::answer`](super::ChildJobs::answer), so parent and worker agree
//! on every verdict. The parked call is re-invoked only once the worker ended.

use sha2::{Digest, Sha256};

use super::agent_loop::{Flow, LoopContext, answer, invoke};
use super::answer::{Answer, EngineAnswer, HumanVerdict, WorkerNews};
use super::artifacts::{acceptance, park_for_review, under_review};
use super::events::JobEvent;
use super::handoff::{Parked, unsettled};
use super::job::{JobState, JobStatus, PinnedPlugin, Wait};
use super::piece_runner::MovementResult;
use super::resume::pinned;
use super::wait::{WaitReason, WaitRequest};
use crate::piece::{Movement, Sentinel};
use crate::plugin::{self, CallError, CallRequest, Plugin, Resume, WorkerRequest};

/// The id of a child job started by `parent`'s call `call_id` (`index` tells apart the
/// children of one call; a worker takes [`u32::MAX`]): the same when the call runs again, so
/// starting a child is idempotent.
pub fn child_job_id(parent: &str, call_id: &str, index: u32) -> String {
    let digest = Sha256::digest(format!("{parent}\n{call_id}\n{index}").as_bytes());
    format!("job-{}", &hex::encode(digest)[..32])
}

/// A call's worker: a child job started through the job layer, which the job waits for.
pub(super) async fn start_worker(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    plugin: &Plugin,
    call: CallRequest,
    pin: PinnedPlugin,
    worker: WorkerRequest,
) -> Flow {
    let refuse = |job: &mut JobState, message: String| {
        let error = CallError::Denied(message);
        answer(
            cx,
            job,
            &call.call_id,
            &call.tool,
            error.to_json().to_string(),
            true,
        );
        Flow::Continue
    };
    if !plugin.policy().spawn_subtasks && !movement.allows_worker(&worker.piece) {
        let message = format!(
            "park worker: movement `{}` does not list `{}` among its workers, and the policy \
             of plugin `{}` does not grant spawn_subtasks",
            job.movement,
            worker.piece,
            plugin.name()
        );
        return refuse(job, message);
    }
    let Some(jobs) = cx.child_jobs else {
        return refuse(
            job,
            "park worker: this host runs no jobs (use `maestro run` or `maestro serve`)".into(),
        );
    };
    let probe = JobEvent::WorkerStarted {
        worker: child_job_id(&job.id, &call.call_id, u32::MAX),
    };
    if let Some(session) = &job.session
        && let Err(refused) = session.check(&job.id, &probe)
    {
        return refuse(
            job,
            format!(
                "park worker: the job's session refuses it ({})",
                refused.violation
            ),
        );
    }
    let started = jobs
        .start_worker(
            &job.id,
            &call.call_id,
            plugin.name(),
            &worker.piece,
            &worker.input,
        )
        .await;
    let worker_id = match started {
        Ok(id) => id,
        Err(message) => return refuse(job, format!("park worker: {message}")),
    };
    if let Err(refused) = cx.record(
        job,
        JobEvent::WorkerStarted {
            worker: worker_id.clone(),
        },
    ) {
        return Flow::Finish(MovementResult::unsettled(format!(
            "the job's session refused its worker: {refused}"
        )));
    }
    wait_for_worker(job, worker_id, Parked { call, pin })
}

pub(super) fn wait_for_worker(job: &JobState, worker: String, parked: Parked) -> Flow {
    let wait = Wait {
        id: 0,
        reason: None,
        request: WaitRequest::Worker { worker },
        resume: parked.resume_point(),
    };
    Flow::Finish(MovementResult::park(
        Sentinel::WaitSubtasks,
        job.movement.clone(),
        wait,
    ))
}

/// A human answered the worker's question here: recorded, passed on to the worker, and the job
/// waits for the worker again (it stays the job's worker).
pub(super) async fn answered(
    cx: &LoopContext<'_>,
    job: &mut JobState,
    worker: String,
    worker_wait: u32,
    text: String,
    parked: Parked,
) -> Flow {
    let answered = JobEvent::WorkerAnswered {
        worker: worker.clone(),
        text: text.clone(),
    };
    if let Err(refused) = cx.record(job, answered) {
        return unsettled(format!("the job's session refused the answer: {refused}"));
    }
    let answer = Answer::Resume(Resume::Answered(text));
    forward(cx, job, &worker, worker_wait, answer).await;
    wait_for_worker(job, worker, parked)
}

/// The worker goes on after its parent answered it: it holds the session again.
pub(super) fn resume_worker(
    cx: &LoopContext<'_>,
    job: &mut JobState,
    worker: String,
    parked: Parked,
) -> Flow {
    if let Err(refused) = cx.record(
        job,
        JobEvent::WorkerStarted {
            worker: worker.clone(),
        },
    ) {
        return Flow::Finish(MovementResult::unsettled(format!(
            "the job's session refused its worker going on: {refused}"
        )));
    }
    wait_for_worker(job, worker, parked)
}

/// What the worker did, as the store told it.
pub(super) async fn news(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    worker: String,
    news: WorkerNews,
    parked: Parked,
) -> Flow {
    match news {
        WorkerNews::Asked {
            wait: worker_wait,
            question,
            ..
        } => {
            let asked = JobEvent::WorkerAsked {
                worker: worker.clone(),
                question: question.clone(),
            };
            if let Err(refused) = cx.record(job, asked) {
                return unsettled(format!("the job's session refused the question: {refused}"));
            }
            let wait = Wait {
                id: 0,
                reason: Some(WaitReason::WorkerQuestions),
                request: WaitRequest::WorkerQuestion {
                    worker,
                    question,
                    worker_wait,
                },
                resume: parked.resume_point(),
            };
            Flow::Finish(MovementResult::park(
                Sentinel::WaitingHumanWorker,
                job.movement.clone(),
                wait,
            ))
        }
        WorkerNews::Drafted {
            wait: worker_wait,
            artifact,
            ..
        } => {
            let mode = acceptance(cx, movement, job);
            let drafted = JobEvent::ArtifactDrafted {
                artifact: artifact.clone(),
                by: worker.clone(),
                worker: true,
                acceptance: Some(mode),
            };
            if let Err(refused) = cx.record(job, drafted) {
                return unsettled(format!(
                    "the job's session refused the worker's draft: {refused}"
                ));
            }
            if under_review(job).is_some() {
                return park_for_review(job, &artifact, Some(worker), Some(worker_wait), parked);
            }
            // Accepted as handed in: the worker learns it and goes on.
            let accepted = Answer::Engine(EngineAnswer::Review {
                artifact: Some(artifact.id.clone()),
                verdict: HumanVerdict::Accept,
            });
            forward(cx, job, &worker, worker_wait, accepted).await;
            resume_worker(cx, job, worker, parked)
        }
        WorkerNews::Ended(result) => {
            let status = match result.status {
                plugin::SubtaskStatus::Completed => JobStatus::Completed,
                plugin::SubtaskStatus::Aborted => JobStatus::Aborted,
                plugin::SubtaskStatus::Cancelled => JobStatus::Cancelled,
                plugin::SubtaskStatus::Failed => JobStatus::Error,
            };
            let ended = JobEvent::WorkerEnded {
                worker: worker.clone(),
                status,
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
            let done = Resume::WorkerDone(result);
            invoke(cx, movement, job, &plugin, call.resumed(done), pin).await
        }
    }
}

/// Passes `answer` on to the worker's wait. A worker that moved on (answered, cancelled) is
/// not an error: the store tells this job its worker's state again when the job next waits.
pub(super) async fn forward(
    cx: &LoopContext<'_>,
    job: &JobState,
    worker: &str,
    wait: u32,
    answer: Answer,
) {
    let Some(jobs) = cx.child_jobs else { return };
    let forwarded = Answer::Engine(EngineAnswer::Forwarded {
        from: job.id.clone(),
        answer: Box::new(answer),
    });
    if let Err(message) = jobs.answer(worker, forwarded, wait).await {
        tracing::info!(job = %job.id, %worker, "the answer did not reach the worker: {message}");
    }
}
