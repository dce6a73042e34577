//! Property tests: random event sequences, half of them steered toward events the current session
//! can take (so that deep states are reached), checked against the module's invariants.

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::test_support::{decision, draft, skills};
use super::*;

/// Small id pools, so that random events often name the live worker, call or artifact.
const WORKERS: [&str; 2] = ["w1", "w2"];
const ARTIFACTS: [&str; 3] = ["a1", "a2", "a3"];
const CALLS: [&str; 2] = ["c1", "c2"];
const DECISIONS: [&str; 2] = ["d1", "d2"];

#[derive(Debug, Clone)]
enum Step {
    /// Any event at all, most of them refused.
    Random(RuntimeEvent),
    /// An event picked from what the session at hand is likely to accept.
    Steered(u8),
}

fn pick<'a>(pool: &[&'a str], n: u8) -> &'a str {
    pool[usize::from(n) % pool.len()]
}

fn arb_park() -> impl Strategy<Value = Park> {
    prop_oneof![
        Just(Park::Ask { question: None }),
        Just(Park::BrowserLogin { url: "u".into() }),
        any::<u8>().prop_map(|n| Park::ToolRequest {
            decision: decision(pick(&DECISIONS, n))
        }),
        any::<u8>().prop_map(|n| Park::Subtasks {
            worker_id: pick(&WORKERS, n).into(),
            subtask_ids: vec!["j1".into()],
        }),
    ]
}

fn arb_resume() -> impl Strategy<Value = Resume> {
    prop_oneof![
        Just(Resume::Answered { answer: "x".into() }),
        Just(Resume::Approved),
        Just(Resume::Denied { reason: None }),
        Just(Resume::LoggedIn {
            message: "ok".into()
        }),
        Just(Resume::SubtasksDone { results: vec![] }),
        Just(Resume::Expired),
    ]
}

fn start(n: u8) -> RuntimeEvent {
    let start = if n.is_multiple_of(4) {
        SkillStart::ChooseSkill {
            available_skills: skills(),
        }
    } else {
        SkillStart::InitialSkill {
            skill: "outline".into(),
            intake_prompt: "?".into(),
        }
    };
    let acceptance_mode = if n.is_multiple_of(3) {
        AcceptanceMode::Auto
    } else {
        AcceptanceMode::UserConfirmed
    };
    // Small limits make the burst limit reachable; 0 must be refused.
    let max_burst = [None, Some(0), Some(1), Some(2), Some(3)][usize::from(n / 12) % 5];
    RuntimeEvent::SessionStarted {
        session_id: "s".into(),
        start,
        acceptance_mode,
        max_burst,
    }
}

fn arb_event() -> impl Strategy<Value = RuntimeEvent> {
    let user = prop_oneof![
        any::<u8>().prop_map(start),
        any::<u8>().prop_map(|n| RuntimeEvent::SkillSelected {
            skill: pick(&["outline", "draft", "paint"], n).into(),
            intake_prompt: "?".into(),
        }),
        Just(RuntimeEvent::IntakeCompleted {
            slots: BTreeMap::new()
        }),
        Just(RuntimeEvent::UserConfirmed),
        Just(RuntimeEvent::UserDeclined { reason: None }),
        Just(RuntimeEvent::UserMessage { text: "m".into() }),
        any::<u8>().prop_map(|n| RuntimeEvent::UserAccepted {
            artifact_id: pick(&ARTIFACTS, n).into()
        }),
        any::<u8>().prop_map(|n| RuntimeEvent::UserRejected {
            artifact_id: pick(&ARTIFACTS, n).into(),
            reason: None,
        }),
        any::<(u8, bool)>().prop_map(|(n, says)| RuntimeEvent::UserRequestedRevision {
            artifact_id: pick(&ARTIFACTS, n).into(),
            instruction: says.then(|| "shorter".into()),
        }),
    ];
    let engine = prop_oneof![
        Just(RuntimeEvent::LoopToolCalled { tool: "t".into() }),
        any::<(u8, bool)>().prop_map(|(n, approval_required)| {
            RuntimeEvent::BoundaryToolCalled {
                decision: decision(pick(&DECISIONS, n)),
                approval_required,
            }
        }),
        any::<u8>().prop_map(|n| RuntimeEvent::WorkerStarted {
            worker_id: pick(&WORKERS, n).into()
        }),
        any::<(u8, bool)>().prop_map(|(n, none)| RuntimeEvent::WorkerAskedQuestions {
            worker_id: pick(&WORKERS, n).into(),
            questions: if none { vec![] } else { vec!["q".into()] },
        }),
        any::<(u8, u8, Option<u8>)>().prop_map(|(w, a, r)| RuntimeEvent::WorkerCompleted {
            worker_id: pick(&WORKERS, w).into(),
            artifact: Some(draft(pick(&ARTIFACTS, a), r.map(|r| pick(&ARTIFACTS, r)))),
            acceptance_mode: None,
        }),
        (any::<u8>(), arb_park()).prop_map(|(n, park)| RuntimeEvent::Parked {
            call_id: pick(&CALLS, n).into(),
            movement: "m".into(),
            park,
        }),
        (any::<u8>(), arb_resume()).prop_map(|(n, resume)| RuntimeEvent::Resumed {
            call_id: pick(&CALLS, n).into(),
            resume,
        }),
        prop_oneof![
            Just(FinishOutcome::Completed),
            Just(FinishOutcome::Aborted),
            Just(FinishOutcome::Cancelled),
        ]
        .prop_map(|outcome| RuntimeEvent::Finished {
            outcome,
            reason: None
        }),
        Just(RuntimeEvent::Failed {
            message: "f".into()
        }),
    ];
    prop_oneof![user, engine]
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => arb_event().prop_map(Step::Random),
        3 => any::<u8>().prop_map(Step::Steered),
    ]
}

