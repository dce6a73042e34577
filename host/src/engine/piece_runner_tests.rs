//! One test per row of the table in DESIGN §5, on the pure mapping.

use super::*;
use crate::engine::job::PinnedPlugin;
use crate::engine::wait::WaitRequest;
use crate::plugin::CallRequest;

const CONTEXT: MapContext = MapContext {
    asks_so_far: 0,
    max_asks: 3,
};

fn parked_call_wait(reason: Option<WaitReason>, request: WaitRequest) -> Wait {
    Wait {
        id: 0,
        reason,
        request,
        resume: ResumePoint::ParkedCall {
            call: CallRequest::new("complete", serde_json::json!({})),
            plugin: PinnedPlugin {
                name: "complete".into(),
                content_hash: "abc".into(),
            },
        },
    }
}

fn question() -> Wait {
    parked_call_wait(
        Some(WaitReason::Input),
        WaitRequest::Question {
            question: "Which city?".into(),
        },
    )
}

#[test]
fn a_movement_name_continues_the_piece() {
    assert_eq!(
        map_movement_result(MovementResult::goto("write"), CONTEXT),
        Step::Continue("write".into())
    );
}

#[test]
fn terminal_complete_completes() {
    assert_eq!(
        map_movement_result(MovementResult::complete("the report"), CONTEXT),
        Step::Done(PieceRunResult::Completed {
            output: "the report".into()
        })
    );
}

#[test]
fn terminal_abort_and_guards_abort_naming_the_guard() {
    assert_eq!(
        map_movement_result(MovementResult::abort("no sources"), CONTEXT),
        Step::Done(PieceRunResult::Aborted {
            reason: "no sources".into(),
            guard: None
        })
    );
    for guard in [
        Guard::MaxMovements,
        Guard::MaxIterations,
        Guard::TextOnlyLimit,
    ] {
        let Step::Done(result) = map_movement_result(MovementResult::guard(guard, "x"), CONTEXT)
        else {
            panic!("a guard must end the job");
        };
        assert_eq!(result.status(), JobStatus::Aborted);
        assert_eq!(
            result,
            PieceRunResult::Aborted {
                reason: "x".into(),
                guard: Some(guard)
            }
        );
    }
}

#[test]
fn a_cancellation_is_an_abort_that_ends_as_cancelled() {
    let result = MovementResult::cancelled(Some("wrong vendor"));
    assert_eq!(result.next, Some(Target::Sentinel(Sentinel::Abort)));
    let Step::Done(done) = map_movement_result(result, CONTEXT) else {
        panic!("cancel ends the job");
    };
    assert_eq!(done.status(), JobStatus::Cancelled);
}

#[test]
fn ask_waits_for_a_human_at_the_current_movement_with_reason_input() {
    let wait = question();
    let result = MovementResult::park(Sentinel::Ask, "chat", wait.clone());
    assert_eq!(
        map_movement_result(result, CONTEXT),
        Step::Done(PieceRunResult::WaitingHuman {
            resume_movement: "chat".into(),
            reason: WaitReason::Input,
            wait
        })
    );
}

#[test]
fn ask_past_the_ask_limit_aborts() {
    let result = MovementResult::park(Sentinel::Ask, "chat", question());
    let context = MapContext {
        asks_so_far: 3,
        max_asks: 3,
    };
    let Step::Done(PieceRunResult::Aborted { guard, reason }) =
        map_movement_result(result, context)
    else {
        panic!("the fourth question must abort");
    };
    assert_eq!(guard, Some(Guard::AskLimit));
    assert!(reason.contains("limit is 3"), "{reason}");
}

#[test]
fn wait_subtasks_from_a_tool_resumes_at_the_current_movement() {
    let wait = parked_call_wait(
        None,
        WaitRequest::Subtasks {
            job_ids: vec!["j1".into()],
        },
    );
    let result = MovementResult::park(Sentinel::WaitSubtasks, "gather", wait.clone());
    assert_eq!(
        map_movement_result(result, CONTEXT),
        Step::Done(PieceRunResult::WaitingSubtasks {
            resume_movement: "gather".into(),
            wait
        })
    );
}

#[test]
fn wait_subtasks_from_a_rule_resumes_at_default_next() {
    let wait = Wait {
        id: 0,
        reason: None,
        request: WaitRequest::Subtasks {
            job_ids: vec!["j1".into(), "j2".into()],
        },
        resume: ResumePoint::EnterMovement,
    };
    let result = MovementResult::park(Sentinel::WaitSubtasks, "write", wait.clone());
    assert_eq!(
        map_movement_result(result, CONTEXT),
        Step::Done(PieceRunResult::WaitingSubtasks {
            resume_movement: "write".into(),
            wait
        })
    );
}

#[test]
fn browser_login_waits_for_a_human_with_reason_browser_login() {
    let wait = parked_call_wait(
        Some(WaitReason::BrowserLogin),
        WaitRequest::BrowserLogin {
            url: "http://127.0.0.1/login".into(),
            reason: "401".into(),
        },
    );
    let result = MovementResult::park(Sentinel::WaitingHumanBrowser, "gather", wait.clone());
    assert_eq!(
        map_movement_result(result, CONTEXT),
        Step::Done(PieceRunResult::WaitingHuman {
            resume_movement: "gather".into(),
            reason: WaitReason::BrowserLogin,
            wait
        })
    );
}

#[test]
fn tool_request_waits_for_a_human_with_reason_tool_request() {
    let wait = parked_call_wait(
        Some(WaitReason::ToolRequest),
        WaitRequest::ToolApproval {
            tool: "deploy".into(),
            reason: "needs approval".into(),
            arguments: r#"{"env":"prod"}"#.into(),
        },
    );
    let result = MovementResult::park(Sentinel::WaitingHumanToolRequest, "apply", wait.clone());
    assert_eq!(
        map_movement_result(result, CONTEXT),
        Step::Done(PieceRunResult::WaitingHuman {
            resume_movement: "apply".into(),
            reason: WaitReason::ToolRequest,
            wait
        })
    );
}

#[test]
fn nothing_settled_is_an_error() {
    let Step::Done(result) =
        map_movement_result(MovementResult::unsettled("the model failed"), CONTEXT)
    else {
        panic!("an unsettled movement ends the job");
    };
    assert_eq!(
        result,
        PieceRunResult::Error {
            message: "the model failed".into()
        }
    );
}

#[test]
fn a_park_without_a_resume_movement_is_an_error_not_an_end() {
    let mut result = MovementResult::park(Sentinel::Ask, "chat", question());
    result.resume_movement = None;
    let Step::Done(PieceRunResult::Error { message }) = map_movement_result(result, CONTEXT) else {
        panic!("a park without a resume movement must be an error");
    };
    assert!(
        message.contains("ASK") && message.contains("resume"),
        "{message}"
    );
}

#[test]
fn a_park_with_the_wrong_wait_reason_is_an_error() {
    let mut result = MovementResult::park(Sentinel::WaitingHumanBrowser, "gather", question());
    result.wait_reason = Some(WaitReason::Input);
    let Step::Done(PieceRunResult::Error { message }) = map_movement_result(result, CONTEXT) else {
        panic!("a browser park with reason input must be an error");
    };
    assert!(message.contains("browser_login"), "{message}");
}
