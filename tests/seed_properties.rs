//! Random engine scripts and random human actions on real jobs (real components, a SQLite
//! store, the worker): answers of the wrong kind, to the wrong job, for an older wait, given
//! twice, verdicts on artifacts that were already judged. After every step, for every job of the
//! tree: its log folds into the session kept with it, the phase and waiting reason are what its
//! status says, the burst limit holds, and no artifact that was not accepted ever reached a model
//! or a parent as a fact.

use maestro::engine::{
    Answer, EngineAnswer, HumanVerdict, JobEvent, JobStatus, WaitReason, WaitRequest,
};
use maestro::phase::{ArtifactStatus, RuntimePhase};
use maestro::plugin::Resume;
use maestro::store::JobStore;
use maestro_e2e::world::World;
use proptest::prelude::*;

const PIECES: &[(&str, &str)] = &[
    (
        "loop.yaml",
        r#"
name: loop
description: Random work, handed in for review.
initial_movement: work
max_movements: 8
intake:
  prompt: What should happen?
  slots:
    - { name: topic, description: Anything. }
movements:
  - name: work
    instructions: Work.
    tools: [echo, HandIn, complete, RequestTool, RunWorker]
    workers: [helper]
    rules:
      - condition: More.
        next: more
  - name: more
    instructions: More, accepted as handed in.
    tools: [echo, HandIn, complete]
    acceptance: auto
    rules:
      - condition: Back.
        next: work
"#,
    ),
    (
        "helper.yaml",
        r#"
name: helper
description: A worker that asks, then hands in.
initial_movement: help
max_movements: 1
movements:
  - name: help
    instructions: Help.
    tools: [HandIn, complete]
"#,
    ),
];

/// The worker always plays this: it asks, hands in, drafts again when asked to, and ends.
const HELPER: &str = r#"
conversations:
  - input_contains: "help with it"
    turns:
      - tool_calls:
          - name: complete
            arguments: { status: needs_user_input, question: "What exactly?" }
      - tool_calls:
          - name: HandIn
            arguments: { kind: note, title: Help, body: "helper draft" }
      - when: { last_result_contains: revision_requested }
        tool_calls:
          - name: HandIn
            arguments: { kind: note, title: Help, body: "helper draft again" }
        otherwise: { tool_calls: [{ name: complete, arguments: { status: done, summary: helped } }] }
      - tool_calls: [{ name: complete, arguments: { status: done, summary: helped } }]
"#;

#[derive(Debug, Clone)]
enum Act {
    Echo,
    Ask,
    RequestTool,
    HandIn,
    RunWorker,
    Transition(&'static str),
    Done,
    Unknown,
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        3 => Just(Act::Echo),
        1 => Just(Act::Ask),
        1 => Just(Act::RequestTool),
        3 => Just(Act::HandIn),
        1 => Just(Act::RunWorker),
        1 => Just(Act::Transition("more")),
        1 => Just(Act::Transition("work")),
        1 => Just(Act::Done),
        1 => Just(Act::Unknown),
    ]
}

fn yaml_of(act: &Act, turn: usize) -> String {
    let call = |name: &str, arguments: &str| {
        format!("      - name: {name}\n        arguments: {arguments}\n")
    };
    match act {
        Act::Echo => call("echo", "{ text: hi }"),
        Act::Ask => call("complete", "{ status: needs_user_input, question: Which? }"),
        Act::RequestTool => call(
            "RequestTool",
            "{ tool: echo, reason: say, arguments: { text: approved } }",
        ),
        Act::HandIn => call(
            "HandIn",
            &format!("{{ kind: report, title: T{turn}, body: \"body of turn {turn}\" }}"),
        ),
        Act::RunWorker => call("RunWorker", "{ piece: helper, input: \"help with it\" }"),
        Act::Transition(next) => call("transition", &format!("{{ next: {next} }}")),
        Act::Done => call("complete", "{ status: done, summary: Done. }"),
        Act::Unknown => call("nope", "{}"),
    }
}