/// An event the session is likely to accept; a few choices are deliberately wrong or terminal.
fn steered(s: &RuntimeSession, n: u8) -> RuntimeEvent {
    let artifact_id = format!("a{}", s.artifacts().len() + 1);
    let worker_id = format!("w{}", s.history().len());
    let resume_call = |resume| RuntimeEvent::Resumed {
        call_id: s
            .resume_context()
            .map_or("c1", |c| c.call_id.as_str())
            .into(),
        resume,
    };
    match n % 40 {
        0 => {
            return RuntimeEvent::Failed {
                message: "f".into(),
            };
        }
        1 => {
            return RuntimeEvent::Finished {
                outcome: FinishOutcome::Cancelled,
                reason: None,
            };
        }
        _ => {}
    }
    let user_or = |alternative| {
        if n.is_multiple_of(2) {
            RuntimeEvent::UserMessage { text: "m".into() }
        } else {
            alternative
        }
    };
    match s.waiting_reason() {
        Some(WaitingReason::SkillSelection { available_skills }) => RuntimeEvent::SkillSelected {
            skill: available_skills[usize::from(n) % available_skills.len()]
                .name
                .clone(),
            intake_prompt: "?".into(),
        },
        Some(WaitingReason::Intake { .. }) if n.is_multiple_of(2) => RuntimeEvent::UserConfirmed,
        Some(WaitingReason::Intake { .. }) => RuntimeEvent::IntakeCompleted {
            slots: BTreeMap::from([(format!("k{n}"), "v".into())]),
        },
        Some(WaitingReason::Input { .. }) if s.resume_context().is_some() => {
            resume_call(Resume::Answered { answer: "x".into() })
        }
        Some(WaitingReason::Input { .. } | WaitingReason::Revision { .. }) => {
            user_or(RuntimeEvent::UserConfirmed)
        }
        Some(WaitingReason::ApproveStep { .. }) if s.resume_context().is_some() => {
            resume_call(if n.is_multiple_of(2) {
                Resume::Approved
            } else {
                Resume::Denied { reason: None }
            })
        }
        Some(WaitingReason::ApproveStep { .. }) if n.is_multiple_of(3) => {
            RuntimeEvent::UserDeclined { reason: None }
        }
        Some(WaitingReason::ApproveStep { .. }) => RuntimeEvent::UserConfirmed,
        Some(WaitingReason::ReviewArtifact { artifact_id }) => {
            let artifact_id = artifact_id.clone();
            match n % 4 {
                0 | 1 => RuntimeEvent::UserAccepted { artifact_id },
                2 => RuntimeEvent::UserRejected {
                    artifact_id,
                    reason: None,
                },
                _ => RuntimeEvent::UserRequestedRevision {
                    artifact_id,
                    instruction: (n % 8 == 3).then(|| "shorter".into()),
                },
            }
        }
        Some(WaitingReason::WorkerQuestions { .. }) => RuntimeEvent::UserMessage {
            text: "answer".into(),
        },
        Some(WaitingReason::BrowserLogin { .. }) => resume_call(Resume::LoggedIn {
            message: "ok".into(),
        }),
        None => match (s.phase(), s.current_worker_id(), s.resume_context()) {
            (RuntimePhase::Running, Some(_), Some(_)) => resume_call(if n.is_multiple_of(5) {
                Resume::Expired
            } else {
                Resume::SubtasksDone { results: vec![] }
            }),
            (RuntimePhase::Running, Some(current), None) => {
                let worker_id = current.to_owned();
                match n % 6 {
                    0 => RuntimeEvent::WorkerAskedQuestions {
                        worker_id,
                        questions: vec!["q".into()],
                    },
                    1 => RuntimeEvent::Parked {
                        call_id: format!("c{}", s.history().len()),
                        movement: "m".into(),
                        park: Park::Ask { question: None },
                    },
                    _ => {
                        let revises = s
                            .artifacts()
                            .iter()
                            .rev()
                            .find(|a| a.status() == ArtifactStatus::RevisionRequested)
                            .map(ArtifactRecord::id);
                        RuntimeEvent::WorkerCompleted {
                            worker_id,
                            artifact: (!n.is_multiple_of(7)).then(|| draft(&artifact_id, revises)),
                            // Now and then a movement overrides the session's acceptance.
                            acceptance_mode: match n % 5 {
                                0 => Some(AcceptanceMode::Auto),
                                1 => Some(AcceptanceMode::UserConfirmed),
                                _ => None,
                            },
                        }
                    }
                }
            }
            (RuntimePhase::Running, None, _) => running_agent_step(s, n, worker_id),
            _ => start(n),
        },
    }
}

