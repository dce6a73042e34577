//! Sessions, events and errors of the phase machine survive a JSON round
//! trip, and loading a stored session re-checks its invariants.

use std::collections::BTreeMap;

use maestro::phase::*;

fn log() -> Vec<RuntimeEvent> {
    vec![
        RuntimeEvent::SessionStarted {
            session_id: "s1".into(),
            start: SkillStart::ChooseSkill {
                available_skills: vec![SkillIndexEntry {
                    name: "outline".into(),
                    description: "d".into(),
                }],
            },
            acceptance_mode: AcceptanceMode::UserConfirmed,
            max_burst: Some(5),
        },
        RuntimeEvent::SkillSelected {
            skill: "outline".into(),
            intake_prompt: "?".into(),
        },
        RuntimeEvent::IntakeCompleted {
            slots: BTreeMap::from([("topic".into(), "rivers".into())]),
        },
        RuntimeEvent::LoopToolCalled { tool: "t".into() },
        RuntimeEvent::Parked {
            call_id: "c1".into(),
            movement: "write".into(),
            park: Park::ToolRequest {
                decision: MainAgentDecision {
                    decision_id: "d1".into(),
                    tool: "fetch".into(),
                    arguments: "{}".into(),
                },
            },
        },
        RuntimeEvent::Resumed {
            call_id: "c1".into(),
            resume: Resume::Approved,
        },
        RuntimeEvent::WorkerStarted {
            worker_id: "w1".into(),
        },
        RuntimeEvent::WorkerCompleted {
            worker_id: "w1".into(),
            artifact: Some(ArtifactDraft {
                id: "a1".into(),
                title: "t".into(),
                kind: "report".into(),
                media_type: "text/markdown".into(),
                content: "c".into(),
                revises: None,
            }),
            acceptance_mode: Some(AcceptanceMode::UserConfirmed),
        },
        RuntimeEvent::UserAccepted {
            artifact_id: "a1".into(),
        },
        RuntimeEvent::BoundaryToolCalled {
            decision: MainAgentDecision {
                decision_id: "d2".into(),
                tool: "run_worker".into(),
                arguments: "{}".into(),
            },
            approval_required: true,
        },
    ]
}

#[test]
fn a_session_round_trips_and_reads_as_a_flat_record() {
    let session = fold(log()).unwrap();
    let json = serde_json::to_value(&session).unwrap();
    println!("{}", serde_json::to_string_pretty(&json).unwrap());
    assert_eq!(json["phase"], "waiting_user");
    assert_eq!(json["waiting_reason"]["kind"], "approve_step");
    assert_eq!(json["history"][5]["type"], "resumed");
    assert_eq!(json["history"][5]["resume"]["kind"], "approved");
    let back: RuntimeSession = serde_json::from_value(json).unwrap();
    assert_eq!(back, session);
}

#[test]
fn events_round_trip_one_by_one() {
    let mut events = log();
    events.push(RuntimeEvent::UserConfirmed);
    events.push(RuntimeEvent::Finished {
        outcome: FinishOutcome::Cancelled,
        reason: None,
    });
    for event in events {
        let text = serde_json::to_string(&event).unwrap();
        let back: RuntimeEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, event, "{text}");
    }
    assert_eq!(
        serde_json::to_string(&RuntimeEvent::UserConfirmed).unwrap(),
        r#"{"type":"user_confirmed"}"#
    );
}

#[test]
fn loading_refuses_a_session_that_breaks_an_invariant() {
    let session = fold(log()).unwrap();
    let mut json = serde_json::to_value(&session).unwrap();
    json.as_object_mut().unwrap().remove("waiting_reason");
    let err = serde_json::from_value::<RuntimeSession>(json).unwrap_err();
    assert!(err.to_string().contains("breaks an invariant"), "{err}");
}

#[test]
fn facts_and_errors_round_trip_and_a_fact_must_be_accepted() {
    let session = fold(log()).unwrap();
    let fact = &session.facts()[0];
    let mut json = serde_json::to_value(fact).unwrap();
    assert_eq!(serde_json::from_value::<Fact>(json.clone()).unwrap(), *fact);
    json["status"] = "under_review".into();
    let err = serde_json::from_value::<Fact>(json).unwrap_err();
    assert!(
        err.to_string().contains("only an accepted artifact"),
        "{err}"
    );

    let err = apply_event(&session, RuntimeEvent::LoopToolCalled { tool: "t".into() }).unwrap_err();
    let text = serde_json::to_string(&err).unwrap();
    assert_eq!(serde_json::from_str::<TransitionError>(&text).unwrap(), err);
}