fn script(turns: &[Vec<Act>]) -> String {
    let mut text = String::from(HELPER);
    text.push_str("turns:\n");
    for (index, turn) in turns.iter().enumerate() {
        if turn.is_empty() {
            text.push_str("  - text: Thinking.\n");
            continue;
        }
        text.push_str("  - tool_calls:\n");
        for act in turn {
            text.push_str(&yaml_of(act, index));
        }
    }
    text
}

/// A human's action: an answer of any kind, for any job of the tree, naming the current wait,
/// an older one or none, sometimes given twice.
#[derive(Debug, Clone)]
struct Human {
    answer: u8,
    target: u8,
    wait: u8,
    twice: bool,
}

fn human() -> impl Strategy<Value = Human> {
    (any::<u8>(), any::<u8>(), any::<u8>(), any::<bool>()).prop_map(
        |(answer, target, wait, twice)| Human {
            answer,
            target,
            wait,
            twice,
        },
    )
}

/// What a human would answer to `request`, chosen by `pick`; `None` for a wait no human answers.
fn fitting(request: &WaitRequest, pick: u8) -> Option<Answer> {
    let review = |verdict| {
        Answer::Engine(EngineAnswer::Review {
            artifact: None,
            verdict,
        })
    };
    let choices: Vec<Answer> = match request {
        WaitRequest::SkillSelection { .. } => vec![answer_of(7)],
        WaitRequest::Intake { .. } => vec![
            answer_of(9),
            Answer::Engine(EngineAnswer::Intake {
                slots: Default::default(),
            }),
        ],
        WaitRequest::Question { .. } | WaitRequest::WorkerQuestion { .. } => vec![answer_of(0)],
        WaitRequest::ToolApproval { .. } => vec![answer_of(1), answer_of(2)],
        WaitRequest::BurstConfirmation { .. } => vec![answer_of(0), answer_of(1), answer_of(2)],
        WaitRequest::ArtifactReview { .. } => (3..=6).map(answer_of).collect(),
        WaitRequest::RevisionInstruction { .. } => vec![
            answer_of(6),
            review(HumanVerdict::Revise {
                instruction: Some("another".into()),
            }),
        ],
        WaitRequest::BrowserLogin { .. } => vec![answer_of(10)],
        WaitRequest::Subtasks { .. } | WaitRequest::Worker { .. } => return None,
    };
    Some(choices[pick as usize % choices.len()].clone())
}

fn answer_of(pick: u8) -> Answer {
    let review = |verdict| {
        Answer::Engine(EngineAnswer::Review {
            artifact: None,
            verdict,
        })
    };
    match pick % 12 {
        0 => Resume::Answered("yes".into()).into(),
        1 => Resume::Approved.into(),
        2 => Resume::Denied("no".into()).into(),
        3 => review(HumanVerdict::Accept),
        4 => review(HumanVerdict::Reject {
            reason: "not this".into(),
        }),
        5 => review(HumanVerdict::Revise { instruction: None }),
        6 => review(HumanVerdict::Revise {
            instruction: Some("more".into()),
        }),
        7 => Answer::Engine(EngineAnswer::Choose {
            piece: "loop".into(),
        }),
        8 => Answer::Engine(EngineAnswer::Choose {
            piece: "chat".into(),
        }),
        9 => Answer::Engine(EngineAnswer::Intake {
            slots: [("topic".to_owned(), "x".to_owned())].into(),
        }),
        10 => Resume::LoggedIn("s".into()).into(),
        _ => Answer::Engine(EngineAnswer::Intake {
            slots: [("colour".to_owned(), "red".to_owned())].into(),
        }),
    }
}

