//! The engine through the real agent loop and real components: every row of the sentinel table
//! of DESIGN §5, each park resumed at the right movement, and the loop's guards.

use maestro::engine::{
    EngineLimits, Guard, JobEvent, JobStatus, PieceRunResult, ResumePoint, WaitReason, WaitRequest,
};
use maestro::plugin::{Resume, SubtaskResult, SubtaskStatus};
use maestro_e2e::engine::{Harness, harness};
use maestro_e2e::site::{GOOD_SESSION, Site};
use serde_json::json;

const CHAT: &str = r#"
name: chat
initial_movement: chat
max_movements: 1
movements:
  - name: chat
    instructions: Help the user; finish with complete.
    tools: [complete, echo]
    rules: []
"#;

const RESEARCH: &str = r#"
name: research
initial_movement: gather
max_movements: 4
movements:
  - name: gather
    instructions: Gather sources.
    tools: [BrowseWeb, WaitSubTask, complete]
    rules:
      - condition: Subtasks are still running.
        next: WAIT_SUBTASKS
      - condition: Enough sources.
        next: write
    default_next: write
  - name: write
    instructions: Write the report.
    tools: [complete]
    default_next: COMPLETE
"#;

async fn chat(script: &str) -> Harness {
    harness(CHAT, script, "", EngineLimits::default()).await
}

