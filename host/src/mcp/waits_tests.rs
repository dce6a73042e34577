//! Tests of `waits`: each wait as the client sees it, and each reply as the job gets it.

use serde_json::json;

use super::*;
use crate::engine::{IntakeField, ResumePoint, Wait};
use crate::phase::SkillIndexEntry;

fn waiting(request: WaitRequest) -> JobState {
    let mut job = JobState::new("job-1".into(), "chat", "talk", "hello".into());
    job.wait = Some(Wait {
        id: 3,
        reason: None,
        request,
        resume: ResumePoint::EnterMovement,
    });
    job
}

fn pages() -> JobPages {
    JobPages::new(Some("http://127.0.0.1:1".into()), "job-1")
}

fn form_of(request: WaitRequest) -> JobQuestion {
    match shown(&waiting(request), &pages()) {
        Some(Shown::Form(question)) => question,
        other => panic!("not a form: {other:?}"),
    }
}

fn approval() -> WaitRequest {
    WaitRequest::ToolApproval {
        tool: "RotateKey".into(),
        reason: "Rotate the staging key.".into(),
        arguments: r#"{"service":"staging"}"#.into(),
    }
}

#[test]
fn a_tool_approval_shows_the_exact_call_and_only_approve_approves() {
    let question = form_of(approval());
    assert_eq!(question.wait, 3);
    assert!(
        question.message.contains("RotateKey"),
        "{}",
        question.message
    );
    assert!(question.message.contains(r#"{"service":"staging"}"#));
    let accept = ElicitationAction::Accept;
    let reply = |content: Value| question.reply(&accept, Some(&content));
    assert_eq!(
        reply(json!({"decision": "approve"})),
        Ok(JobReply::Answer(Resume::Approved.into()))
    );
    assert_eq!(
        reply(json!({"decision": "deny", "reason": "not today"})),
        Ok(JobReply::Answer(Resume::Denied("not today".into()).into()))
    );
    let missing = reply(json!({})).unwrap_err();
    assert!(missing.contains("`decision`"), "{missing}");
    assert!(matches!(
        question.reply(&ElicitationAction::Decline, None),
        Ok(JobReply::Answer(Answer::Resume(Resume::Denied(_))))
    ));
    assert_eq!(
        question.reply(&ElicitationAction::Cancel, None),
        Ok(JobReply::Dismissed)
    );
}

#[test]
fn every_wait_a_person_answers_is_a_form_whose_reply_the_wait_accepts() {
    let cases = [
        (
            WaitRequest::Question {
                question: "Which city?".into(),
            },
            json!({"answer": "Lisbon"}),
        ),
        (
            WaitRequest::WorkerQuestion {
                worker: "job-2".into(),
                question: "Which year?".into(),
                worker_wait: 1,
            },
            json!({"answer": "2026"}),
        ),
        (approval(), json!({"decision": "approve"})),
        (
            WaitRequest::BurstConfirmation {
                tool: "echo".into(),
                arguments: "{}".into(),
                calls: 20,
            },
            json!({"decision": "approve", "reason": "fewer calls, please"}),
        ),
        (
            WaitRequest::SkillSelection {
                pieces: vec![SkillIndexEntry {
                    name: "chat".into(),
                    description: "Talk.".into(),
                }],
            },
            json!({"piece": "chat"}),
        ),
        (
            WaitRequest::Intake {
                prompt: "Tell us more.".into(),
                fields: vec![IntakeField {
                    name: "audience".into(),
                    description: "Who reads it".into(),
                    required: true,
                    value: None,
                }],
            },
            json!({"audience": "operators"}),
        ),
        (
            WaitRequest::ArtifactReview {
                artifact_id: "a1".into(),
                title: "Report".into(),
                artifact_kind: "report".into(),
                media_type: "text/markdown".into(),
                revises: None,
                worker: None,
                worker_wait: None,
            },
            json!({"verdict": "reject", "note": "cite the sources"}),
        ),
        (
            WaitRequest::RevisionInstruction {
                artifact_id: "a1".into(),
                title: "Report".into(),
                worker: None,
                worker_wait: None,
            },
            json!({"instruction": "shorter"}),
        ),
    ];
    for (request, content) in cases {
        let question = form_of(request.clone());
        let Ok(JobReply::Answer(answer)) =
            question.reply(&ElicitationAction::Accept, Some(&content))
        else {
            panic!("{request:?}: no answer from {content}");
        };
        assert_eq!(request.accepts(&answer), Ok(()), "{request:?}: {answer:?}");
        // The form the client shows asks for what the reply gives.
        let schema = serde_json::to_value(&question.schema).unwrap();
        for field in content.as_object().unwrap().keys() {
            assert!(
                schema["properties"].get(field).is_some(),
                "{field} in {schema}"
            );
        }
    }
}

#[test]
fn a_reply_that_does_not_fit_names_its_field_and_a_decline_gives_up_a_question() {
    let review = form_of(WaitRequest::ArtifactReview {
        artifact_id: "a1".into(),
        title: "Report".into(),
        artifact_kind: "report".into(),
        media_type: "text/plain".into(),
        revises: None,
        worker: None,
        worker_wait: None,
    });
    let accept = ElicitationAction::Accept;
    let why = review
        .reply(&accept, Some(&json!({"verdict": "reject"})))
        .unwrap_err();
    assert!(why.contains("`note`"), "{why}");
    let why = review
        .reply(&accept, Some(&json!({"verdict": "maybe"})))
        .unwrap_err();
    assert!(why.contains("`verdict`"), "{why}");
    let choose = form_of(WaitRequest::SkillSelection {
        pieces: vec![SkillIndexEntry {
            name: "chat".into(),
            description: String::new(),
        }],
    });
    let why = choose
        .reply(&accept, Some(&json!({"piece": "delete-everything"})))
        .unwrap_err();
    assert!(why.contains("not offered"), "{why}");
    let question = form_of(WaitRequest::Question {
        question: "Which city?".into(),
    });
    assert!(matches!(
        question.reply(&ElicitationAction::Decline, None),
        Ok(JobReply::GiveUp(_))
    ));
}

#[test]
fn a_browser_login_is_a_link_to_the_jobs_card_in_the_inbox_never_a_form() {
    let login = waiting(WaitRequest::BrowserLogin {
        url: "https://example.test/login".into(),
        reason: "the site needs a login".into(),
    });
    let Some(Shown::Login(link)) = shown(&login, &pages()) else {
        panic!("a login over HTTP is a link");
    };
    assert_eq!(link.url, "http://127.0.0.1:1/#job-job-1");
    assert_eq!(link.wait, 3);
    assert_eq!(link.elicitation_id, "job-1/wait-3");
    assert!(
        link.message.contains("https://example.test/login"),
        "{link:?}"
    );
    // The session comes by the page: opening it answers nothing; declining gives the job up.
    assert_eq!(link.reply(&ElicitationAction::Accept), JobReply::Dismissed);
    assert_eq!(link.reply(&ElicitationAction::Cancel), JobReply::Dismissed);
    assert!(matches!(
        link.reply(&ElicitationAction::Decline),
        JobReply::GiveUp(_)
    ));
    // With no address to send the person to, it says where the job waits.
    let Some(Shown::Status(what)) = shown(&login, &JobPages::new(None, "job-1")) else {
        panic!("a login without an address is a status");
    };
    assert!(
        what.contains("https://example.test/login") && what.contains("job job-1"),
        "{what}"
    );
}

#[test]
fn a_wait_for_children_is_a_status_never_a_form() {
    for request in [
        WaitRequest::Subtasks {
            job_ids: vec!["job-2".into(), "job-3".into()],
        },
        WaitRequest::Worker {
            worker: "job-2".into(),
        },
    ] {
        let Some(Shown::Status(what)) = shown(&waiting(request), &pages()) else {
            panic!("a wait for children is not a form");
        };
        assert!(what.contains("job-2"), "{what}");
    }
    let running = JobState::new("job-1".into(), "chat", "talk", "hello".into());
    assert!(shown(&running, &pages()).is_none());
    assert_eq!(pages().to_string(), "http://127.0.0.1:1/jobs/job-1");
}