fn running_agent_step(s: &RuntimeSession, n: u8, worker_id: String) -> RuntimeEvent {
    let call_id = format!("c{}", s.history().len());
    let park = |park| RuntimeEvent::Parked {
        call_id: call_id.clone(),
        movement: "m".into(),
        park,
    };
    match n % 16 {
        0..=5 => RuntimeEvent::LoopToolCalled { tool: "t".into() },
        6 => RuntimeEvent::BoundaryToolCalled {
            decision: decision(&format!("d{}", s.history().len())),
            approval_required: n.is_multiple_of(2),
        },
        7..=9 => RuntimeEvent::WorkerStarted { worker_id },
        10 => park(Park::Ask { question: None }),
        11 => park(Park::BrowserLogin { url: "u".into() }),
        12 => park(Park::ToolRequest {
            decision: decision(&format!("d{}", s.history().len())),
        }),
        13 => park(Park::Subtasks {
            worker_id,
            subtask_ids: vec!["j1".into()],
        }),
        14 => RuntimeEvent::UserMessage { text: "m".into() },
        _ => RuntimeEvent::Finished {
            outcome: FinishOutcome::Completed,
            reason: None,
        },
    }
}

/// One step of a walk: the session before, the event, and what came of it.
struct Applied {
    before: RuntimeSession,
    event: RuntimeEvent,
    result: Result<RuntimeSession, TransitionError>,
}

fn walk(steps: Vec<Step>) -> (Vec<Applied>, RuntimeSession) {
    let mut session = RuntimeSession::new();
    let mut trace = Vec::with_capacity(steps.len());
    for step in steps {
        let event = match step {
            Step::Random(event) => event,
            Step::Steered(n) => steered(&session, n),
        };
        let result = apply_event(&session, event.clone());
        let before = match &result {
            Ok(next) => std::mem::replace(&mut session, next.clone()),
            Err(_) => session.clone(),
        };
        trace.push(Applied {
            before,
            event,
            result,
        });
    }
    (trace, session)
}

