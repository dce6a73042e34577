//! Artifacts a job hands in: each version recorded in the job's session, accepted as handed in
//! or held for a human's verdict, which goes back to whoever drafted it.
//!
//! Invariant: an artifact is a fact only once its session accepted it, and nothing else is
//! offered downstream ([`facts_of`] reads the session's facts; a draft goes to the reviewer, not
//! to the model). A draft is accepted at once only where the movement (or else the piece) says
//! `auto`; a worker's draft always waits for its parent's verdict.

use sha2::{Digest, Sha256};

use super::agent_loop::{Flow, LoopContext, answer, invoke};
use super::answer::{Answer, EngineAnswer, HumanVerdict};
use super::events::JobEvent;
use super::handoff::{Parked, unsettled};
use super::job::{JobState, PinnedPlugin, Wait};
use super::piece_runner::MovementResult;
use super::resume::pinned;
use super::wait::{WaitReason, WaitRequest};
use super::workers::{forward, resume_worker};
use crate::phase::{AcceptanceMode, ArtifactDraft, ArtifactRecord, ArtifactStatus, RuntimeSession};
use crate::piece::{Movement, Sentinel};
use crate::plugin::{self, CallError, CallRequest, Fact, Plugin, Resume, Review, Verdict};

/// Artifacts one job may hold (each version counts): the session is saved with the job.
pub const MAX_ARTIFACTS_PER_JOB: usize = 64;

/// The id of the `nth` artifact of `job`, handed in by `call_id`: the same when a run is
/// repeated after a crash.
fn artifact_id(job: &str, call_id: &str, nth: usize) -> String {
    let digest = Sha256::digest(format!("{job}\n{call_id}\n{nth}").as_bytes());
    format!("art-{}", &hex::encode(digest)[..24])
}

/// The accepted artifacts of a session, as they are handed downstream.
pub fn facts_of(session: &RuntimeSession) -> Vec<Fact> {
    session
        .facts()
        .iter()
        .map(|fact| Fact {
            artifact_id: fact.id().to_owned(),
            kind: fact.kind().to_owned(),
            title: fact.title().to_owned(),
            media_type: fact.media_type().to_owned(),
            body: fact.content().to_owned(),
        })
        .collect()
}

/// An artifact as the API and the CLI show it: with its status, and whether it is a fact.
pub fn artifact_view(record: &ArtifactRecord) -> serde_json::Value {
    serde_json::json!({
        "id": record.id(),
        "kind": record.kind(),
        "title": record.title(),
        "media_type": record.media_type(),
        "body": record.content(),
        "revises": record.revises(),
        "produced_by": record.produced_by(),
        "status": record.status(),
        "fact": record.status() == ArtifactStatus::Accepted,
    })
}

/// How the movement accepts what is handed in during it: its own mode, else the piece's; a
/// worker's drafts always wait for its parent's verdict.
pub(super) fn acceptance(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &JobState,
) -> AcceptanceMode {
    if job.reviewed_by_parent {
        return AcceptanceMode::UserConfirmed;
    }
    movement.acceptance.unwrap_or(cx.piece.acceptance)
}

/// A call's draft, handed in: recorded as an artifact of this job, then accepted at once (the
/// call re-invoked with the verdict) or held for a human's review.
pub(super) async fn hand_in(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    plugin: &Plugin,
    call: CallRequest,
    pin: PinnedPlugin,
    draft: plugin::ArtifactDraft,
) -> Flow {
    let artifacts = job.phase_session().map_or(0, |s| s.artifacts().len());
    if artifacts >= MAX_ARTIFACTS_PER_JOB {
        let error = CallError::BadOutcome(format!(
            "park artifact: this job holds {artifacts} artifacts, the most one job may \
             ({MAX_ARTIFACTS_PER_JOB})"
        ));
        answer(
            cx,
            job,
            &call.call_id,
            &call.tool,
            error.to_json().to_string(),
            true,
        );
        return Flow::Continue;
    }
    let id = artifact_id(&job.id, &call.call_id, artifacts);
    let revises = draft.revises.or_else(|| awaiting_revision(job));
    let artifact = ArtifactDraft {
        id: id.clone(),
        title: draft.title,
        kind: draft.kind,
        media_type: draft.media_type,
        content: draft.body,
        revises,
    };
    let mode = acceptance(cx, movement, job);
    let drafted = JobEvent::ArtifactDrafted {
        artifact: artifact.clone(),
        by: call.call_id.clone(),
        worker: false,
        acceptance: Some(mode),
    };
    if let Err(refused) = cx.record(job, drafted) {
        let error = CallError::BadOutcome(format!(
            "park artifact: the job's session refuses the draft ({})",
            refused.violation
        ));
        answer(
            cx,
            job,
            &call.call_id,
            &call.tool,
            error.to_json().to_string(),
            true,
        );
        return Flow::Continue;
    }
    if under_review(job).is_none() {
        // Accepted as handed in: the call learns it at once.
        let verdict = Resume::Reviewed(Review {
            artifact_id: id,
            verdict: Verdict::Accepted,
        });
        return Box::pin(invoke(
            cx,
            movement,
            job,
            plugin,
            call.resumed(verdict),
            pin,
        ))
        .await;
    }
    park_for_review(job, &artifact, None, None, Parked { call, pin })
}

/// The artifact whose revision was asked for most recently and that no later draft revises:
/// what a draft that names none revises.
fn awaiting_revision(job: &JobState) -> Option<String> {
    let artifacts = job.phase_session()?.artifacts();
    artifacts
        .iter()
        .rev()
        .find(|record| {
            record.status() == ArtifactStatus::RevisionRequested
                && !artifacts
                    .iter()
                    .any(|other| other.revises() == Some(record.id()))
        })
        .map(|record| record.id().to_owned())
}

