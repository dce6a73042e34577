//! Builders shared by the unit tests and the property tests.

use std::collections::BTreeMap;

use super::*;

pub(super) fn skills() -> Vec<SkillIndexEntry> {
    ["outline", "draft"]
        .into_iter()
        .map(|name| SkillIndexEntry {
            name: name.into(),
            description: format!("the {name} skill"),
        })
        .collect()
}

pub(super) fn start_with_skill(mode: AcceptanceMode, max_burst: Option<u32>) -> RuntimeEvent {
    RuntimeEvent::SessionStarted {
        session_id: "s1".into(),
        start: SkillStart::InitialSkill {
            skill: "outline".into(),
            intake_prompt: "What is the book about?".into(),
        },
        acceptance_mode: mode,
        max_burst,
    }
}

pub(super) fn start_choosing() -> RuntimeEvent {
    RuntimeEvent::SessionStarted {
        session_id: "s1".into(),
        start: SkillStart::ChooseSkill {
            available_skills: skills(),
        },
        acceptance_mode: AcceptanceMode::UserConfirmed,
        max_burst: None,
    }
}

pub(super) fn intake_done() -> RuntimeEvent {
    RuntimeEvent::IntakeCompleted {
        slots: BTreeMap::from([("topic".into(), "rivers".into())]),
    }
}

pub(super) fn message(text: &str) -> RuntimeEvent {
    RuntimeEvent::UserMessage { text: text.into() }
}

pub(super) fn loop_tool() -> RuntimeEvent {
    RuntimeEvent::LoopToolCalled {
        tool: "search".into(),
    }
}

pub(super) fn decision(decision_id: &str) -> MainAgentDecision {
    MainAgentDecision {
        decision_id: decision_id.into(),
        tool: "run_worker".into(),
        arguments: r#"{"skill":"draft"}"#.into(),
    }
}

pub(super) fn boundary(decision_id: &str, approval_required: bool) -> RuntimeEvent {
    RuntimeEvent::BoundaryToolCalled {
        decision: decision(decision_id),
        approval_required,
    }
}

pub(super) fn worker_started(worker_id: &str) -> RuntimeEvent {
    RuntimeEvent::WorkerStarted {
        worker_id: worker_id.into(),
    }
}

pub(super) fn draft(artifact_id: &str, revises: Option<&str>) -> ArtifactDraft {
    ArtifactDraft {
        id: artifact_id.into(),
        title: format!("artifact {artifact_id}"),
        kind: "report".into(),
        media_type: "text/plain".into(),
        content: "text".into(),
        revises: revises.map(Into::into),
    }
}

pub(super) fn worker_completed(worker_id: &str, artifact_id: Option<&str>) -> RuntimeEvent {
    RuntimeEvent::WorkerCompleted {
        worker_id: worker_id.into(),
        artifact: artifact_id.map(|id| draft(id, None)),
        acceptance_mode: None,
    }
}

pub(super) fn accepted(artifact_id: &str) -> RuntimeEvent {
    RuntimeEvent::UserAccepted {
        artifact_id: artifact_id.into(),
    }
}

pub(super) fn rejected(artifact_id: &str) -> RuntimeEvent {
    RuntimeEvent::UserRejected {
        artifact_id: artifact_id.into(),
        reason: Some("off topic".into()),
    }
}

pub(super) fn revision(artifact_id: &str, instruction: Option<&str>) -> RuntimeEvent {
    RuntimeEvent::UserRequestedRevision {
        artifact_id: artifact_id.into(),
        instruction: instruction.map(Into::into),
    }
}

pub(super) fn parked(call_id: &str, park: Park) -> RuntimeEvent {
    RuntimeEvent::Parked {
        call_id: call_id.into(),
        movement: "write".into(),
        park,
    }
}

pub(super) fn resumed(call_id: &str, resume: Resume) -> RuntimeEvent {
    RuntimeEvent::Resumed {
        call_id: call_id.into(),
        resume,
    }
}

pub(super) fn finished(outcome: FinishOutcome) -> RuntimeEvent {
    RuntimeEvent::Finished {
        outcome,
        reason: None,
    }
}

pub(super) fn failed() -> RuntimeEvent {
    RuntimeEvent::Failed {
        message: "the loop ended with nothing settled".into(),
    }
}

/// Folds `events`, failing the test with the transition error if any is refused.
pub(super) fn session(events: impl IntoIterator<Item = RuntimeEvent>) -> RuntimeSession {
    fold(events).unwrap_or_else(|err| panic!("{err}"))
}

pub(super) fn then(session: &RuntimeSession, event: RuntimeEvent) -> RuntimeSession {
    apply_event(session, event).unwrap_or_else(|err| panic!("{err}"))
}

/// Applies an event expected to be refused, and checks that the refusal changed nothing.
pub(super) fn refused(session: &RuntimeSession, event: RuntimeEvent) -> TransitionError {
    let mut copy = session.clone();
    let err = copy
        .apply(event)
        .expect_err("the event should have been refused");
    assert_eq!(&copy, session, "a refused event changed the session");
    err
}

pub(super) fn in_intake() -> RuntimeSession {
    session([start_with_skill(AcceptanceMode::UserConfirmed, None)])
}

pub(super) fn running_in(mode: AcceptanceMode) -> RuntimeSession {
    session([start_with_skill(mode, None), intake_done()])
}

pub(super) fn running() -> RuntimeSession {
    running_in(AcceptanceMode::UserConfirmed)
}

/// Running with worker `w1` holding the session.
pub(super) fn with_worker(mode: AcceptanceMode) -> RuntimeSession {
    then(&running_in(mode), worker_started("w1"))
}

/// Waiting for the user to review artifact `a1`.
pub(super) fn reviewing() -> RuntimeSession {
    then(
        &with_worker(AcceptanceMode::UserConfirmed),
        worker_completed("w1", Some("a1")),
    )
}

pub(super) fn waiting(session: &RuntimeSession) -> Option<WaitingKind> {
    session.waiting_reason().map(WaitingReason::kind)
}
