//! A job's session is the fold of its event log: the engine's burst gate through real
//! components, and random jobs whose every log folds into the phase their status says.

use maestro::engine::{
    EngineLimits, Guard, JobEvent, JobState, JobStatus, PieceRunResult, WaitReason, WaitRequest,
    job_session,
};
use maestro::phase::RuntimePhase;
use maestro::plugin::Resume;
use maestro_e2e::engine::{Harness, harness};
use proptest::prelude::*;

const PIECE: &str = r#"
name: loop
initial_movement: work
max_movements: 6
movements:
  - name: work
    instructions: Work, then hand over to review.
    tools: [complete, echo, RequestTool]
    rules:
      - condition: Ready for review.
        next: review
  - name: review
    instructions: Review the work.
    tools: [complete, echo]
    rules:
      - condition: More work is needed.
        next: work
"#;

fn echo_turns(count: usize) -> String {
    let turn = "  - tool_calls:\n      - name: echo\n        arguments: { text: again }\n";
    turn.repeat(count)
}

const DONE_TURN: &str = "  - tool_calls:\n      - name: complete\n        arguments: { status: done, summary: Done. }\n";

async fn bursty(max_burst: u32) -> Harness {
    // max_burst echo calls, then one call to complete.
    let script = format!("turns:\n{}{DONE_TURN}", echo_turns(max_burst as usize));
    let limits = EngineLimits {
        max_burst,
        ..EngineLimits::default()
    };
    harness(PIECE, &script, "", limits).await
}

