//! What a parked job waits for and why, and which answers answer it.
//!
//! Invariant: [`WaitRequest::accepts`] is the one check of an answer against its wait, down to
//! its fields (a piece that is offered, the intake's required fields, the artifact under
//! review): the engine applies no answer it refuses, and the store records none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::answer::{Answer, EngineAnswer, HumanVerdict};
use crate::phase::SkillIndexEntry;
use crate::plugin::Resume;

/// Why a `waiting_human` job waits (DESIGN §5, "wait reason").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    Input,
    BrowserLogin,
    ToolRequest,
    /// A job started without a piece waits for a human to choose one.
    SkillSelection,
    /// The piece's intake waits to be filled in or confirmed.
    Intake,
    /// An artifact waits for a human's review.
    ReviewArtifact,
    /// A revision was asked for without saying what to change.
    Revision,
    /// The job's worker asked a question; the answer given here reaches the worker.
    WorkerQuestions,
}

impl WaitReason {
    pub const ALL: [WaitReason; 8] = [
        WaitReason::Input,
        WaitReason::BrowserLogin,
        WaitReason::ToolRequest,
        WaitReason::SkillSelection,
        WaitReason::Intake,
        WaitReason::ReviewArtifact,
        WaitReason::Revision,
        WaitReason::WorkerQuestions,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Input => "input",
            WaitReason::BrowserLogin => "browser_login",
            WaitReason::ToolRequest => "tool_request",
            WaitReason::SkillSelection => "skill_selection",
            WaitReason::Intake => "intake",
            WaitReason::ReviewArtifact => "review_artifact",
            WaitReason::Revision => "revision",
            WaitReason::WorkerQuestions => "worker_questions",
        }
    }

    /// The phase machine's waiting reason for a job parked with this reason (DESIGN §5: a tool
    /// request is an `approve_step`).
    pub fn waiting_kind(self) -> crate::phase::WaitingKind {
        use crate::phase::WaitingKind;
        match self {
            WaitReason::Input => WaitingKind::Input,
            WaitReason::BrowserLogin => WaitingKind::BrowserLogin,
            WaitReason::ToolRequest => WaitingKind::ApproveStep,
            WaitReason::SkillSelection => WaitingKind::SkillSelection,
            WaitReason::Intake => WaitingKind::Intake,
            WaitReason::ReviewArtifact => WaitingKind::ReviewArtifact,
            WaitReason::Revision => WaitingKind::Revision,
            WaitReason::WorkerQuestions => WaitingKind::WorkerQuestions,
        }
    }
}

/// One field of an intake as a human fills it in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntakeField {
    pub name: String,
    pub description: String,
    pub required: bool,
    /// What it holds now (given when the job started), if anything.
    #[serde(default)]
    pub value: Option<String>,
}

/// What a parked job waits for, as shown to whoever must answer it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitRequest {
    /// A question for the user (`ASK`).
    Question { question: String },
    /// A login in a browser; the answer is the session (cookie) to use.
    BrowserLogin { url: String, reason: String },
    /// A human must approve or deny running `tool` with exactly these arguments.
    ToolApproval {
        tool: String,
        reason: String,
        arguments: String,
    },
    /// Child jobs that must all end first.
    Subtasks { job_ids: Vec<String> },
    /// The agent made `calls` tool calls since a human last spoke; before it runs the next one
    /// (`tool` with `arguments`), a human says go on (approve), stop (deny, with a reason the
    /// model reads) or something else (answer, passed to the model). Not a question: it does not
    /// count toward the ask limit.
    BurstConfirmation {
        tool: String,
        arguments: String,
        calls: u32,
    },
    /// A job started without a piece: a human chooses one of these.
    SkillSelection { pieces: Vec<SkillIndexEntry> },
    /// The piece's intake: a human fills in the fields (or confirms them as they are).
    Intake {
        prompt: String,
        fields: Vec<IntakeField>,
    },
    /// An artifact waits for a verdict: accept, reject with a reason, or revise. The artifact
    /// itself is in the job's session. With `worker`, the worker drafted it and the verdict
    /// given here reaches the worker's wait `worker_wait`.
    ArtifactReview {
        artifact_id: String,
        title: String,
        artifact_kind: String,
        media_type: String,
        #[serde(default)]
        revises: Option<String>,
        #[serde(default)]
        worker: Option<String>,
        #[serde(default)]
        worker_wait: Option<u32>,
    },
    /// A revision of `artifact_id` was asked for without an instruction: a human gives it.
    RevisionInstruction {
        artifact_id: String,
        title: String,
        #[serde(default)]
        worker: Option<String>,
        #[serde(default)]
        worker_wait: Option<u32>,
    },
    /// The job waits while its worker, the child job `worker`, runs.
    Worker { worker: String },
    /// The worker asked a question; the answer given here reaches its wait `worker_wait`.
    WorkerQuestion {
        worker: String,
        question: String,
        worker_wait: u32,
    },
}

