//! Unit tests for the session-level transitions. Tests named `seed_6_*` walk the seed's §6.

use super::super::test_support::*;
use super::super::*;

#[test]
fn seed_6_idle_to_intake_on_session_started_with_initial_skill() {
    let idle = RuntimeSession::new();
    assert_eq!(idle.phase(), RuntimePhase::Idle);
    let s = then(&idle, start_with_skill(AcceptanceMode::UserConfirmed, None));
    assert_eq!(s.id(), "s1");
    assert_eq!(s.phase(), RuntimePhase::WaitingUser);
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::Intake {
            prompt: "What is the book about?".into()
        })
    );
    assert_eq!(s.active_skill(), Some("outline"));
    assert_eq!(s.lifecycle_stage(), LifecycleStage::Design);
    assert_eq!(s.max_burst(), DEFAULT_MAX_BURST);
}

#[test]
fn seed_6_intake_completed_goes_running_and_keeps_the_slots() {
    let s = then(&in_intake(), intake_done());
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.waiting_reason(), None);
    assert_eq!(s.slots().get("topic").map(String::as_str), Some("rivers"));
    assert_eq!(s.lifecycle_stage(), LifecycleStage::Play);
}

#[test]
fn seed_6_intake_confirmed_goes_running() {
    let s = then(&in_intake(), RuntimeEvent::UserConfirmed);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert!(s.slots().is_empty());
}

#[test]
fn seed_6_run_worker_needing_approval_waits_in_approve_step() {
    let s = then(&running(), boundary("d1", true));
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::ApproveStep {
            decision_id: "d1".into()
        })
    );
    assert_eq!(s.pending_decision(), Some(&decision("d1")));

    let approved = then(&s, RuntimeEvent::UserConfirmed);
    assert_eq!(approved.phase(), RuntimePhase::Running);
    // Still pending until its worker starts.
    assert_eq!(approved.pending_decision(), Some(&decision("d1")));
    let working = then(&approved, worker_started("w1"));
    assert_eq!(working.current_worker_id(), Some("w1"));
    assert_eq!(working.pending_decision(), None);
}

#[test]
fn seed_6_run_worker_without_approval_goes_straight_to_the_worker() {
    let s = then(&running(), boundary("d1", false));
    assert_eq!(s.phase(), RuntimePhase::Running);
    let s = then(&s, worker_started("w1"));
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.current_worker_id(), Some("w1"));
    assert_eq!(s.pending_decision(), None);
}

#[test]
fn seed_6_finish_goes_to_done() {
    let s = then(&running(), finished(FinishOutcome::Completed));
    assert_eq!(s.phase(), RuntimePhase::Done);
    assert_eq!(s.waiting_reason(), None);
    assert_eq!(s.lifecycle_stage(), LifecycleStage::Done);
}

#[test]
fn session_started_without_a_skill_offers_the_skills() {
    let s = session([start_choosing()]);
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::SkillSelection {
            available_skills: skills()
        })
    );
    assert_eq!(s.active_skill(), None);
}

#[test]
fn session_started_is_refused_when_it_cannot_work() {
    let idle = RuntimeSession::new();
    let nothing_to_choose = RuntimeEvent::SessionStarted {
        session_id: "s1".into(),
        start: SkillStart::ChooseSkill {
            available_skills: vec![],
        },
        acceptance_mode: AcceptanceMode::Auto,
        max_burst: None,
    };
    assert_eq!(
        refused(&idle, nothing_to_choose).violation,
        Violation::NoSkillsToChoose
    );
    assert_eq!(
        refused(&idle, start_with_skill(AcceptanceMode::Auto, Some(0))).violation,
        Violation::ZeroMaxBurst
    );
    let no_id = RuntimeEvent::SessionStarted {
        session_id: String::new(),
        start: SkillStart::ChooseSkill {
            available_skills: skills(),
        },
        acceptance_mode: AcceptanceMode::Auto,
        max_burst: None,
    };
    assert_eq!(refused(&idle, no_id).violation, Violation::EmptySessionId);
}