/// The artifact the session waits on a review of, if it does.
pub(super) fn under_review(job: &JobState) -> Option<String> {
    match job.phase_session()?.waiting_reason()? {
        crate::phase::WaitingReason::ReviewArtifact { artifact_id } => Some(artifact_id.clone()),
        _ => None,
    }
}

pub(super) fn park_for_review(
    job: &JobState,
    artifact: &ArtifactDraft,
    worker: Option<String>,
    worker_wait: Option<u32>,
    parked: Parked,
) -> Flow {
    let wait = Wait {
        id: 0,
        reason: Some(WaitReason::ReviewArtifact),
        request: WaitRequest::ArtifactReview {
            artifact_id: artifact.id.clone(),
            title: artifact.title.clone(),
            artifact_kind: artifact.kind.clone(),
            media_type: artifact.media_type.clone(),
            revises: artifact.revises.clone(),
            worker,
            worker_wait,
        },
        resume: parked.resume_point(),
    };
    Flow::Finish(MovementResult::park(
        Sentinel::WaitingHumanReview,
        job.movement.clone(),
        wait,
    ))
}

/// A human's verdict on the draft under review: recorded in the session, then delivered — or,
/// for a revision without its instruction, the job waits for that instruction.
pub(super) async fn review(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    draft: UnderReview,
    verdict: HumanVerdict,
    parked: Parked,
) -> Flow {
    let reviewed = JobEvent::Reviewed {
        artifact_id: draft.artifact_id.clone(),
        verdict: verdict.clone(),
    };
    if let Err(refused) = cx.record(job, reviewed) {
        return unsettled(format!("the job's session refused the verdict: {refused}"));
    }
    match wit_verdict(&verdict) {
        Some(verdict) => deliver(cx, movement, job, draft, verdict, parked).await,
        None => {
            let wait = Wait {
                id: 0,
                reason: Some(WaitReason::Revision),
                request: WaitRequest::RevisionInstruction {
                    artifact_id: draft.artifact_id,
                    title: draft.title,
                    worker: draft.worker,
                    worker_wait: draft.worker_wait,
                },
                resume: parked.resume_point(),
            };
            Flow::Finish(MovementResult::park(
                Sentinel::WaitingHumanReview,
                job.movement.clone(),
                wait,
            ))
        }
    }
}

/// The instruction of a revision asked for without one: recorded, then delivered.
pub(super) async fn instruct(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    draft: UnderReview,
    answer_given: Answer,
    parked: Parked,
) -> Flow {
    let text = match answer_given {
        Answer::Resume(Resume::Answered(text)) => text,
        Answer::Engine(EngineAnswer::Review {
            verdict: HumanVerdict::Revise {
                instruction: Some(text),
            },
            ..
        }) => text,
        other => {
            return unsettled(format!(
                "a revision's instruction was answered with `{}`",
                other.name()
            ));
        }
    };
    let instructed = JobEvent::RevisionInstructed {
        artifact_id: draft.artifact_id.clone(),
        text: text.clone(),
    };
    if let Err(refused) = cx.record(job, instructed) {
        return unsettled(format!(
            "the job's session refused the instruction: {refused}"
        ));
    }
    let verdict = Verdict::RevisionRequested(text);
    deliver(cx, movement, job, draft, verdict, parked).await
}

/// The artifact a verdict is about, and where its draft came from.
pub(super) struct UnderReview {
    pub artifact_id: String,
    pub title: String,
    /// The worker that drafted it, and its wait; `None` for a draft of the job's own call.
    pub worker: Option<String>,
    pub worker_wait: Option<u32>,
}

/// The verdict a tool reads, once a revision has its instruction.
fn wit_verdict(verdict: &HumanVerdict) -> Option<Verdict> {
    Some(match verdict {
        HumanVerdict::Accept => Verdict::Accepted,
        HumanVerdict::Reject { reason } => Verdict::Rejected(reason.clone()),
        HumanVerdict::Revise {
            instruction: Some(instruction),
        } => Verdict::RevisionRequested(instruction.clone()),
        HumanVerdict::Revise { instruction: None } => return None,
    })
}

/// The verdict goes where the draft came from: the call that handed it in is re-invoked with
/// it, or the worker gets it and the job waits for the worker again.
async fn deliver(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    draft: UnderReview,
    verdict: Verdict,
    parked: Parked,
) -> Flow {
    let Some(worker) = draft.worker else {
        let plugin = match pinned(cx, &parked.call, &parked.pin) {
            Ok(plugin) => plugin,
            Err(message) => return unsettled(message),
        };
        let reviewed = Resume::Reviewed(Review {
            artifact_id: draft.artifact_id,
            verdict,
        });
        let Parked { call, pin } = parked;
        return invoke(cx, movement, job, &plugin, call.resumed(reviewed), pin).await;
    };
    let human = match verdict {
        Verdict::Accepted => HumanVerdict::Accept,
        Verdict::Rejected(reason) => HumanVerdict::Reject { reason },
        Verdict::RevisionRequested(instruction) => HumanVerdict::Revise {
            instruction: Some(instruction),
        },
    };
    let review = Answer::Engine(EngineAnswer::Review {
        artifact: Some(draft.artifact_id),
        verdict: human,
    });
    if let Some(worker_wait) = draft.worker_wait {
        forward(cx, job, &worker, worker_wait, review).await;
    }
    resume_worker(cx, job, worker, parked)
}
