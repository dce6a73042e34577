//! Unit tests for workers and artifact review. Tests named `seed_6_*` walk the seed's §6.

use super::super::test_support::*;
use super::super::*;

#[test]
fn seed_6_worker_completed_waits_for_review_when_user_confirmed() {
    let s = reviewing();
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::ReviewArtifact {
            artifact_id: "a1".into()
        })
    );
    assert_eq!(s.current_worker_id(), None);
    let artifact = s.artifact("a1").unwrap();
    assert_eq!(artifact.status(), ArtifactStatus::UnderReview);
    assert_eq!(artifact.produced_by(), "w1");
    assert!(s.facts().is_empty(), "an artifact under review is no fact");
}

#[test]
fn seed_6_user_accepted_returns_to_running_and_makes_a_fact() {
    let s = session([
        start_with_skill(AcceptanceMode::UserConfirmed, None),
        intake_done(),
        loop_tool(),
        worker_started("w1"),
        worker_completed("w1", Some("a1")),
    ]);
    assert_eq!(s.tool_loop_burst_count(), 1);
    let s = then(&s, accepted("a1"));
    assert_eq!(s.tool_loop_burst_count(), 0);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.waiting_reason(), None);
    let facts = s.facts();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].id(), "a1");
    assert_eq!(facts[0].record().status(), ArtifactStatus::Accepted);
    // The agent's burst goes on from there.
    let s = then(&s, loop_tool());
    assert_eq!(s.tool_loop_burst_count(), 1);
}

#[test]
fn worker_completed_in_auto_mode_accepts_and_goes_straight_on() {
    let s = then(
        &with_worker(AcceptanceMode::Auto),
        worker_completed("w1", Some("a1")),
    );
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.current_worker_id(), None);
    assert_eq!(s.facts().len(), 1);
}

#[test]
fn a_movement_may_override_how_its_artifact_is_accepted() {
    let completed = |mode| RuntimeEvent::WorkerCompleted {
        worker_id: "w1".into(),
        artifact: Some(draft("a1", None)),
        acceptance_mode: Some(mode),
    };
    let s = then(
        &with_worker(AcceptanceMode::UserConfirmed),
        completed(AcceptanceMode::Auto),
    );
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.facts().len(), 1, "accepted as it was handed in");
    let s = then(
        &with_worker(AcceptanceMode::Auto),
        completed(AcceptanceMode::UserConfirmed),
    );
    assert_eq!(
        s.waiting_reason().map(WaitingReason::kind),
        Some(WaitingKind::ReviewArtifact)
    );
    assert!(
        s.facts().is_empty(),
        "waits for a human despite the session's auto"
    );
}

#[test]
fn worker_completed_without_an_artifact_goes_straight_on() {
    let s = then(
        &with_worker(AcceptanceMode::UserConfirmed),
        worker_completed("w1", None),
    );
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert!(s.artifacts().is_empty());
}

#[test]
fn only_one_worker_at_a_time() {
    assert_eq!(
        refused(&with_worker(AcceptanceMode::Auto), worker_started("w2")).violation,
        Violation::WorkerAlreadyRunning {
            worker_id: "w1".into()
        }
    );
    assert_eq!(
        refused(&in_intake(), worker_started("w1")).violation,
        Violation::wrong_phase(EventKind::WorkerStarted)
    );
}

#[test]
fn worker_events_come_only_from_the_current_worker() {
    let s = with_worker(AcceptanceMode::Auto);
    assert_eq!(
        refused(&s, worker_completed("w2", None)).violation,
        Violation::WorkerMismatch {
            current: "w1".into(),
            reported: "w2".into()
        }
    );
    assert_eq!(
        refused(&running(), worker_completed("w1", None)).violation,
        Violation::NoWorker
    );
}

