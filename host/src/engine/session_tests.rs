use super::*;
use crate::engine::WaitReason;
use std::collections::BTreeMap;

use crate::phase::{
    AcceptanceMode, RuntimeEvent, RuntimePhase, SkillStart, WaitingKind, WaitingReason,
};

fn started() -> JobEvent {
    JobEvent::Started {
        piece: "research".into(),
        input: "find the answer".into(),
        parent: None,
        max_burst: 3,
        acceptance: AcceptanceMode::UserConfirmed,
        choose_from: Vec::new(),
        intake: None,
    }
}

fn tool(name: &str, call_id: &str) -> JobEvent {
    JobEvent::ToolCalled {
        movement: "gather".into(),
        call_id: call_id.into(),
        tool: name.into(),
        arguments: "{}".into(),
    }
}

fn parked(wait: u32, status: JobStatus, request: WaitRequest) -> JobEvent {
    let reason = match &request {
        WaitRequest::Question { .. } | WaitRequest::BurstConfirmation { .. } => {
            Some(WaitReason::Input)
        }
        WaitRequest::BrowserLogin { .. } => Some(WaitReason::BrowserLogin),
        WaitRequest::ToolApproval { .. } => Some(WaitReason::ToolRequest),
        WaitRequest::Subtasks { .. } | WaitRequest::Worker { .. } => None,
        WaitRequest::SkillSelection { .. } => Some(WaitReason::SkillSelection),
        WaitRequest::Intake { .. } => Some(WaitReason::Intake),
        WaitRequest::ArtifactReview { .. } => Some(WaitReason::ReviewArtifact),
        WaitRequest::RevisionInstruction { .. } => Some(WaitReason::Revision),
        WaitRequest::WorkerQuestion { .. } => Some(WaitReason::WorkerQuestions),
    };
    JobEvent::Parked {
        wait,
        status,
        resume_movement: "gather".into(),
        reason,
        request,
    }
}

fn resumed(wait: u32, resume: plugin::Resume) -> JobEvent {
    JobEvent::Resumed {
        wait,
        movement: "gather".into(),
        resume: resume.into(),
    }
}

fn finished(status: JobStatus, detail: &str) -> JobEvent {
    JobEvent::Finished {
        status,
        detail: detail.into(),
    }
}

fn session(log: &[JobEvent]) -> RuntimeSession {
    job_session("job-1", log).unwrap_or_else(|error| panic!("{error}"))
}

fn question(text: &str) -> WaitRequest {
    WaitRequest::Question {
        question: text.into(),
    }
}

#[test]
fn a_started_job_runs_with_its_input_as_the_intake() {
    let s = session(&[started()]);
    assert_eq!(s.id(), "job-1");
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.active_skill(), Some("research"));
    assert_eq!(s.slots()["input"], "find the answer");
    assert_eq!(s.max_burst(), 3);
}

#[test]
fn tool_calls_count_toward_the_burst_but_transitions_do_not() {
    let s = session(&[
        started(),
        tool("BrowseWeb", "c1"),
        tool(TRANSITION_TOOL, "c2"),
    ]);
    assert_eq!(s.tool_loop_burst_count(), 1);
    assert_eq!(s.phase(), RuntimePhase::Running);
}

#[test]
fn an_ask_waits_for_input_and_its_answer_runs_again_with_a_new_burst() {
    let log = [
        started(),
        tool("Ask", "c1"),
        parked(1, JobStatus::WaitingHuman, question("Which city?")),
    ];
    let s = session(&log);
    assert_eq!(s.phase(), RuntimePhase::WaitingUser);
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::Input {
            message: Some("Which city?".into())
        })
    );
    assert_eq!(s.resume_context().unwrap().call_id, "wait-1");
    let mut log = log.to_vec();
    log.push(resumed(1, plugin::Resume::Answered("Kyoto".into())));
    let s = session(&log);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.tool_loop_burst_count(), 0);
}

#[test]
fn a_login_waits_for_browser_login_and_keeps_the_cookie_out_of_the_session() {
    let log = [
        started(),
        tool("BrowseWeb", "c1"),
        parked(
            1,
            JobStatus::WaitingHuman,
            WaitRequest::BrowserLogin {
                url: "http://127.0.0.1/login".into(),
                reason: "wall".into(),
            },
        ),
    ];
    assert_eq!(
        session(&log).waiting_reason(),
        Some(&WaitingReason::BrowserLogin {
            url: "http://127.0.0.1/login".into()
        })
    );
    let mut log = log.to_vec();
    log.push(resumed(1, plugin::Resume::LoggedIn("sid=secret".into())));
    let s = session(&log);
    assert_eq!(s.phase(), RuntimePhase::Running);
    let history = serde_json::to_string(s.history()).unwrap();
    assert!(!history.contains("secret"), "{history}");
}