#[test]
fn a_second_session_started_is_an_error_naming_phase_and_event() {
    let err = refused(&in_intake(), start_choosing());
    assert_eq!(err.event, EventKind::SessionStarted);
    assert_eq!(err.event_index, 1);
    assert_eq!(
        err.to_string(),
        "event #1 `session_started` rejected in phase `waiting_user/intake`: \
         this event is accepted only in idle"
    );
}

#[test]
fn skill_selected_goes_to_that_skills_intake() {
    let choosing = session([start_choosing()]);
    let s = then(
        &choosing,
        RuntimeEvent::SkillSelected {
            skill: "draft".into(),
            intake_prompt: "Which chapter?".into(),
        },
    );
    assert_eq!(s.active_skill(), Some("draft"));
    assert_eq!(waiting(&s), Some(WaitingKind::Intake));

    let unknown = RuntimeEvent::SkillSelected {
        skill: "paint".into(),
        intake_prompt: String::new(),
    };
    assert_eq!(
        refused(&choosing, unknown).violation,
        Violation::UnknownSkill {
            skill: "paint".into()
        }
    );
}

#[test]
fn intake_events_are_refused_once_running() {
    let err = refused(&running(), intake_done());
    assert_eq!(err.phase.to_string(), "running");
    assert_eq!(
        err.violation,
        Violation::wrong_phase(EventKind::IntakeCompleted)
    );
}

#[test]
fn loop_tools_count_toward_the_burst() {
    let s = then(&running(), loop_tool());
    let s = then(&s, loop_tool());
    assert_eq!(s.tool_loop_burst_count(), 2);
    assert_eq!(s.phase(), RuntimePhase::Running);
}

#[test]
fn the_call_that_reaches_max_burst_stops_in_waiting_user_input() {
    let mut s = running();
    for _ in 1..DEFAULT_MAX_BURST {
        s = then(&s, loop_tool());
    }
    assert_eq!(s.phase(), RuntimePhase::Running);
    s = then(&s, loop_tool());
    assert_eq!(s.tool_loop_burst_count(), DEFAULT_MAX_BURST);
    assert_eq!(waiting(&s), Some(WaitingKind::Input));
    assert_eq!(
        refused(&s, loop_tool()).violation,
        Violation::wrong_phase(EventKind::LoopToolCalled)
    );
}

#[test]
fn a_user_event_after_the_burst_limit_resets_the_count() {
    let limited = session([
        start_with_skill(AcceptanceMode::UserConfirmed, Some(2)),
        intake_done(),
        loop_tool(),
        loop_tool(),
    ]);
    assert_eq!(waiting(&limited), Some(WaitingKind::Input));
    for answer in [message("go on"), RuntimeEvent::UserConfirmed] {
        let s = then(&limited, answer);
        assert_eq!(s.phase(), RuntimePhase::Running);
        assert_eq!(s.tool_loop_burst_count(), 0);
    }
}

#[test]
fn a_user_message_while_running_resets_the_burst() {
    let s = session([
        start_with_skill(AcceptanceMode::UserConfirmed, None),
        intake_done(),
        loop_tool(),
        loop_tool(),
        message("also mention deltas"),
    ]);
    assert_eq!(s.tool_loop_burst_count(), 0);
    assert_eq!(s.phase(), RuntimePhase::Running);
}

#[test]
fn the_agent_is_paused_while_a_worker_runs() {
    let s = with_worker(AcceptanceMode::UserConfirmed);
    let blocked = Violation::WorkerBlocking {
        worker_id: "w1".into(),
    };
    assert_eq!(refused(&s, loop_tool()).violation, blocked);
    assert_eq!(refused(&s, boundary("d1", false)).violation, blocked);
    assert_eq!(refused(&s, message("hi")).violation, blocked);
    assert_eq!(
        refused(&s, finished(FinishOutcome::Completed)).violation,
        blocked
    );
}

