//! The seed's typical path (phase machine §6) in real jobs: real components, the shipped pieces
//! `commission`, `review` and their worker `report`, the scripted model, a SQLite store and the
//! worker that runs it all. After each step the phase and waiting reason are the phase
//! machine's, folded from the job's stored log, and equal to the session kept with the job.

use maestro::engine::{EngineAnswer, HumanVerdict, JobStatus, WaitRequest};
use maestro::phase::{ArtifactStatus, RuntimePhase, WaitingKind, WaitingReason};
use maestro::plugin::Resume;
use maestro::store::StoreError;
use maestro_e2e::world::World;

fn choose(piece: &str) -> EngineAnswer {
    EngineAnswer::Choose {
        piece: piece.into(),
    }
}

fn intake(pairs: &[(&str, &str)]) -> EngineAnswer {
    EngineAnswer::Intake {
        slots: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn review(verdict: HumanVerdict) -> EngineAnswer {
    EngineAnswer::Review {
        artifact: None,
        verdict,
    }
}

fn waiting(kind: WaitingKind) -> (RuntimePhase, Option<WaitingKind>) {
    (RuntimePhase::WaitingUser, Some(kind))
}

fn wrong_answer(result: Result<(), StoreError>) -> String {
    match result {
        Err(StoreError::WrongAnswer { message, .. }) => message,
        other => panic!("expected a wrong answer, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_walks_the_seeds_typical_path_through_real_components() {
    let world = World::new("commission.yaml", "").await;

    // idle → skill_selection: a job started without a piece waits for a human to choose one.
    let job = world.start(None, "I need a report for the council.");
    world.settle().await;
    assert_eq!(world.phase(&job), waiting(WaitingKind::SkillSelection));
    let Some(WaitingReason::SkillSelection { available_skills }) =
        world.session(&job).waiting_reason().cloned()
    else {
        panic!("skill selection lists the pieces")
    };
    let names: Vec<&str> = available_skills.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"commission") && names.contains(&"review"),
        "{names:?}"
    );
    assert!(available_skills.iter().all(|s| !s.description.is_empty()));
    assert_eq!(
        wrong_answer(world.try_answer(&job, choose("nope"))),
        format!(
            "piece `nope` is not among those offered: {}",
            names.join(", ")
        )
    );

    // skill_selection → intake: the piece's intake, with its fields.
    world.answer(&job, choose("commission")).await;
    assert_eq!(world.phase(&job), waiting(WaitingKind::Intake));
    assert_eq!(world.job(&job).piece, "commission");
    let message = wrong_answer(world.try_answer(&job, intake(&[("audience", "all")])));
    assert_eq!(
        message,
        "the intake needs a value for the required field: topic"
    );

    // intake → running → run_worker, which the piece wants approved: approve_step.
    world
        .answer(&job, intake(&[("topic", "Lisbon trams")]))
        .await;
    assert_eq!(world.phase(&job), waiting(WaitingKind::ApproveStep));
    let session = world.session(&job);
    assert_eq!(session.slots()["topic"], "Lisbon trams");
    assert_eq!(session.slots()["input"], "I need a report for the council.");
    let wait = world.job(&job).wait.unwrap();
    assert!(
        matches!(&wait.request, WaitRequest::ToolApproval { tool, reason, .. }
            if tool == "RunWorker" && reason.contains("piece `commission`")),
        "{wait:?}"
    );
    assert!(
        world.children(&job).is_empty(),
        "no worker before the approval"
    );

    // approved → the worker runs; it asks a question, which shows at the parent.
    world.answer(&job, Resume::Approved).await;
    let workers = world.children(&job);
    assert_eq!(workers.len(), 1, "{workers:?}");
    let worker = &workers[0];
    assert!(world.job(worker).reviewed_by_parent);
    assert_eq!(world.phase(&job), waiting(WaitingKind::WorkerQuestions));
    assert_eq!(
        world.session(&job).waiting_reason(),
        Some(&WaitingReason::WorkerQuestions {
            worker_id: worker.clone(),
            questions: vec!["Who will read the report on the Lisbon trams?".into()],
        })
    );
    assert_eq!(world.phase(worker), waiting(WaitingKind::Input));
    // The worker's question is answered at its parent, never past it.
    let message = wrong_answer(world.try_answer(worker, Resume::Answered("me".into())));
    assert!(message.contains("answered there"), "{message}");

    // answered → the worker goes on and hands in a draft: review_artifact at the parent.
    world
        .answer(&job, Resume::Answered("The city council".into()))
        .await;
    assert_eq!(world.phase(&job), waiting(WaitingKind::ReviewArtifact));
    let first = match world.session(&job).waiting_reason() {
        Some(WaitingReason::ReviewArtifact { artifact_id }) => artifact_id.clone(),
        other => panic!("{other:?}"),
    };
    let session = world.session(&job);
    let draft = session.artifact(&first).unwrap();
    assert_eq!(draft.status(), ArtifactStatus::UnderReview);
    assert_eq!(draft.produced_by(), worker.as_str());
    assert!(draft.content().contains("Five lines run"));
    assert!(
        session.facts().is_empty(),
        "a draft under review is no fact"
    );
    // The worker's answer reached it: its model saw it as the question's answer.
    let worker_log = serde_json::to_string(&world.log(worker)).unwrap();
    assert!(worker_log.contains("The city council"), "{worker_log}");

    // revision requested without an instruction: the job waits for one (revision).
    world
        .answer(&job, review(HumanVerdict::Revise { instruction: None }))
        .await;
    assert_eq!(world.phase(&job), waiting(WaitingKind::Revision));
    let message = wrong_answer(world.try_answer(&job, review(HumanVerdict::Accept)));
    assert!(message.contains("the review of artifact"), "{message}");

    // the instruction → revised: the worker drafts a second version, which revises the first.
    let instruction = HumanVerdict::Revise {
        instruction: Some("Name the lines.".into()),
    };
    world.answer(&job, review(instruction)).await;
    assert_eq!(world.phase(&job), waiting(WaitingKind::ReviewArtifact));
    let session = world.session(&job);
    let second = match session.waiting_reason() {
        Some(WaitingReason::ReviewArtifact { artifact_id }) => artifact_id.clone(),
        other => panic!("{other:?}"),
    };
    assert_ne!(second, first);
    assert_eq!(
        session.artifact(&second).unwrap().revises(),
        Some(first.as_str())
    );
    assert_eq!(
        session.artifact(&first).unwrap().status(),
        ArtifactStatus::RevisionRequested
    );

    // accepted → running: the worker ends, and a later movement cites the fact.
    world.answer(&job, review(HumanVerdict::Accept)).await;
    assert_eq!(world.status(worker), JobStatus::Completed);
    assert_eq!(
        world.status(&job),
        JobStatus::Completed,
        "{:?}",
        world.job(&job).result
    );
    assert_eq!(world.phase(&job), (RuntimePhase::Done, None));
    let session = world.session(&job);
    let facts = session.facts();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].id(), second);
    assert!(facts[0].content().contains("28E"));
    // The worker's own session agrees on every verdict.
    let worker_session = world.session(worker);
    assert_eq!(
        worker_session.artifact(&first).unwrap().status(),
        ArtifactStatus::RevisionRequested
    );
    assert_eq!(
        worker_session.artifact(&second).unwrap().status(),
        ArtifactStatus::Accepted
    );
    // Downstream, the cite movement read the accepted version, and nothing unaccepted.
    let cite = world
        .model
        .requests()
        .into_iter()
        .rev()
        .find(|request| request.system.contains("Current movement: `cite`"))
        .expect("the cite movement asked the model");
    assert!(
        cite.system.contains(&second) && cite.system.contains("28E"),
        "{}",
        cite.system
    );
    assert!(!cite.system.contains(&first), "{}", cite.system);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_artifact_is_never_a_fact() {
    let world = World::new(REJECT_SCRIPT, "").await;
    let job = world.start(Some("review"), "Tides");
    world.settle().await;
    // `review` asks for a human's review; its worker's draft waits at the parent.
    assert_eq!(world.phase(&job), waiting(WaitingKind::ReviewArtifact));
    world
        .answer(
            &job,
            review(HumanVerdict::Reject {
                reason: "too short".into(),
            }),
        )
        .await;
    assert_eq!(world.status(&job), JobStatus::Completed);
    let session = world.session(&job);
    assert!(session.facts().is_empty(), "a rejected artifact is no fact");
    assert_eq!(session.artifacts()[0].status(), ArtifactStatus::Rejected);
}

const REJECT_SCRIPT: &str = r#"
conversations:
  - input_contains: "Write a report on the tides"
    turns:
      - tool_calls:
          - name: HandIn
            arguments: { kind: report, title: Tides, body: "Two a day." }
      - tool_calls:
          - name: complete
            arguments: { status: done, summary: "reviewed" }
turns:
  - tool_calls:
      - name: RunWorker
        arguments: { piece: report, input: "Write a report on the tides." }
  - tool_calls:
      - name: transition
        arguments: { next: cite }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "done" }
"#;