#[test]
fn a_tool_request_waits_for_approval_of_that_decision() {
    let log = [
        started(),
        tool("RequestTool", "c1"),
        parked(
            1,
            JobStatus::WaitingHuman,
            WaitRequest::ToolApproval {
                tool: "deploy".into(),
                reason: "ship it".into(),
                arguments: r#"{"env":"prod"}"#.into(),
            },
        ),
    ];
    let s = session(&log);
    assert_eq!(
        s.waiting_reason(),
        Some(&WaitingReason::ApproveStep {
            decision_id: "wait-1".into()
        })
    );
    assert_eq!(s.pending_decision().unwrap().arguments, r#"{"env":"prod"}"#);
    let mut log = log.to_vec();
    log.push(resumed(1, plugin::Resume::Denied("not today".into())));
    let s = session(&log);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert!(s.pending_decision().is_none());
}

#[test]
fn waiting_for_subtasks_is_running_with_the_worker_set_until_they_end() {
    let log = [
        started(),
        tool(TRANSITION_TOOL, "c1"),
        parked(
            1,
            JobStatus::WaitingSubtasks,
            WaitRequest::Subtasks {
                job_ids: vec!["child-1".into()],
            },
        ),
    ];
    let s = session(&log);
    assert_eq!(s.phase(), RuntimePhase::Running);
    assert_eq!(s.current_worker_id(), Some("subtasks-of-wait-1"));
    assert!(s.waiting_reason().is_none());
    let mut log = log.to_vec();
    log.push(resumed(
        1,
        plugin::Resume::SubtasksDone(vec![plugin::SubtaskResult {
            job_id: "child-1".into(),
            status: plugin::SubtaskStatus::Aborted,
            output: "no luck".into(),
            facts: vec![],
        }]),
    ));
    log.push(finished(JobStatus::Completed, "done"));
    let s = session(&log);
    assert_eq!(s.phase(), RuntimePhase::Done);
}

fn burst_log() -> Vec<JobEvent> {
    vec![
        started(),
        tool("Echo", "c1"),
        tool("Echo", "c2"),
        tool("Echo", "c3"),
        parked(
            1,
            JobStatus::WaitingHuman,
            WaitRequest::BurstConfirmation {
                tool: "Echo".into(),
                arguments: "{}".into(),
                calls: 3,
            },
        ),
    ]
}

#[test]
fn the_call_that_reaches_the_burst_limit_waits_for_the_user() {
    let s = session(&burst_log());
    assert_eq!(s.phase(), RuntimePhase::WaitingUser);
    assert_eq!(s.waiting_reason().unwrap().kind(), WaitingKind::Input);
    assert_eq!(s.tool_loop_burst_count(), 3);
    assert!(s.resume_context().is_none(), "the burst is no park");
}

#[test]
fn a_go_ahead_confirms_and_a_stop_or_reply_is_a_user_message() {
    for (resume, expected) in [
        (plugin::Resume::Approved, RuntimeEvent::UserConfirmed),
        (
            plugin::Resume::Denied("enough".into()),
            RuntimeEvent::UserMessage {
                text: "enough".into(),
            },
        ),
        (
            plugin::Resume::Answered("try the archive".into()),
            RuntimeEvent::UserMessage {
                text: "try the archive".into(),
            },
        ),
    ] {
        let mut log = burst_log();
        log.push(resumed(1, resume));
        let s = session(&log);
        assert_eq!(s.phase(), RuntimePhase::Running);
        assert_eq!(s.tool_loop_burst_count(), 0);
        assert_eq!(s.history().last(), Some(&expected));
    }
}

#[test]
fn an_expired_burst_ends_with_the_guard_abort() {
    let mut log = burst_log();
    log.push(resumed(1, plugin::Resume::Expired));
    log.push(finished(JobStatus::Aborted, "burst_limit"));
    let s = session(&log);
    assert_eq!(s.phase(), RuntimePhase::Done);
    assert_eq!(
        s.history().last(),
        Some(&RuntimeEvent::Finished {
            outcome: FinishOutcome::Aborted,
            reason: Some("burst_limit".into())
        })
    );
}

#[test]
fn an_error_is_the_error_phase_and_a_cancel_is_done() {
    let s = session(&[started(), finished(JobStatus::Error, "model down")]);
    assert_eq!(s.phase(), RuntimePhase::Error);
    let s = session(&[
        started(),
        parked(1, JobStatus::WaitingHuman, question("?")),
        finished(JobStatus::Cancelled, "cancelled"),
    ]);
    assert_eq!(s.phase(), RuntimePhase::Done);
}

#[test]
fn a_log_that_breaks_the_rules_names_the_event() {
    let log = [
        started(),
        parked(1, JobStatus::WaitingHuman, question("?")),
        tool("Echo", "c9"),
    ];
    let error = job_session("job-1", &log).unwrap_err();
    assert_eq!(error.event_index, 2);
    let message = error.to_string();
    assert!(
        message.contains("job-1") && message.contains("#2"),
        "{message}"
    );
    let wrong_wait = [
        started(),
        parked(1, JobStatus::WaitingHuman, question("?")),
        resumed(2, plugin::Resume::Answered("x".into())),
    ];
    assert_eq!(
        job_session("job-1", &wrong_wait).unwrap_err().event_index,
        2
    );
}

#[test]
fn a_log_translates_to_the_phase_machines_events_and_the_live_session_agrees_with_the_fold() {
    let mut log = burst_log();
    log.push(resumed(1, plugin::Resume::Approved));
    let echo = || RuntimeEvent::LoopToolCalled {
        tool: "Echo".into(),
    };
    let expected = vec![
        RuntimeEvent::SessionStarted {
            session_id: "job-1".into(),
            start: SkillStart::InitialSkill {
                skill: "research".into(),
                intake_prompt: String::new(),
            },
            acceptance_mode: AcceptanceMode::UserConfirmed,
            max_burst: Some(3),
        },
        RuntimeEvent::IntakeCompleted {
            slots: BTreeMap::from([(
                crate::piece::INPUT_SLOT.to_owned(),
                "find the answer".to_owned(),
            )]),
        },
        echo(),
        echo(),
        echo(),
        // The burst gate's park is the machine's own wait: only the go-ahead is an event.
        RuntimeEvent::UserConfirmed,
    ];
    assert_eq!(runtime_events("job-1", &log), expected);
    let folded = session(&log);
    assert_eq!(folded.history(), expected.as_slice());
    let live = live_session("job-1", &log).unwrap();
    assert_eq!(live.session(), &folded.without_history());
    assert_eq!(live.session().phase(), RuntimePhase::Running);
}