#[test]
fn loop_tools_are_refused_outside_running() {
    assert_eq!(
        refused(&in_intake(), loop_tool()).to_string(),
        "event #1 `loop_tool_called` rejected in phase `waiting_user/intake`: \
         this event is accepted only in running"
    );
}

#[test]
fn one_decision_at_a_time() {
    let s = then(&running(), boundary("d1", false));
    assert_eq!(
        refused(&s, boundary("d2", true)).violation,
        Violation::DecisionAlreadyPending {
            decision_id: "d1".into()
        }
    );
}

#[test]
fn user_declined_drops_the_pending_decision() {
    let s = session([
        start_with_skill(AcceptanceMode::UserConfirmed, None),
        intake_done(),
        loop_tool(),
        boundary("d1", true),
        RuntimeEvent::UserDeclined {
            reason: Some("not now".into()),
        },
    ]);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.pending_decision(), None);
    assert_eq!(s.tool_loop_burst_count(), 0);
    assert_eq!(
        refused(&s, RuntimeEvent::UserDeclined { reason: None }).violation,
        Violation::wrong_phase(EventKind::UserDeclined)
    );
}

#[test]
fn user_confirmed_needs_something_to_confirm() {
    assert_eq!(
        refused(&running(), RuntimeEvent::UserConfirmed).violation,
        Violation::wrong_phase(EventKind::UserConfirmed)
    );
    assert_eq!(
        refused(&session([start_choosing()]), RuntimeEvent::UserConfirmed).violation,
        Violation::wrong_phase(EventKind::UserConfirmed)
    );
}

#[test]
fn user_message_is_refused_where_it_answers_nothing() {
    assert_eq!(
        refused(&in_intake(), message("hi")).violation,
        Violation::wrong_phase(EventKind::UserMessage)
    );
    assert_eq!(
        refused(&RuntimeSession::new(), message("hi")).violation,
        Violation::wrong_phase(EventKind::UserMessage)
    );
}

#[test]
fn abort_and_cancel_end_the_session_from_any_live_phase() {
    for live in [RuntimeSession::new(), in_intake(), running(), reviewing()] {
        for outcome in [FinishOutcome::Aborted, FinishOutcome::Cancelled] {
            let s = then(&live, finished(outcome));
            assert_eq!(s.phase(), RuntimePhase::Done);
            assert_eq!(s.waiting_reason(), None);
        }
    }
    let s = then(
        &with_worker(AcceptanceMode::Auto),
        finished(FinishOutcome::Cancelled),
    );
    assert_eq!(s.current_worker_id(), None);
}

#[test]
fn completed_is_refused_before_running() {
    assert_eq!(
        refused(&in_intake(), finished(FinishOutcome::Completed)).violation,
        Violation::wrong_phase(EventKind::Finished)
    );
}

#[test]
fn failure_goes_to_error_from_any_live_phase() {
    for live in [RuntimeSession::new(), in_intake(), running(), reviewing()] {
        let stage = live.lifecycle_stage();
        let s = then(&live, failed());
        assert_eq!(s.phase(), RuntimePhase::Error);
        assert_eq!(s.waiting_reason(), None);
        assert_eq!(s.lifecycle_stage(), stage);
    }
}

#[test]
fn done_and_error_accept_nothing() {
    let done = then(&running(), finished(FinishOutcome::Completed));
    let error = then(&running(), failed());
    for ended in [done, error] {
        for event in [loop_tool(), failed(), finished(FinishOutcome::Cancelled)] {
            assert_eq!(refused(&ended, event).violation, Violation::SessionEnded);
        }
    }
}

#[test]
fn apply_event_leaves_its_input_alone() {
    let before = running();
    let snapshot = before.clone();
    let after = apply_event(&before, loop_tool()).unwrap();
    assert_eq!(before, snapshot);
    assert_eq!(after.history().len(), before.history().len() + 1);
}

#[test]
fn fold_reports_the_first_refused_event() {
    let err = fold([start_choosing(), loop_tool(), intake_done()]).unwrap_err();
    assert_eq!(err.event_index, 1);
    assert_eq!(err.event, EventKind::LoopToolCalled);
}