impl WaitRequest {
    /// Checks that `answer` answers this wait, down to its fields (a piece that is offered, the
    /// intake's required fields, the artifact under review); a mismatch says what is wrong.
    pub fn accepts(&self, answer: &Answer) -> Result<(), String> {
        use Answer::{Engine, Resume as R};
        let fits = match (self, answer) {
            (_, R(Resume::Expired)) => true,
            (WaitRequest::Question { .. } | WaitRequest::WorkerQuestion { .. }, R(resume)) => {
                matches!(resume, Resume::Answered(_))
            }
            (WaitRequest::BrowserLogin { .. }, R(resume)) => matches!(resume, Resume::LoggedIn(_)),
            (WaitRequest::ToolApproval { .. }, R(resume)) => {
                matches!(resume, Resume::Approved | Resume::Denied(_))
            }
            (WaitRequest::Subtasks { .. }, R(resume)) => {
                matches!(resume, Resume::SubtasksDone(_))
            }
            (WaitRequest::BurstConfirmation { .. }, R(resume)) => matches!(
                resume,
                Resume::Approved | Resume::Denied(_) | Resume::Answered(_)
            ),
            (WaitRequest::SkillSelection { pieces }, Engine(EngineAnswer::Choose { piece })) => {
                if !pieces.iter().any(|offered| &offered.name == piece) {
                    let names: Vec<&str> = pieces.iter().map(|p| p.name.as_str()).collect();
                    return Err(format!(
                        "piece `{piece}` is not among those offered: {}",
                        names.join(", ")
                    ));
                }
                true
            }
            (WaitRequest::Intake { fields, .. }, Engine(EngineAnswer::Intake { slots })) => {
                return check_intake(fields, slots);
            }
            (
                WaitRequest::ArtifactReview { artifact_id, .. },
                Engine(EngineAnswer::Review { artifact, verdict }),
            ) => {
                check_artifact(artifact_id, artifact.as_deref())?;
                if let HumanVerdict::Reject { reason } = verdict
                    && reason.trim().is_empty()
                {
                    return Err("a rejection needs a reason (the agent reads it)".to_owned());
                }
                true
            }
            (
                WaitRequest::RevisionInstruction { artifact_id, .. },
                Engine(EngineAnswer::Review { artifact, verdict }),
            ) => {
                check_artifact(artifact_id, artifact.as_deref())?;
                match verdict {
                    HumanVerdict::Revise {
                        instruction: Some(instruction),
                    } if !instruction.trim().is_empty() => true,
                    HumanVerdict::Revise { .. } => {
                        return Err(format!(
                            "artifact `{artifact_id}` waits for the instruction of its \
                             revision: say what to change"
                        ));
                    }
                    other => {
                        return Err(format!(
                            "the review of artifact `{artifact_id}` is over (it was sent back \
                             for revision), so it cannot be given `{}`; give the revision's \
                             instruction",
                            other.name()
                        ));
                    }
                }
            }
            (WaitRequest::RevisionInstruction { .. }, R(Resume::Answered(text))) => {
                !text.trim().is_empty()
            }
            (WaitRequest::Worker { worker, .. }, Engine(EngineAnswer::Worker(news))) => {
                news.worker() == worker
            }
            _ => false,
        };
        if fits {
            Ok(())
        } else {
            Err(format!(
                "the job waits for {}, which `{}` does not answer",
                self.describe(),
                answer.name()
            ))
        }
    }

