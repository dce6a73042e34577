//! Artifacts handed in by a job's own tool (`HandIn`, a `maestro:tool@0.2.0` component) beside
//! `maestro:tool@0.1.0` components in the same job: reviewed per the piece's acceptance (or the
//! movement's), and only accepted ones shown to later movements as facts.

use maestro::engine::{
    Answer, EngineAnswer, EngineLimits, Guard, HumanVerdict, JobEvent, JobStatus, PieceRunResult,
    WaitReason, WaitRequest, job_session,
};
use maestro::phase::{ArtifactStatus, RuntimePhase};
use maestro::plugin::{Resume, WitVersion};
use maestro_e2e::engine::{Harness, harness};

fn piece(acceptance: &str, movement_acceptance: &str) -> String {
    format!(
        r#"
name: write
initial_movement: draft
max_movements: 3
acceptance: {acceptance}
movements:
  - name: draft
    instructions: Echo, then hand in the report.
    tools: [echo, HandIn]
    {movement_acceptance}
    rules:
      - condition: Handed in.
        next: publish
  - name: publish
    instructions: Publish what was accepted.
    tools: [complete]
"#
    )
}

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: echo
        arguments: { text: "warming up" }
      - name: HandIn
        arguments: { kind: report, title: "Q3", body: "Revenue rose 4 %." }
  - tool_calls:
      - name: transition
        arguments: { next: publish }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "published" }
"#;

fn review(verdict: HumanVerdict) -> Option<Answer> {
    Some(Answer::Engine(EngineAnswer::Review {
        artifact: None,
        verdict,
    }))
}

/// The system prompt of the `publish` movement, as the model got it.
fn publish_prompt(h: &Harness) -> String {
    h.model
        .requests()
        .into_iter()
        .find(|request| request.system.contains("Current movement: `publish`"))
        .map(|request| request.system)
        .expect("the publish movement asked the model")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_in_waits_for_review_and_only_the_accepted_report_is_a_fact() {
    let h = harness(
        &piece("user_confirmed", ""),
        SCRIPT,
        "",
        EngineLimits::default(),
    )
    .await;
    // The 0.1.0 and 0.2.0 components serve one job side by side.
    let catalog = h.engine.catalog();
    assert_eq!(
        catalog.plugin_for("echo").unwrap().wit_version(),
        WitVersion::V0_1_0
    );
    assert_eq!(
        catalog.plugin_for("HandIn").unwrap().wit_version(),
        WitVersion::V0_2_0
    );

    let mut job = h.job("Write the Q3 report");
    let parked = h.run(&mut job, None).await;
    let PieceRunResult::WaitingHuman { reason, wait, .. } = &parked else {
        panic!("the hand-in waits for a review, got {parked:?}");
    };
    assert_eq!(*reason, WaitReason::ReviewArtifact);
    let WaitRequest::ArtifactReview {
        artifact_id,
        title,
        media_type,
        ..
    } = &wait.request
    else {
        panic!("{wait:?}");
    };
    assert_eq!(
        (title.as_str(), media_type.as_str()),
        ("Q3", "text/markdown")
    );
    let artifact_id = artifact_id.clone();
    // The echo (0.1.0) ran before the hand-in (0.2.0) parked.
    let echoed = h.events(&job).into_iter().any(|event| {
        matches!(event, JobEvent::ToolAnswered { tool, content, is_error: false, .. }
            if tool == "echo" && content == "warming up")
    });
    assert!(echoed, "{:?}", h.events(&job));
    let session = job.phase_session().unwrap();
    assert!(session.facts().is_empty());

    let done = h.answer(&mut job, review(HumanVerdict::Accept)).await;
    assert_eq!(done.status(), JobStatus::Completed, "{done:?}");
    let prompt = publish_prompt(&h);
    assert!(
        prompt.contains(&artifact_id) && prompt.contains("Revenue rose 4 %."),
        "{prompt}"
    );
    // The tool told the model the verdict.
    let verdict = h
        .model
        .requests()
        .iter()
        .flat_map(|request| request.messages.clone())
        .find_map(|message| match message {
            maestro::llm::Message::Tool { name, content, .. } if name == "HandIn" => Some(content),
            _ => None,
        })
        .expect("HandIn answered");
    assert!(verdict.contains(r#""status":"accepted""#), "{verdict}");
    let session = job_session(&job.id, &h.events(&job)).unwrap();
    assert_eq!(
        session.artifact(&artifact_id).unwrap().status(),
        ArtifactStatus::Accepted
    );
    assert_eq!(job.phase_session(), Some(&session.without_history()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_report_never_reaches_a_later_movement() {
    let h = harness(
        &piece("user_confirmed", ""),
        SCRIPT,
        "",
        EngineLimits::default(),
    )
    .await;
    let mut job = h.job("Write the Q3 report");
    let parked = h.run(&mut job, None).await;
    let PieceRunResult::WaitingHuman { wait, .. } = parked else {
        panic!("{parked:?}");
    };
    let WaitRequest::ArtifactReview { artifact_id, .. } = wait.request else {
        panic!("{wait:?}");
    };
    let refused = h
        .engine
        .run(
            &mut job.clone(),
            review(HumanVerdict::Reject { reason: " ".into() }),
            &h.observer,
            &h.cancel,
        )
        .await;
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("a rejection needs a reason"),
        "a rejection without a reason is refused"
    );
    let done = h
        .answer(
            &mut job,
            review(HumanVerdict::Reject {
                reason: "wrong quarter".into(),
            }),
        )
        .await;
    assert_eq!(done.status(), JobStatus::Completed);
    let prompt = publish_prompt(&h);
    assert!(!prompt.contains(&artifact_id), "{prompt}");
    assert!(!prompt.contains("Revenue rose"), "{prompt}");
    assert!(!prompt.contains("Facts"), "{prompt}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_movement_that_accepts_automatically_goes_straight_on() {
    // The piece wants reviews; the movement says auto, and wins.
    let h = harness(
        &piece("user_confirmed", "acceptance: auto"),
        SCRIPT,
        "",
        EngineLimits::default(),
    )
    .await;
    let mut job = h.job("Write the Q3 report");
    let done = h.run(&mut job, None).await;
    assert_eq!(
        done.status(),
        JobStatus::Completed,
        "no human was asked: {done:?}"
    );
    let session = job.phase_session().unwrap();
    assert_eq!(session.facts().len(), 1);
    assert!(publish_prompt(&h).contains("Revenue rose 4 %."));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_review_nobody_gives_in_time_ends_the_job_and_makes_no_fact() {
    let h = harness(
        &piece("user_confirmed", ""),
        SCRIPT,
        "",
        EngineLimits::default(),
    )
    .await;
    let mut job = h.job("Write the Q3 report");
    h.run(&mut job, None).await;
    let result = h.run(&mut job, Some(Resume::Expired)).await;
    assert!(
        matches!(
            result,
            PieceRunResult::Aborted {
                guard: Some(Guard::WaitExpired),
                ..
            }
        ),
        "{result:?}"
    );
    let session = job.phase_session().unwrap();
    assert_eq!(session.phase(), RuntimePhase::Done);
    assert!(session.facts().is_empty());
    assert_eq!(session.artifacts()[0].status(), ArtifactStatus::UnderReview);
}