#[test]
fn worker_questions_wait_for_the_user_and_the_answer_resumes_the_worker() {
    let asked = RuntimeEvent::WorkerAskedQuestions {
        worker_id: "w1".into(),
        questions: vec!["Which river first?".into()],
    };
    let s = then(&with_worker(AcceptanceMode::UserConfirmed), asked);
    assert_eq!(waiting(&s), Some(WaitingKind::WorkerQuestions));
    assert_eq!(s.current_worker_id(), Some("w1"));
    assert_eq!(
        refused(&s, worker_completed("w1", None)).violation,
        Violation::wrong_phase(EventKind::WorkerCompleted)
    );

    let s = then(&s, message("The Nile"));
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.current_worker_id(), Some("w1"));
}

#[test]
fn a_worker_must_ask_something() {
    let asked_nothing = RuntimeEvent::WorkerAskedQuestions {
        worker_id: "w1".into(),
        questions: vec![],
    };
    assert_eq!(
        refused(&with_worker(AcceptanceMode::Auto), asked_nothing).violation,
        Violation::NoQuestions
    );
}

#[test]
fn user_rejected_returns_to_running_and_makes_no_fact() {
    let s = then(&reviewing(), rejected("a1"));
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.artifact("a1").unwrap().status(), ArtifactStatus::Rejected);
    assert!(s.facts().is_empty());
}

#[test]
fn user_requested_revision_with_an_instruction_returns_to_running() {
    let s = then(&reviewing(), revision("a1", Some("shorter")));
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(
        s.artifact("a1").unwrap().status(),
        ArtifactStatus::RevisionRequested
    );
    assert!(s.facts().is_empty());
}

#[test]
fn user_requested_revision_without_an_instruction_waits_for_one() {
    let s = then(&reviewing(), revision("a1", None));
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::Revision { instruction: None })
    );
    for answer in [message("shorter"), RuntimeEvent::UserConfirmed] {
        assert_eq!(then(&s, answer).phase(), RuntimePhase::Running);
    }
}

#[test]
fn a_revision_is_a_new_artifact_that_names_the_old_one() {
    let s = session([
        start_with_skill(AcceptanceMode::UserConfirmed, None),
        intake_done(),
        worker_started("w1"),
        worker_completed("w1", Some("a1")),
        revision("a1", Some("shorter")),
        worker_started("w2"),
        RuntimeEvent::WorkerCompleted {
            worker_id: "w2".into(),
            artifact: Some(draft("a2", Some("a1"))),
            acceptance_mode: None,
        },
        accepted("a2"),
    ]);
    let facts = s.facts();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].id(), "a2");
    assert_eq!(facts[0].revises(), Some("a1"));
}

#[test]
fn artifact_ids_are_unique_and_revisions_name_a_known_artifact() {
    let s = then(&then(&reviewing(), accepted("a1")), worker_started("w2"));
    assert_eq!(
        refused(&s, worker_completed("w2", Some("a1"))).violation,
        Violation::DuplicateArtifact {
            artifact_id: "a1".into()
        }
    );
    let orphan = RuntimeEvent::WorkerCompleted {
        worker_id: "w2".into(),
        artifact: Some(draft("a2", Some("a9"))),
        acceptance_mode: None,
    };
    assert_eq!(
        refused(&s, orphan).violation,
        Violation::UnknownArtifact {
            artifact_id: "a9".into()
        }
    );
}

#[test]
fn a_verdict_must_name_the_artifact_under_review() {
    assert_eq!(
        refused(&reviewing(), accepted("a2")).to_string(),
        "event #4 `user_accepted` rejected in phase `waiting_user/review_artifact`: \
         artifact `a2` is not the one under review (`a1`)"
    );
    assert_eq!(
        refused(&running(), accepted("a1")).violation,
        Violation::wrong_phase(EventKind::UserAccepted)
    );
}

#[test]
fn a_verdict_is_final() {
    let s = then(&reviewing(), accepted("a1"));
    assert_eq!(
        refused(&s, rejected("a1")).violation,
        Violation::wrong_phase(EventKind::UserRejected)
    );
}