    /// Whether a wait of a worker is answered at its parent rather than on its own: its
    /// questions and its drafts.
    pub fn surfaces_at_parent(&self) -> bool {
        matches!(
            self,
            WaitRequest::Question { .. }
                | WaitRequest::ArtifactReview { .. }
                | WaitRequest::RevisionInstruction { .. }
        )
    }

    /// Whether this is the agent's question to the user (what the ask limit counts).
    pub fn is_question(&self) -> bool {
        matches!(self, WaitRequest::Question { .. })
    }

    /// A short human description: "an answer to a question", …
    pub fn describe(&self) -> &'static str {
        match self {
            WaitRequest::Question { .. } => "an answer to a question",
            WaitRequest::BrowserLogin { .. } => "a browser login",
            WaitRequest::ToolApproval { .. } => "a tool approval",
            WaitRequest::Subtasks { .. } => "its subtasks",
            WaitRequest::BurstConfirmation { .. } => "a go-ahead after a burst of tool calls",
            WaitRequest::SkillSelection { .. } => "a piece to be chosen",
            WaitRequest::Intake { .. } => "its intake to be filled in",
            WaitRequest::ArtifactReview { .. } => "the review of an artifact",
            WaitRequest::RevisionInstruction { .. } => "the instruction of a revision",
            WaitRequest::Worker { .. } => "its worker",
            WaitRequest::WorkerQuestion { .. } => "an answer to its worker's question",
        }
    }
}

/// The review names the artifact under review, or none.
fn check_artifact(under_review: &str, named: Option<&str>) -> Result<(), String> {
    match named {
        Some(named) if named != under_review => Err(format!(
            "artifact `{named}` is not the one under review (`{under_review}`)"
        )),
        _ => Ok(()),
    }
}

