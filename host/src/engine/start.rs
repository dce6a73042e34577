//! How a job begins, before it enters its piece: the `started` event, the choice of a piece for
//! a job started without one (skill selection), and the piece's intake.
//!
//! Invariant: a job enters its first movement only with a piece and its intake done (its
//! session running), and every wait on the way is a park like any other: the job holds no
//! runner while a human chooses or fills in, and a wait nobody answers in time ends the job
//! with the guard `wait_expired`.

use std::collections::BTreeMap;

use super::answer::{Answer, EngineAnswer};
use super::events::{JobEvent, Observer};
use super::job::{JobState, ResumePoint, Wait};
use super::piece_runner::{Guard, PieceRunResult, finish};
use super::wait::{IntakeField, WaitReason, WaitRequest, intake_slots};
use super::{Engine, EngineError, record};
use crate::llm::Message;
use crate::phase::{AcceptanceMode, WaitingKind};

/// Where a run stands once the job's start is dealt with.
pub(super) enum Entry {
    /// The job parked (or ended) before entering its piece.
    Stopped(PieceRunResult),
    /// The job runs its piece, with the answer to a wait inside a movement if it has one.
    Enter(Option<(Wait, Answer)>),
}

/// Records the job's `started` event: its piece (or the pieces to choose from), how its
/// artifacts are accepted, and the intake it waits for.
pub(super) fn record_start(
    engine: &Engine,
    job: &mut JobState,
    observer: &dyn Observer,
) -> Result<(), String> {
    let (acceptance, intake, choose_from) = if job.piece.is_empty() {
        let index = engine.skill_index();
        if index.is_empty() {
            return Err("it has no piece, and there is none to choose from".to_owned());
        }
        (AcceptanceMode::default(), None, index)
    } else {
        let piece = engine
            .piece(&job.piece)
            .ok_or_else(|| format!("no piece named `{}` is loaded", job.piece))?;
        let intake = piece.intake.as_ref().map(|intake| intake.prompt.clone());
        (piece.acceptance, intake, Vec::new())
    };
    // A worker's drafts are reviewed at its parent: it waits for that verdict.
    let acceptance = if job.reviewed_by_parent {
        AcceptanceMode::UserConfirmed
    } else {
        acceptance
    };
    let started = JobEvent::Started {
        piece: job.piece.clone(),
        input: job.input.clone(),
        parent: job.parent.clone(),
        max_burst: engine.limits.max_burst,
        acceptance,
        choose_from,
        intake,
    };
    record(observer, job, started).map_err(|refused| refused.to_string())
}

/// Applies an answer to a wait on the way into the piece, and parks the job where its session
/// waits for a piece or an intake.
pub(super) fn before_piece(
    engine: &Engine,
    job: &mut JobState,
    resume: Option<(Wait, Answer)>,
    observer: &dyn Observer,
) -> Result<Entry, EngineError> {
    let resume = match resume {
        Some((wait, answer)) if wait.resume == ResumePoint::EnterPiece => {
            if answer.is_expired() {
                let result = PieceRunResult::Aborted {
                    reason: format!("nobody gave the job {} in time", wait.request.describe()),
                    guard: Some(Guard::WaitExpired),
                };
                return Ok(Entry::Stopped(finish(observer, job, result)));
            }
            match (&wait.request, answer) {
                (
                    WaitRequest::SkillSelection { .. },
                    Answer::Engine(EngineAnswer::Choose { piece }),
                ) => choose(engine, job, &piece, observer)?,
                (
                    WaitRequest::Intake { fields, .. },
                    Answer::Engine(EngineAnswer::Intake { slots }),
                ) => complete_intake(job, fields, &slots, observer)?,
                (request, answer) => {
                    return Err(refusal(
                        job,
                        format!(
                            "it waits for {}, which `{}` does not answer",
                            request.describe(),
                            answer.name()
                        ),
                    ));
                }
            }
            None
        }
        other => other,
    };
    let waiting = job
        .phase_session()
        .and_then(|session| session.waiting_reason())
        .map(|reason| reason.kind());
    let request = match waiting {
        Some(WaitingKind::SkillSelection) => WaitRequest::SkillSelection {
            pieces: engine.skill_index(),
        },
        Some(WaitingKind::Intake) => intake_request(engine, job)?,
        _ => return Ok(Entry::Enter(resume)),
    };
    let reason = match waiting {
        Some(WaitingKind::SkillSelection) => WaitReason::SkillSelection,
        _ => WaitReason::Intake,
    };
    let wait = Wait {
        id: 0,
        reason: Some(reason),
        request,
        resume: ResumePoint::EnterPiece,
    };
    let parked = PieceRunResult::WaitingHuman {
        resume_movement: job.movement.clone(),
        reason,
        wait,
    };
    Ok(Entry::Stopped(finish(observer, job, parked)))
}

/// The job takes `piece` and stands before its initial movement.
fn choose(
    engine: &Engine,
    job: &mut JobState,
    name: &str,
    observer: &dyn Observer,
) -> Result<(), EngineError> {
    let piece = engine
        .piece(name)
        .ok_or_else(|| EngineError::UnknownPiece(name.to_owned()))?
        .clone();
    job.piece = piece.name.value.clone();
    job.piece_origin = piece.origin.display().to_string();
    job.movement = piece.initial_movement.value.clone();
    let chosen = JobEvent::SkillChosen {
        piece: job.piece.clone(),
        intake: piece.intake.as_ref().map(|intake| intake.prompt.clone()),
        input: job.input.clone(),
    };
    record(observer, job, chosen).map_err(|refused| refusal(job, refused.to_string()))
}

/// The intake as a human filled it in becomes the session's slots, and the model reads it.
fn complete_intake(
    job: &mut JobState,
    fields: &[IntakeField],
    given: &BTreeMap<String, String>,
    observer: &dyn Observer,
) -> Result<(), EngineError> {
    let slots = intake_slots(fields, given, &job.input);
    let mut text = String::from("The intake, as a human filled it in:");
    for (name, value) in &slots {
        text.push_str(&format!("\n- {name}: {value}"));
    }
    record(observer, job, JobEvent::IntakeCompleted { slots })
        .map_err(|refused| refusal(job, refused.to_string()))?;
    job.conversation.push(Message::User { text });
    Ok(())
}

/// What the piece's intake asks, with what the job was started with.
fn intake_request(engine: &Engine, job: &JobState) -> Result<WaitRequest, EngineError> {
    let piece = engine
        .piece(&job.piece)
        .ok_or_else(|| EngineError::UnknownPiece(job.piece.clone()))?;
    let intake = piece.intake.as_ref().ok_or_else(|| {
        refusal(
            job,
            "its session waits for an intake its piece has not".into(),
        )
    })?;
    Ok(WaitRequest::Intake {
        prompt: intake.prompt.clone(),
        fields: intake
            .slots
            .iter()
            .map(|slot| IntakeField {
                name: slot.name.value.clone(),
                description: slot.description.clone(),
                required: slot.required,
                value: job.prefill.get(&slot.name.value).cloned(),
            })
            .collect(),
    })
}

fn refusal(job: &JobState, message: String) -> EngineError {
    EngineError::NotRunnable {
        job: job.id.clone(),
        status: job.status,
        message,
    }
}