fn walks() -> impl Strategy<Value = Vec<Step>> {
    vec(arb_step(), 0..120)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn done_and_error_are_absorbing(steps in walks()) {
        let (trace, _) = walk(steps);
        for step in &trace {
            if step.before.is_terminal() {
                let err = step.result.as_ref().expect_err("a terminal session took an event");
                prop_assert_eq!(&err.violation, &Violation::SessionEnded);
            }
        }
    }

    #[test]
    fn waiting_user_always_has_a_reason_and_no_other_phase_has_one(steps in walks()) {
        let (trace, _) = walk(steps);
        for after in trace.iter().filter_map(|step| step.result.as_ref().ok()) {
            prop_assert_eq!(
                after.phase() == RuntimePhase::WaitingUser,
                after.waiting_reason().is_some()
            );
        }
    }

    #[test]
    fn the_burst_count_never_exceeds_max_burst(steps in walks()) {
        let (trace, _) = walk(steps);
        for after in trace.iter().filter_map(|step| step.result.as_ref().ok()) {
            prop_assert!(after.tool_loop_burst_count() <= after.max_burst());
        }
    }

    #[test]
    fn no_unaccepted_artifact_is_ever_visible_downstream(steps in walks()) {
        let (trace, _) = walk(steps);
        for after in trace.iter().filter_map(|step| step.result.as_ref().ok()) {
            let facts: BTreeSet<_> = after.facts().iter().map(|f| f.id().to_owned()).collect();
            let accepted: BTreeSet<_> = after
                .artifacts()
                .iter()
                .filter(|a| a.status() == ArtifactStatus::Accepted)
                .map(|a| a.id().to_owned())
                .collect();
            prop_assert_eq!(facts, accepted);
            for record in after.artifacts() {
                let is_fact = Fact::try_from(record.clone()).is_ok();
                prop_assert_eq!(is_fact, record.status() == ArtifactStatus::Accepted);
            }
        }
    }

    #[test]
    fn folding_the_same_log_twice_gives_the_same_session(steps in walks()) {
        let (_, session) = walk(steps);
        let once = fold(session.history().to_vec());
        let twice = fold(session.history().to_vec());
        prop_assert_eq!(&once, &twice);
        prop_assert_eq!(once.as_ref(), Ok(&session));
    }

    #[test]
    fn a_refused_event_changes_nothing_and_names_phase_and_event(steps in walks()) {
        let (trace, _) = walk(steps);
        for step in &trace {
            let mut copy = step.before.clone();
            let in_place = copy.apply(step.event.clone());
            match &step.result {
                Ok(after) => {
                    prop_assert_eq!(&copy, after);
                    prop_assert_eq!(after.history().len(), step.before.history().len() + 1);
                }
                Err(err) => {
                    prop_assert_eq!(&copy, &step.before);
                    prop_assert_eq!(in_place.as_ref(), Err(err));
                    prop_assert_eq!(err.event, step.event.kind());
                    prop_assert_eq!(err.phase, step.before.phase_label());
                    let message = err.to_string();
                    prop_assert!(message.contains(step.event.kind().as_str()), "{}", message);
                    prop_assert!(message.contains(&step.before.phase_label().to_string()));
                }
            }
        }
    }

    #[test]
    fn every_reachable_session_keeps_the_stored_invariants(steps in walks()) {
        let (trace, _) = walk(steps);
        for after in trace.iter().filter_map(|step| step.result.as_ref().ok()) {
            prop_assert_eq!(after.check_invariants(), Ok(()));
        }
    }
}

/// Guards against vacuous properties: the walks above must reach the states they claim to test.
#[test]
fn walks_reach_every_phase_reason_and_verdict() {
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    for _ in 0..300 {
        let steps = walks().new_tree(&mut runner).unwrap().current();
        let (trace, _) = walk(steps);
        for after in trace.iter().filter_map(|step| step.result.as_ref().ok()) {
            seen.insert(after.phase_label().to_string());
            for artifact in after.artifacts() {
                seen.insert(format!("artifact {}", artifact.status()));
            }
            if after.tool_loop_burst_count() == after.max_burst() {
                seen.insert("burst limit".into());
            }
            if let Some(context) = after.resume_context() {
                seen.insert(format!("parked {}", context.parked));
            }
        }
    }
    let expected = [
        "running",
        "done",
        "error",
        "waiting_user/skill_selection",
        "waiting_user/intake",
        "waiting_user/input",
        "waiting_user/approve_step",
        "waiting_user/review_artifact",
        "waiting_user/worker_questions",
        "waiting_user/revision",
        "waiting_user/browser_login",
        "artifact under_review",
        "artifact accepted",
        "artifact rejected",
        "artifact revision_requested",
        "burst limit",
        "parked ask",
        "parked browser_login",
        "parked tool_request",
        "parked subtasks",
    ];
    let missing: Vec<_> = expected.iter().filter(|e| !seen.contains(**e)).collect();
    assert!(missing.is_empty(), "never reached: {missing:?}");
}