/// Every property the module promises, for every job of `root`'s tree.
fn check(world: &World, root: &str) {
    let tree = world.tree(root);
    let mut unaccepted = Vec::new();
    let mut accepted = Vec::new();
    for id in &tree {
        // Folds, and equals the session kept with the job.
        let session = world.session(id);
        let job = world.job(id);
        let label = session.phase_label();
        match world.status(id) {
            JobStatus::WaitingHuman => {
                let reason = job.wait.as_ref().and_then(|wait| wait.reason);
                assert_eq!(label.phase, RuntimePhase::WaitingUser, "{id}: {label}");
                assert_eq!(
                    label.waiting,
                    reason.map(WaitReason::waiting_kind),
                    "{id}: {label}"
                );
            }
            JobStatus::WaitingSubtasks => {
                assert_eq!(label.phase, RuntimePhase::Running, "{id}: {label}");
                assert!(session.current_worker_id().is_some(), "{id}: {label}");
            }
            JobStatus::Completed | JobStatus::Aborted | JobStatus::Cancelled => {
                assert_eq!(label.phase, RuntimePhase::Done, "{id}: {label}")
            }
            JobStatus::Error => assert_eq!(label.phase, RuntimePhase::Error, "{id}: {label}"),
            status @ (JobStatus::Pending | JobStatus::Running) => {
                panic!("{id} is {status} once everything settled")
            }
        }
        assert!(session.tool_loop_burst_count() <= session.max_burst());
        for artifact in session.artifacts() {
            if artifact.status() == ArtifactStatus::Accepted {
                accepted.push(artifact.id().to_owned());
            } else {
                unaccepted.push(artifact.id().to_owned());
            }
        }
    }
    // Nothing unaccepted downstream: no model was shown it as a fact…
    for request in world.model.requests() {
        for id in &unaccepted {
            if accepted.contains(id) {
                continue; // accepted in one session, as parent and worker agree
            }
            assert!(
                !request.system.contains(id.as_str()),
                "{id} is not accepted but a model saw it:\n{}",
                request.system
            );
        }
    }
    // … and no parent got it in a worker's or subtask's result.
    for id in &tree {
        for event in world.log(id) {
            if let JobEvent::ToolAnswered { tool, content, .. } = event
                && (tool == "RunWorker" || tool == "WaitSubTask")
            {
                for artifact in &unaccepted {
                    assert!(
                        accepted.contains(artifact) || !content.contains(artifact.as_str()),
                        "{artifact} reached a parent unaccepted: {content}"
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn no_event_sequence_breaks_the_session_or_leaks_an_unaccepted_artifact(
        turns in prop::collection::vec(prop::collection::vec(act(), 0..3), 2..18),
        humans in prop::collection::vec(human(), 1..16),
        choose_first in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let world = World::with_pieces(&script(&turns), "", PIECES).await;
            let root = world.start((!choose_first).then_some("loop"), "do it");
            world.settle().await;
            check(&world, &root);
            for human in &humans {
                // Mostly the job that waits for a human, now and then any job of the tree.
                let tree = world.tree(&root);
                let waiting: Vec<&String> = tree
                    .iter()
                    .filter(|id| world.status(id) == JobStatus::WaitingHuman)
                    .collect();
                let target = match waiting.len() {
                    0 => &tree[human.target as usize % tree.len()],
                    n if human.target % 4 != 0 => waiting[human.target as usize % n],
                    _ => &tree[human.target as usize % tree.len()],
                };
                let before = (world.status(target), world.job(target).wait);
                let wait = before.1.as_ref().map(|wait| wait.id);
                let named = match human.wait % 4 {
                    0 | 1 => wait,
                    2 => wait.map(|id| id.saturating_sub(1)),
                    _ => None,
                };
                // Mostly an answer that fits the wait, now and then any answer at all.
                let answer = match before.1.as_ref() {
                    Some(wait) if human.answer % 3 != 0 => {
                        fitting(&wait.request, human.answer / 3).unwrap_or_else(|| answer_of(human.answer))
                    }
                    _ => answer_of(human.answer),
                };
                let recorded = world.store.answer(target, &answer, named);
                if recorded.is_ok() && human.twice {
                    // The same answer again is never applied twice.
                    let again = world.store.answer(target, &answer, named);
                    prop_assert!(again.is_err(), "a second answer was recorded");
                }
                if recorded.is_err() {
                    // A refused answer changes nothing.
                    prop_assert_eq!(&(world.status(target), world.job(target).wait), &before);
                }
                world.settle().await;
                check(&world, &root);
                if world.status(&root).is_final() {
                    break;
                }
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}