/// Every value names a field (or the job's `input`), and every required field ends up filled.
fn check_intake(fields: &[IntakeField], given: &BTreeMap<String, String>) -> Result<(), String> {
    for name in given.keys() {
        if name != crate::piece::INPUT_SLOT && !fields.iter().any(|field| &field.name == name) {
            let known: Vec<&str> = fields.iter().map(|field| field.name.as_str()).collect();
            return Err(format!(
                "the intake has no field `{name}`; its fields: {}",
                if known.is_empty() {
                    "(none)".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    let missing: Vec<&str> = fields
        .iter()
        .filter(|field| field.required)
        .filter(|field| {
            given
                .get(&field.name)
                .or(field.value.as_ref())
                .is_none_or(|value| value.trim().is_empty())
        })
        .map(|field| field.name.as_str())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the intake needs {}: {}",
            if missing.len() == 1 {
                "a value for the required field"
            } else {
                "values for the required fields"
            },
            missing.join(", ")
        ))
    }
}

/// The intake's fields with `given` values merged in, and the job's input: the slots the
/// session records.
pub fn intake_slots(
    fields: &[IntakeField],
    given: &BTreeMap<String, String>,
    input: &str,
) -> BTreeMap<String, String> {
    let mut slots = BTreeMap::new();
    if !input.is_empty() {
        slots.insert(crate::piece::INPUT_SLOT.to_owned(), input.to_owned());
    }
    for field in fields {
        if let Some(value) = given.get(&field.name).or(field.value.as_ref()) {
            slots.insert(field.name.clone(), value.clone());
        }
    }
    if let Some(input) = given.get(crate::piece::INPUT_SLOT) {
        slots.insert(crate::piece::INPUT_SLOT.to_owned(), input.clone());
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resume(resume: Resume) -> Answer {
        Answer::Resume(resume)
    }

    #[test]
    fn every_wait_accepts_expiry_and_only_its_own_answer() {
        let question = WaitRequest::Question {
            question: "?".into(),
        };
        assert!(
            question
                .accepts(&resume(Resume::Answered("a".into())))
                .is_ok()
        );
        assert!(question.accepts(&resume(Resume::Expired)).is_ok());
        let error = question.accepts(&resume(Resume::Approved)).unwrap_err();
        assert!(error.contains("an answer to a question") && error.contains("approved"));
        let approval = WaitRequest::ToolApproval {
            tool: "t".into(),
            reason: "r".into(),
            arguments: "{}".into(),
        };
        assert!(
            approval
                .accepts(&resume(Resume::Denied("no".into())))
                .is_ok()
        );
        assert!(
            approval
                .accepts(&resume(Resume::LoggedIn("s".into())))
                .is_err()
        );
        let subtasks = WaitRequest::Subtasks { job_ids: vec![] };
        assert!(
            subtasks
                .accepts(&resume(Resume::SubtasksDone(vec![])))
                .is_ok()
        );
        assert!(
            subtasks
                .accepts(&resume(Resume::Answered("x".into())))
                .is_err()
        );
    }

    #[test]
    fn engine_waits_check_their_answers_down_to_the_field() {
        let choose = |piece: &str| {
            Answer::Engine(EngineAnswer::Choose {
                piece: piece.into(),
            })
        };
        let selection = WaitRequest::SkillSelection {
            pieces: vec![SkillIndexEntry {
                name: "review".into(),
                description: "d".into(),
            }],
        };
        assert!(selection.accepts(&choose("review")).is_ok());
        let error = selection.accepts(&choose("chat")).unwrap_err();
        assert_eq!(error, "piece `chat` is not among those offered: review");

        let intake = WaitRequest::Intake {
            prompt: "p".into(),
            fields: vec![
                IntakeField {
                    name: "topic".into(),
                    description: "t".into(),
                    required: true,
                    value: None,
                },
                IntakeField {
                    name: "tone".into(),
                    description: "t".into(),
                    required: false,
                    value: None,
                },
            ],
        };
        let fill = |pairs: &[(&str, &str)]| {
            Answer::Engine(EngineAnswer::Intake {
                slots: pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            })
        };
        assert!(intake.accepts(&fill(&[("topic", "tides")])).is_ok());
        assert_eq!(
            intake.accepts(&fill(&[("tone", "dry")])).unwrap_err(),
            "the intake needs a value for the required field: topic"
        );
        assert_eq!(
            intake
                .accepts(&fill(&[("topic", "x"), ("colour", "red")]))
                .unwrap_err(),
            "the intake has no field `colour`; its fields: topic, tone"
        );

        let review = |artifact: Option<&str>, verdict| {
            Answer::Engine(EngineAnswer::Review {
                artifact: artifact.map(Into::into),
                verdict,
            })
        };
        let under_review = WaitRequest::ArtifactReview {
            artifact_id: "art-1".into(),
            title: "t".into(),
            artifact_kind: "report".into(),
            media_type: "text/plain".into(),
            revises: None,
            worker: None,
            worker_wait: None,
        };
        assert!(
            under_review
                .accepts(&review(None, HumanVerdict::Accept))
                .is_ok()
        );
        assert!(
            under_review
                .accepts(&review(Some("art-2"), HumanVerdict::Accept))
                .unwrap_err()
                .contains("`art-2` is not the one under review (`art-1`)")
        );
        let revision = WaitRequest::RevisionInstruction {
            artifact_id: "art-1".into(),
            title: "t".into(),
            worker: None,
            worker_wait: None,
        };
        assert!(
            revision
                .accepts(&review(None, HumanVerdict::Accept))
                .unwrap_err()
                .contains("the review of artifact `art-1` is over")
        );
        let instructed = HumanVerdict::Revise {
            instruction: Some("shorter".into()),
        };
        assert!(revision.accepts(&review(None, instructed)).is_ok());
        assert!(
            revision
                .accepts(&resume(Resume::Answered("shorter".into())))
                .is_ok()
        );
    }
}