fn last_is_finished(harness: &Harness, job: &maestro::engine::JobState, status: JobStatus) {
    match harness.events(job).last() {
        Some(JobEvent::Finished { status: got, .. }) => assert_eq!(*got, status),
        other => panic!("expected a Finished event, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_complete_completes_the_job() {
    let h = chat(
        r#"
turns:
  - tool_calls:
      - name: echo
        arguments: { text: "draft" }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "All done." }
"#,
    )
    .await;
    let mut job = h.job("Say hello");
    let result = h.run(&mut job, None).await;
    assert_eq!(
        result,
        PieceRunResult::Completed {
            output: "All done.".into()
        }
    );
    assert_eq!(job.status, JobStatus::Completed);
    assert_eq!(job.result.as_deref(), Some("All done."));
    // The model saw the echo output before it completed.
    assert_eq!(
        h.tool_answers_seen(),
        vec![("echo".into(), "draft".into(), false)]
    );
    last_is_finished(&h, &job, JobStatus::Completed);
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_abort_aborts_the_job() {
    let h = chat(
        r#"
turns:
  - tool_calls:
      - name: complete
        arguments: { status: aborted, summary: "The source is gone." }
"#,
    )
    .await;
    let mut job = h.job("Summarise the source");
    let result = h.run(&mut job, None).await;
    assert_eq!(
        result,
        PieceRunResult::Aborted {
            reason: "The source is gone.".into(),
            guard: None
        }
    );
    assert_eq!(job.status, JobStatus::Aborted);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_parks_in_the_current_movement_and_the_resume_reinvokes_the_call() {
    let h = chat(
        r#"
turns:
  - tool_calls:
      - name: complete
        arguments: { status: needs_user_input, question: "Which city?" }
      - name: echo
        arguments: { text: "after the question" }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "Weather for Paris." }
"#,
    )
    .await;
    let mut job = h.job("What's the weather?");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::WaitingHuman {
        resume_movement,
        reason,
        wait,
    } = result
    else {
        panic!("ASK must park as waiting_human, got {result:?}");
    };
    assert_eq!(resume_movement, "chat");
    assert_eq!(reason, WaitReason::Input);
    assert_eq!(
        wait.request,
        WaitRequest::Question {
            question: "Which city?".into()
        }
    );
    assert!(matches!(wait.resume, ResumePoint::ParkedCall { .. }));
    assert_eq!(job.status, JobStatus::WaitingHuman);
    assert_eq!(job.movement, "chat");
    assert_eq!(job.asks, 1);

    // The job is data: it survives a round trip through JSON, as through a store.
    let mut job: maestro::engine::JobState =
        serde_json::from_value(serde_json::to_value(&job).unwrap()).unwrap();

    // A single-movement piece resumes in its movement, not at the end.
    let result = h
        .run(&mut job, Some(Resume::Answered("Paris".into())))
        .await;
    assert_eq!(
        result,
        PieceRunResult::Completed {
            output: "Weather for Paris.".into()
        }
    );
    let answers = h.tool_answers_seen();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0].0, "echo");
    assert!(answers[0].1.contains("Not run"), "{answers:?}");
    assert_eq!(answers[1].0, "complete");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&answers[1].1).unwrap(),
        json!({"question": "Which city?", "answer": "Paris"})
    );
    assert_eq!(job.movements_entered, 1, "the resume re-entered nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_past_the_ask_limit_aborts() {
    let script = r#"
turns:
  - tool_calls:
      - name: complete
        arguments: { status: needs_user_input, question: "First?" }
  - tool_calls:
      - name: complete
        arguments: { status: needs_user_input, question: "Second?" }
"#;
    let limits = EngineLimits {
        max_asks: 1,
        ..EngineLimits::default()
    };
    let h = harness(CHAT, script, "", limits).await;
    let mut job = h.job("Ask me twice");
    assert_eq!(
        h.run(&mut job, None).await.status(),
        JobStatus::WaitingHuman
    );
    let result = h.run(&mut job, Some(Resume::Answered("one".into()))).await;
    let PieceRunResult::Aborted { guard, reason } = result else {
        panic!("the second question must abort, got {result:?}");
    };
    assert_eq!(guard, Some(Guard::AskLimit));
    assert!(reason.contains("limit is 1"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_subtask_tool_parks_waiting_subtasks_and_resumes_in_the_same_movement() {
    let script = r#"
turns:
  - tool_calls:
      - name: WaitSubTask
        arguments: { job_ids: ["child-a", "child-b"] }
  - tool_calls:
      - name: transition
        arguments: { next: write }
  - text: "Report from both children."
"#;
    let h = harness(RESEARCH, script, "", EngineLimits::default()).await;
    let mut job = h.job("Research the topic");
    // The job started these two (the job layer records them as it spawns them).
    job.children = vec!["child-a".into(), "child-b".into()];
    let result = h.run(&mut job, None).await;
    let PieceRunResult::WaitingSubtasks {
        resume_movement,
        wait,
    } = result
    else {
        panic!("WaitSubTask must park waiting_subtasks, got {result:?}");
    };
    assert_eq!(resume_movement, "gather");
    assert_eq!(wait.reason, None);
    assert_eq!(
        wait.request,
        WaitRequest::Subtasks {
            job_ids: vec!["child-a".into(), "child-b".into()]
        }
    );
    let children = vec![
        SubtaskResult {
            job_id: "child-a".into(),
            status: SubtaskStatus::Completed,
            output: "A".into(),
            facts: vec![],
        },
        SubtaskResult {
            job_id: "child-b".into(),
            status: SubtaskStatus::Failed,
            output: "boom".into(),
            facts: vec![],
        },
    ];
    let result = h.run(&mut job, Some(Resume::SubtasksDone(children))).await;
    assert_eq!(
        result,
        PieceRunResult::Completed {
            output: "Report from both children.".into()
        }
    );
    // The parked call was re-invoked: WaitSubTask's report, with the failed child as failed.
    let answers = h.tool_answers_seen();
    let report: serde_json::Value = serde_json::from_str(&answers[0].1).unwrap();
    assert_eq!(report["results"][1]["status"], "failed");
    assert_eq!(report["all_completed"], false);
    assert_eq!(job.movements_entered, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_wait_subtasks_resumes_at_default_next_with_the_results() {
    let script = r#"
turns:
  - tool_calls:
      - name: transition
        arguments: { next: WAIT_SUBTASKS }
  - text: "Final report."
"#;
    let h = harness(RESEARCH, script, "", EngineLimits::default()).await;
    let mut job = h.job("Research the topic");
    job.children = vec!["child-a".into()];
    let result = h.run(&mut job, None).await;
    let PieceRunResult::WaitingSubtasks {
        resume_movement,
        wait,
    } = result
    else {
        panic!("a rule WAIT_SUBTASKS must park waiting_subtasks, got {result:?}");
    };
    assert_eq!(
        resume_movement, "write",
        "a rule park resumes at default_next"
    );
    assert_eq!(wait.resume, ResumePoint::EnterMovement);
    assert_eq!(
        wait.request,
        WaitRequest::Subtasks {
            job_ids: vec!["child-a".into()]
        }
    );
    assert_eq!(job.movement, "write");

    let children = vec![SubtaskResult {
        job_id: "child-a".into(),
        status: SubtaskStatus::Aborted,
        output: "no access".into(),
        facts: vec![],
    }];
    let result = h.run(&mut job, Some(Resume::SubtasksDone(children))).await;
    assert_eq!(
        result,
        PieceRunResult::Completed {
            output: "Final report.".into()
        }
    );
    let requests = h.model.requests();
    let last = requests.last().unwrap();
    assert!(
        last.system.contains("Current movement: `write`"),
        "{}",
        last.system
    );
    let told = serde_json::to_string(&last.messages).unwrap();
    assert!(told.contains("child-a aborted: no access"), "{told}");
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_login_parks_waiting_human_and_resumes_with_the_session() {
    let site = Site::start().await;
    let policy = format!(
        "[plugins.browse_web]\nhttp_allow = [\"{}\"]\n",
        site.authority()
    );
    let script = format!(
        r#"
turns:
  - tool_calls:
      - name: BrowseWeb
        arguments: {{ url: "{}" }}
  - tool_calls:
      - name: complete
        arguments: {{ status: done, summary: "Read the private page." }}
"#,
        site.url("/private")
    );
    let h = harness(RESEARCH, &script, &policy, EngineLimits::default()).await;
    let mut job = h.job("Read the private page");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::WaitingHuman {
        resume_movement,
        reason,
        wait,
    } = result
    else {
        panic!("a login wall must park waiting_human, got {result:?}");
    };
    assert_eq!(
        (resume_movement.as_str(), reason),
        ("gather", WaitReason::BrowserLogin)
    );
    let WaitRequest::BrowserLogin { url, .. } = &wait.request else {
        panic!("expected a browser login, got {:?}", wait.request);
    };
    assert!(url.contains("/login"), "{url}");

    let result = h
        .run(&mut job, Some(Resume::LoggedIn(GOOD_SESSION.into())))
        .await;
    assert_eq!(result.status(), JobStatus::Completed);
    let answers = h.tool_answers_seen();
    let page: serde_json::Value = serde_json::from_str(&answers[0].1).unwrap();
    assert_eq!(page["status"], 200, "{page}");
    // The call got the session; the log keeps only that one was given.
    let log = serde_json::to_string(&h.events(&job)).unwrap();
    assert!(!log.contains(GOOD_SESSION), "{log}");
    assert!(log.contains("(session withheld)"), "{log}");
}

const APPROVAL: &str = r#"
name: approval
initial_movement: apply
max_movements: 1
movements:
  - name: apply
    instructions: Apply the change once approved.
    tools: [RequestTool, echo, complete]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn tool_request_parks_waiting_human_with_the_exact_arguments() {
    let script = r#"
turns:
  - tool_calls:
      - name: RequestTool
        arguments: { tool: DeleteFile, reason: "clean up", arguments: { path: "/tmp/x", force: true } }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "Deleted." }
"#;
    let h = harness(APPROVAL, script, "", EngineLimits::default()).await;
    let mut job = h.job("Delete /tmp/x");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::WaitingHuman {
        resume_movement,
        reason,
        wait,
    } = result
    else {
        panic!("RequestTool must park waiting_human, got {result:?}");
    };
    assert_eq!(
        (resume_movement.as_str(), reason),
        ("apply", WaitReason::ToolRequest)
    );
    let WaitRequest::ToolApproval {
        tool, arguments, ..
    } = &wait.request
    else {
        panic!("expected a tool approval, got {:?}", wait.request);
    };
    assert_eq!(tool, "DeleteFile");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(arguments).unwrap(),
        json!({"path": "/tmp/x", "force": true})
    );
    let result = h.run(&mut job, Some(Resume::Approved)).await;
    assert_eq!(result.status(), JobStatus::Completed);
    let answers = h.tool_answers_seen();
    assert!(answers[0].1.contains("approved"), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_that_requires_approval_parks_the_call_before_it_runs() {
    let script = r#"
turns:
  - tool_calls:
      - name: echo
        arguments: { text: "dangerous" }
  - tool_calls:
      - name: echo
        arguments: { text: "again" }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "ok" }
"#;
    let policy = "[plugins.echo]\nrequire_approval = true\n";
    let h = harness(APPROVAL, script, policy, EngineLimits::default()).await;
    let mut job = h.job("Echo twice");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::WaitingHuman { reason, wait, .. } = result else {
        panic!("a call needing approval must park, got {result:?}");
    };
    assert_eq!(reason, WaitReason::ToolRequest);
    assert!(matches!(wait.resume, ResumePoint::ApprovalGate { .. }));
    assert!(
        !h.events(&job)
            .iter()
            .any(|e| matches!(e, JobEvent::ToolAnswered { .. })),
        "the call must not run before approval"
    );
    // Approved: the call runs now and the model sees its output.
    let result = h.run(&mut job, Some(Resume::Approved)).await;
    assert_eq!(
        result.status(),
        JobStatus::WaitingHuman,
        "the second call parks too"
    );
    assert_eq!(
        h.tool_answers_seen(),
        vec![("echo".into(), "dangerous".into(), false)]
    );
    // Denied: the call never runs and the model is told why.
    let result = h
        .run(&mut job, Some(Resume::Denied("not today".into())))
        .await;
    assert_eq!(result.status(), JobStatus::Completed);
    let answers = h.tool_answers_seen();
    assert_eq!(answers[1].0, "echo");
    assert!(
        answers[1].2 && answers[1].1.contains("not today"),
        "{answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_ends_the_job_as_cancelled() {
    let h = chat(
        r#"
turns:
  - tool_calls:
      - name: echo
        arguments: { text: "working" }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "never reached" }
"#,
    )
    .await;
    let mut job = h.job("Work");
    h.cancel.cancel();
    let result = h.run(&mut job, None).await;
    assert_eq!(result.status(), JobStatus::Cancelled);
    assert_eq!(job.status, JobStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_failure_is_an_error_with_nothing_settled() {
    let h = chat("turns:\n  - tool_calls:\n      - name: echo\n        arguments: { text: one }\n")
        .await;
    let mut job = h.job("Run out of script");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::Error { message } = result else {
        panic!("an exhausted model must end in error, got {result:?}");
    };
    assert!(message.contains("script exhausted"), "{message}");
    assert_eq!(job.status, JobStatus::Error);
}

#[tokio::test(flavor = "multi_thread")]
async fn text_only_replies_without_default_next_hit_the_text_only_guard() {
    let h = chat("turns:\n  - text: a\n  - text: b\n  - text: c\n  - text: d\n").await;
    let mut job = h.job("Chat");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::Aborted { guard, reason } = result else {
        panic!("expected the text-only guard, got {result:?}");
    };
    assert_eq!(guard, Some(Guard::TextOnlyLimit));
    assert!(reason.contains("3 times"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn endless_tool_calls_hit_the_iteration_guard() {
    let turn = "  - tool_calls:\n      - name: echo\n        arguments: { text: again }\n";
    let script = format!("turns:\n{}", turn.repeat(5));
    let limits = EngineLimits {
        max_iterations: 3,
        ..EngineLimits::default()
    };
    let h = harness(CHAT, &script, "", limits).await;
    let mut job = h.job("Loop");
    let result = h.run(&mut job, None).await;
    assert!(
        matches!(
            result,
            PieceRunResult::Aborted {
                guard: Some(Guard::MaxIterations),
                ..
            }
        ),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ping_pong_between_movements_hits_max_movements() {
    let piece = r#"
name: pingpong
initial_movement: ping
max_movements: 3
movements:
  - name: ping
    instructions: Go to pong.
    rules:
      - condition: always
        next: pong
  - name: pong
    instructions: Go to ping.
    rules:
      - condition: always
        next: ping
"#;
    let script = r#"
turns:
  - tool_calls: [{ name: transition, arguments: { next: pong } }]
  - tool_calls: [{ name: transition, arguments: { next: ping } }]
  - tool_calls: [{ name: transition, arguments: { next: pong } }]
"#;
    let h = harness(piece, script, "", EngineLimits::default()).await;
    let mut job = h.job("Bounce");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::Aborted { guard, reason } = result else {
        panic!("expected the movement guard, got {result:?}");
    };
    assert_eq!(guard, Some(Guard::MaxMovements));
    assert!(reason.contains("max_movements (3)"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mistakes_of_the_model_are_answered_and_the_loop_goes_on() {
    let script = r#"
turns:
  - tool_calls:
      - name: BrowseWeb
        arguments: { url: "http://127.0.0.1:9/" }
      - name: echo
        raw_arguments: "{not json"
      - name: echo
        arguments: { wrong: field }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "recovered" }
"#;
    let h = chat(script).await;
    let mut job = h.job("Make mistakes");
    let result = h.run(&mut job, None).await;
    assert_eq!(
        result,
        PieceRunResult::Completed {
            output: "recovered".into()
        }
    );
    let answers = h.tool_answers_seen();
    assert_eq!(answers.len(), 3);
    assert!(
        answers.iter().all(|(_, _, is_error)| *is_error),
        "{answers:?}"
    );
    assert!(
        answers[0].1.contains("not available in movement `chat`"),
        "{answers:?}"
    );
    assert!(answers[1].1.contains("not valid JSON"), "{answers:?}");
    assert!(answers[2].1.contains("invalid-arguments"), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_transition_tool_offers_exactly_the_rules_and_refuses_others() {
    let script = r#"
turns:
  - tool_calls: [{ name: transition, arguments: { next: nowhere } }]
  - tool_calls: [{ name: transition, arguments: { next: write } }]
  - text: "Report."
"#;
    let h = harness(RESEARCH, script, "", EngineLimits::default()).await;
    let mut job = h.job("Research");
    let result = h.run(&mut job, None).await;
    assert_eq!(result.status(), JobStatus::Completed);
    let first = &h.model.requests()[0];
    let transition = first.tools.iter().find(|t| t.name == "transition").unwrap();
    assert_eq!(
        transition.parameters["properties"]["next"]["enum"],
        json!(["WAIT_SUBTASKS", "write"])
    );
    // A movement with no rules gets no transition tool.
    let last = h.model.requests().pop().unwrap();
    assert!(last.tools.iter().all(|t| t.name != "transition"));
    let refused = &h.model.requests()[1].messages;
    let told = serde_json::to_string(refused).unwrap();
    assert!(told.contains("one of: WAIT_SUBTASKS, write"), "{told}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_or_second_answer_is_refused_and_changes_nothing() {
    let h = chat(
        r#"
turns:
  - tool_calls:
      - name: complete
        arguments: { status: needs_user_input, question: "Which city?" }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "ok" }
"#,
    )
    .await;
    let mut job = h.job("Ask");
    h.run(&mut job, None).await;
    let before = job.clone();
    let error = h
        .engine
        .run(
            &mut job,
            Some(Resume::Approved.into()),
            &h.observer,
            &h.cancel,
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("an answer to a question"),
        "{error}"
    );
    assert_eq!(job, before);
    h.run(&mut job, Some(Resume::Answered("Oslo".into()))).await;
    let error = h
        .engine
        .run(
            &mut job,
            Some(Resume::Answered("again".into()).into()),
            &h.observer,
            &h.cancel,
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("completed"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_wait_subtasks_without_children_is_refused_instead_of_parking_forever() {
    let script = r#"
turns:
  - tool_calls: [{ name: transition, arguments: { next: WAIT_SUBTASKS } }]
  - tool_calls: [{ name: transition, arguments: { next: write } }]
  - text: "Report."
"#;
    let h = harness(RESEARCH, script, "", EngineLimits::default()).await;
    let mut job = h.job("Research");
    let result = h.run(&mut job, None).await;
    assert_eq!(result.status(), JobStatus::Completed);
    let told = serde_json::to_string(&h.model.requests()[1].messages).unwrap();
    assert!(told.contains("started no subtasks"), "{told}");
}

#[tokio::test(flavor = "multi_thread")]
async fn each_park_gets_the_next_wait_id() {
    let h = chat(
        r#"
turns:
  - tool_calls:
      - name: complete
        arguments: { status: needs_user_input, question: "First?" }
  - tool_calls:
      - name: complete
        arguments: { status: needs_user_input, question: "Second?" }
"#,
    )
    .await;
    let mut job = h.job("Ask twice");
    h.run(&mut job, None).await;
    assert_eq!(job.wait.as_ref().unwrap().id, 1);
    h.run(&mut job, Some(Resume::Answered("one".into()))).await;
    assert_eq!(job.wait.as_ref().unwrap().id, 2);
}