/// Checks that the job's log folds and that the session agrees with the job.
fn assert_session_matches(h: &Harness, job: &JobState, max_burst: u32) {
    let log = h.events(job);
    let session = job_session(&job.id, &log).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(session.tool_loop_burst_count(), job.burst(), "burst count");
    assert!(job.burst() <= max_burst, "{} > {max_burst}", job.burst());
    // The session kept with the job is the fold of its log.
    assert_eq!(job.phase_session(), Some(&session.without_history()));
    let label = session.phase_label();
    match job.status {
        JobStatus::WaitingHuman => {
            let expected = job
                .wait
                .as_ref()
                .and_then(|wait| wait.reason)
                .map(WaitReason::waiting_kind)
                .expect("waiting_human has a reason");
            assert_eq!(label.phase, RuntimePhase::WaitingUser, "{label}");
            assert_eq!(label.waiting, Some(expected), "{label}");
        }
        JobStatus::WaitingSubtasks => {
            assert_eq!(label.phase, RuntimePhase::Running, "{label}");
            assert!(session.current_worker_id().is_some());
        }
        JobStatus::Completed | JobStatus::Aborted | JobStatus::Cancelled => {
            assert_eq!(label.phase, RuntimePhase::Done, "{label}")
        }
        JobStatus::Error => assert_eq!(label.phase, RuntimePhase::Error, "{label}"),
        JobStatus::Pending | JobStatus::Running => panic!("a run ended {}", job.status),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_call_that_reaches_the_burst_limit_waits_and_runs_once_approved() {
    let h = bursty(3).await;
    let mut job = h.job("Keep echoing");
    let result = h.run(&mut job, None).await;
    let PieceRunResult::WaitingHuman { reason, wait, .. } = &result else {
        panic!("the third call must wait for a go-ahead, got {result:?}");
    };
    assert_eq!(*reason, WaitReason::Input);
    assert_eq!(
        wait.request,
        WaitRequest::BurstConfirmation {
            tool: "echo".into(),
            arguments: r#"{"text":"again"}"#.into(),
            calls: 3
        }
    );
    // Two calls ran; the third waits unrun.
    assert_eq!(h.tool_answers_seen().len(), 2);
    assert_eq!(job.asks, 0, "a burst confirmation is not a question");
    assert_session_matches(&h, &job, 3);

    let result = h.run(&mut job, Some(Resume::Approved)).await;
    assert_eq!(result.status(), JobStatus::Completed, "{result:?}");
    let answers = h.tool_answers_seen();
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(_, content, error)| content == "again" && !error)
    );
    assert_session_matches(&h, &job, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_or_a_reply_reaches_the_model_and_the_call_does_not_run() {
    for (resume, said) in [
        (Resume::Denied("that is enough".into()), "that is enough"),
        (
            Resume::Answered("try the archive".into()),
            "try the archive",
        ),
    ] {
        let h = bursty(2).await;
        let mut job = h.job("Keep echoing");
        let result = h.run(&mut job, None).await;
        assert_eq!(result.status(), JobStatus::WaitingHuman);
        // The model reads the human's word and goes on: its next turn completes.
        let result = h.run(&mut job, Some(resume)).await;
        assert_eq!(result.status(), JobStatus::Completed, "{result:?}");
        let answers = h.tool_answers_seen();
        let (_, note, is_error) = &answers[1];
        assert!(note.contains("Not run") && note.contains(said), "{note}");
        assert!(is_error);
        assert_session_matches(&h, &job, 2);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_burst_ends_the_job_with_the_burst_guard() {
    let h = bursty(2).await;
    let mut job = h.job("Keep echoing");
    h.run(&mut job, None).await;
    let result = h.run(&mut job, Some(Resume::Expired)).await;
    assert!(
        matches!(
            result,
            PieceRunResult::Aborted {
                guard: Some(Guard::BurstLimit),
                ..
            }
        ),
        "{result:?}"
    );
    assert_session_matches(&h, &job, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_login_the_wait_does_not_take_is_refused_and_leaves_no_trace() {
    let h = bursty(2).await;
    let mut job = h.job("Keep echoing");
    h.run(&mut job, None).await;
    // A burst confirmation refuses a login; the log stays as it was.
    let before = h.events(&job).len();
    let refused = h
        .engine
        .run(
            &mut job,
            Some(Resume::LoggedIn("sid=secret".into()).into()),
            &h.observer,
            &h.cancel,
        )
        .await;
    assert!(refused.is_err());
    assert_eq!(h.events(&job).len(), before);
    let log = serde_json::to_string(&h.events(&job)).unwrap();
    assert!(!log.contains("secret"));
}

/// One tool call (or text) the scripted model makes.
#[derive(Debug, Clone)]
enum Act {
    Echo,
    Ask,
    RequestTool,
    Transition(&'static str),
    Done,
    Unknown,
    BadJson,
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        4 => Just(Act::Echo),
        1 => Just(Act::Ask),
        1 => Just(Act::RequestTool),
        1 => Just(Act::Transition("review")),
        1 => Just(Act::Transition("work")),
        1 => Just(Act::Done),
        1 => Just(Act::Unknown),
        1 => Just(Act::BadJson),
    ]
}

fn yaml_of(act: &Act) -> String {
    let call = |name: &str, arguments: &str| {
        format!("      - name: {name}\n        arguments: {arguments}\n")
    };
    match act {
        Act::Echo => call("echo", "{ text: hi }"),
        Act::Ask => call("complete", "{ status: needs_user_input, question: Which? }"),
        Act::RequestTool => call(
            "RequestTool",
            "{ tool: Deploy, reason: ship, arguments: { env: prod } }",
        ),
        Act::Transition(next) => call("transition", &format!("{{ next: {next} }}")),
        Act::Done => call("complete", "{ status: done, summary: Done. }"),
        Act::Unknown => call("nope", "{}"),
        Act::BadJson => "      - name: echo\n        raw_arguments: \"{not json\"\n".to_owned(),
    }
}

fn script(turns: &[Vec<Act>]) -> String {
    let mut text = String::from("turns:\n");
    for turn in turns {
        if turn.is_empty() {
            text.push_str("  - text: Thinking.\n");
            continue;
        }
        text.push_str("  - tool_calls:\n");
        for act in turn {
            text.push_str(&yaml_of(act));
        }
    }
    text
}

/// A human's answer that fits the wait, chosen by `pick`.
fn answer_for(request: &WaitRequest, pick: u8) -> Resume {
    let choices = match request {
        WaitRequest::Question { .. } => vec![Resume::Answered("Paris".into()), Resume::Expired],
        WaitRequest::ToolApproval { .. } => vec![
            Resume::Approved,
            Resume::Denied("no".into()),
            Resume::Expired,
        ],
        WaitRequest::BurstConfirmation { .. } => vec![
            Resume::Approved,
            Resume::Denied("stop".into()),
            Resume::Answered("go on".into()),
            Resume::Expired,
        ],
        WaitRequest::BrowserLogin { .. } => vec![Resume::LoggedIn("s".into()), Resume::Expired],
        _ => vec![Resume::Expired],
    };
    choices[pick as usize % choices.len()].clone()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the model does and whatever the human answers, every run's log folds without a
    /// refused event into the phase the job's status says, with the engine's burst count.
    #[test]
    fn every_job_log_folds_into_the_session_its_status_says(
        turns in prop::collection::vec(prop::collection::vec(act(), 0..4), 1..12),
        answers in prop::collection::vec(any::<u8>(), 1..16),
        max_burst in 2u32..6,
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let limits = EngineLimits { max_burst, ..EngineLimits::default() };
            let h = harness(PIECE, &script(&turns), "", limits).await;
            let mut job = h.job("Do the work");
            let mut resume = None;
            for pick in answers.iter().cycle().take(24) {
                h.run(&mut job, resume.take()).await;
                assert_session_matches(&h, &job, max_burst);
                let Some(wait) = job.wait.as_ref() else { break };
                resume = Some(answer_for(&wait.request, *pick));
            }
            // The session the job kept through every run is the fold of the whole log.
            let log: Vec<JobEvent> = h.events(&job);
            assert_eq!(
                job.phase_session(),
                Some(&job_session(&job.id, &log).unwrap().without_history())
            );
        });
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_keeps_the_burst_limit_it_started_with() {
    // Four echo turns, then complete: with a limit of 2 the job waits at the 2nd and 4th call.
    let script = format!("turns:\n{}{DONE_TURN}", echo_turns(4));
    let strict = EngineLimits {
        max_burst: 2,
        ..EngineLimits::default()
    };
    let started = harness(PIECE, &script, "", strict).await;
    let mut job = started.job("Keep echoing");
    started.run(&mut job, None).await;
    assert_eq!(job.phase_session().unwrap().max_burst(), 2);
    assert_eq!(job.status, JobStatus::WaitingHuman);

    // Resumed by an engine configured with a looser limit, the job still counts to 2.
    let loose = EngineLimits {
        max_burst: 10,
        ..EngineLimits::default()
    };
    let resumed = harness(PIECE, &script, "", loose).await;
    resumed.run(&mut job, Some(Resume::Approved)).await;
    assert_eq!(job.status, JobStatus::WaitingHuman, "{:?}", job.wait);
    assert!(matches!(
        job.wait.as_ref().map(|w| &w.request),
        Some(WaitRequest::BurstConfirmation { calls: 2, .. })
    ));
    let mut log = started.events(&job);
    log.extend(resumed.events(&job));
    let session = job_session(&job.id, &log).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(session.max_burst(), 2);
    assert_eq!(session.tool_loop_burst_count(), job.burst());
}
