//! Unit tests for parks and resumes, against DESIGN §5's table.

use super::super::test_support::*;
use super::super::*;

fn ask() -> Park {
    Park::Ask {
        question: Some("Which edition?".into()),
    }
}

fn subtasks() -> Park {
    Park::Subtasks {
        worker_id: "subtasks-c1".into(),
        subtask_ids: vec!["j2".into(), "j3".into()],
    }
}

fn tool_request() -> Park {
    Park::ToolRequest {
        decision: decision("d9"),
    }
}

fn answered() -> Resume {
    Resume::Answered {
        answer: "the second".into(),
    }
}

#[test]
fn park_ask_waits_for_input_and_records_the_call() {
    let s = then(&running(), parked("c1", ask()));
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::Input {
            message: Some("Which edition?".into())
        })
    );
    assert_eq!(
        s.resume_context(),
        Some(&ResumeContext {
            call_id: "c1".into(),
            movement: "write".into(),
            parked: ParkKind::Ask,
        })
    );
}

#[test]
fn resume_answered_leaves_the_wait_and_resets_the_burst() {
    let s = session([
        start_with_skill(AcceptanceMode::UserConfirmed, None),
        intake_done(),
        loop_tool(),
        parked("c1", ask()),
        resumed("c1", answered()),
    ]);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.resume_context(), None);
    assert_eq!(s.tool_loop_burst_count(), 0);
}

#[test]
fn park_browser_login_waits_for_browser_login() {
    let login = Park::BrowserLogin {
        url: "https://example.org/login".into(),
    };
    let s = then(&running(), parked("c1", login));
    assert_eq!(waiting(&s), Some(WaitingKind::BrowserLogin));
    let logged_in = Resume::LoggedIn {
        message: "ok".into(),
    };
    assert_eq!(
        then(&s, resumed("c1", logged_in)).phase(),
        RuntimePhase::Running
    );
}

#[test]
fn park_tool_request_waits_in_approve_step_with_the_decision() {
    let s = then(&running(), parked("c1", tool_request()));
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::ApproveStep {
            decision_id: "d9".into()
        })
    );
    assert_eq!(s.pending_decision(), Some(&decision("d9")));
    for verdict in [Resume::Approved, Resume::Denied { reason: None }] {
        let resumed = then(&s, resumed("c1", verdict));
        assert_eq!(resumed.phase(), RuntimePhase::Running);
        assert_eq!(resumed.pending_decision(), None);
    }
}

#[test]
fn a_parked_wait_is_answered_by_resumed_only() {
    let awaiting = Violation::AwaitingResume {
        call_id: "c1".into(),
    };
    let asking = then(&running(), parked("c1", ask()));
    assert_eq!(refused(&asking, message("hi")).violation, awaiting);
    assert_eq!(
        refused(&asking, RuntimeEvent::UserConfirmed).violation,
        awaiting
    );
    let requesting = then(&running(), parked("c1", tool_request()));
    assert_eq!(
        refused(&requesting, RuntimeEvent::UserConfirmed).violation,
        awaiting
    );
    assert_eq!(
        refused(&requesting, RuntimeEvent::UserDeclined { reason: None }).violation,
        awaiting
    );
}

#[test]
fn park_subtasks_keeps_running_with_the_worker_set() {
    let s = then(&running(), parked("c1", subtasks()));
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.waiting_reason(), None);
    assert_eq!(s.current_worker_id(), Some("subtasks-c1"));
    assert_eq!(
        refused(&s, loop_tool()).violation,
        Violation::WorkerBlocking {
            worker_id: "subtasks-c1".into()
        }
    );
    assert_eq!(
        refused(&s, worker_completed("subtasks-c1", None)).violation,
        Violation::AwaitingResume {
            call_id: "c1".into()
        }
    );
}

#[test]
fn subtasks_done_frees_the_agent_without_resetting_the_burst() {
    let s = session([
        start_with_skill(AcceptanceMode::UserConfirmed, None),
        intake_done(),
        loop_tool(),
        parked("c1", subtasks()),
        resumed(
            "c1",
            Resume::SubtasksDone {
                results: vec![SubtaskResult {
                    job_id: "j2".into(),
                    output: "done".into(),
                }],
            },
        ),
    ]);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.current_worker_id(), None);
    assert_eq!(s.tool_loop_burst_count(), 1);
}

#[test]
fn a_second_answer_to_the_same_wait_is_refused() {
    let s = then(
        &then(&running(), parked("c1", ask())),
        resumed("c1", answered()),
    );
    assert_eq!(
        refused(&s, resumed("c1", answered())).violation,
        Violation::NothingParked
    );
}

#[test]
fn a_resume_must_answer_the_parked_call_with_a_fitting_answer() {
    let s = then(&running(), parked("c1", ask()));
    assert_eq!(
        refused(&s, resumed("c2", answered())).violation,
        Violation::ParkedCallMismatch {
            parked: "c1".into(),
            got: "c2".into()
        }
    );
    assert_eq!(
        refused(&s, resumed("c1", Resume::Approved)).to_string(),
        "event #3 `resumed` rejected in phase `waiting_user/input`: \
         a `approved` resume cannot answer a `ask` park"
    );
}

#[test]
fn expired_answers_any_park() {
    for park in [ask(), subtasks(), tool_request()] {
        let s = then(
            &then(&running(), parked("c1", park)),
            resumed("c1", Resume::Expired),
        );
        assert_eq!(s.phase(), RuntimePhase::Running);
        assert_eq!(s.current_worker_id(), None);
        assert_eq!(s.pending_decision(), None);
    }
}

#[test]
fn one_park_at_a_time() {
    let s = then(&running(), parked("c1", subtasks()));
    assert_eq!(
        refused(&s, parked("c2", ask())).violation,
        Violation::AlreadyParked {
            call_id: "c1".into()
        }
    );
}

#[test]
fn parks_happen_only_while_running() {
    assert_eq!(
        refused(&in_intake(), parked("c1", ask())).violation,
        Violation::wrong_phase(EventKind::Parked)
    );
}

#[test]
fn a_workers_own_park_keeps_the_worker() {
    let login = Park::BrowserLogin { url: "u".into() };
    let logged_in = Resume::LoggedIn {
        message: "ok".into(),
    };
    for (park, answer) in [(ask(), answered()), (login, logged_in)] {
        let s = then(&with_worker(AcceptanceMode::Auto), parked("c1", park));
        assert_eq!(s.current_worker_id(), Some("w1"));
        let s = then(&s, resumed("c1", answer));
        assert_eq!(s.current_worker_id(), Some("w1"));
        assert_eq!(s.phase(), RuntimePhase::Running);
    }
}

#[test]
fn park_subtasks_is_refused_while_a_worker_holds_the_session() {
    assert_eq!(
        refused(&with_worker(AcceptanceMode::Auto), parked("c1", subtasks())).violation,
        Violation::WorkerAlreadyRunning {
            worker_id: "w1".into()
        }
    );
}

#[test]
fn park_tool_request_is_refused_while_a_decision_is_pending() {
    let s = then(&running(), boundary("d1", false));
    assert_eq!(
        refused(&s, parked("c1", tool_request())).violation,
        Violation::DecisionAlreadyPending {
            decision_id: "d1".into()
        }
    );
}

#[test]
fn a_terminal_outcome_drops_the_park() {
    let s = then(
        &then(&running(), parked("c1", ask())),
        finished(FinishOutcome::Aborted),
    );
    assert_eq!(s.phase(), RuntimePhase::Done);
    assert_eq!(s.resume_context(), None);
}
