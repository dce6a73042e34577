//! What a waiting job is answered with: a resume of the parked call (the WIT's `resume`), or
//! one of the engine's own answers — a piece chosen, an intake filled in, a review, news of the
//! worker it waits for, or an answer its parent passes on to it.
//!
//! Invariant: the serde form of a [`Resume`] is also the form of its [`Answer`], so everything
//! stored as a resume before the engine had answers of its own reads back unchanged; the
//! engine's answers are tagged by names no resume uses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::phase::ArtifactDraft;
use crate::plugin::{Resume, SubtaskResult};

/// The answer to a wait, as the store keeps it until a runner applies it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    /// What a parked call is re-invoked with (also a go-ahead after the burst limit).
    Resume(Resume),
    /// One of the engine's own answers.
    Engine(EngineAnswer),
}

/// The answers that are the engine's, not a tool's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineAnswer {
    /// The piece a human chose for a job started without one.
    Choose { piece: String },
    /// The intake as a human filled it in; values not given keep what was there, and an
    /// empty map confirms the intake as it stands.
    Intake {
        #[serde(default)]
        slots: BTreeMap<String, String>,
    },
    /// A human's review of the artifact under review (`artifact`: `None` for the one the job
    /// shows), or the instruction of a revision asked for without one.
    Review {
        #[serde(default)]
        artifact: Option<String>,
        verdict: HumanVerdict,
    },
    /// From the store: the worker the job waits for asked, handed in a draft, or ended.
    Worker(WorkerNews),
    /// An answer a parent passes on to its worker: the only way a worker's questions and
    /// drafts are answered, so that parent and worker agree on every verdict.
    Forwarded { from: String, answer: Box<Answer> },
}

/// A reviewer's word, as a human gives it: a revision may come without its instruction yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum HumanVerdict {
    Accept,
    Reject {
        reason: String,
    },
    Revise {
        #[serde(default)]
        instruction: Option<String>,
    },
}

impl HumanVerdict {
    pub fn name(&self) -> &'static str {
        match self {
            HumanVerdict::Accept => "accept",
            HumanVerdict::Reject { .. } => "reject",
            HumanVerdict::Revise { .. } => "revise",
        }
    }
}

/// What the worker a job waits for did, told by the store in the commit that saved it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerNews {
    /// It parked on a question; `wait` is the worker's own wait, which an answer names.
    Asked {
        worker: String,
        wait: u32,
        question: String,
    },
    /// It handed in a draft and waits for its review.
    Drafted {
        worker: String,
        wait: u32,
        artifact: ArtifactDraft,
    },
    /// It ended; the result carries its facts.
    Ended(SubtaskResult),
}

impl WorkerNews {
    pub fn worker(&self) -> &str {
        match self {
            WorkerNews::Asked { worker, .. } | WorkerNews::Drafted { worker, .. } => worker,
            WorkerNews::Ended(result) => &result.job_id,
        }
    }
}

impl From<Resume> for Answer {
    fn from(resume: Resume) -> Self {
        Answer::Resume(resume)
    }
}

impl From<EngineAnswer> for Answer {
    fn from(answer: EngineAnswer) -> Self {
        Answer::Engine(answer)
    }
}

impl Answer {
    /// The answer's kind, as a message names it.
    pub fn name(&self) -> &'static str {
        match self {
            Answer::Resume(resume) => super::resume_name(resume),
            Answer::Engine(EngineAnswer::Choose { .. }) => "choose",
            Answer::Engine(EngineAnswer::Intake { .. }) => "intake",
            Answer::Engine(EngineAnswer::Review { verdict, .. }) => verdict.name(),
            Answer::Engine(EngineAnswer::Worker(_)) => "worker news",
            Answer::Engine(EngineAnswer::Forwarded { .. }) => "forwarded",
        }
    }

    pub fn is_expired(&self) -> bool {
        matches!(self, Answer::Resume(Resume::Expired))
    }

    /// The resume of a parked call this answer is, if it is one.
    pub fn as_resume(&self) -> Option<&Resume> {
        match self {
            Answer::Resume(resume) => Some(resume),
            Answer::Engine(_) => None,
        }
    }

    /// Whether a human gave it (so the tool-call burst starts over).
    pub fn is_human(&self) -> bool {
        match self {
            Answer::Resume(resume) => !matches!(
                resume,
                Resume::SubtasksDone(_) | Resume::Expired | Resume::WorkerDone(_)
            ),
            Answer::Engine(EngineAnswer::Worker(_)) => false,
            Answer::Engine(EngineAnswer::Forwarded { answer, .. }) => answer.is_human(),
            Answer::Engine(_) => true,
        }
    }

    /// The answer with a login's session replaced: the log is kept for good.
    pub fn for_the_log(&self) -> Answer {
        match self {
            Answer::Resume(Resume::LoggedIn(_)) => {
                Answer::Resume(Resume::LoggedIn("(session withheld)".to_owned()))
            }
            Answer::Engine(EngineAnswer::Forwarded { from, answer }) => {
                Answer::Engine(EngineAnswer::Forwarded {
                    from: from.clone(),
                    answer: Box::new(answer.for_the_log()),
                })
            }
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_resume_reads_back_as_the_same_answer() {
        for (json, resume) in [
            (r#""approved""#, Resume::Approved),
            (
                r#"{"answered":"Lisbon"}"#,
                Resume::Answered("Lisbon".into()),
            ),
            (r#""expired""#, Resume::Expired),
        ] {
            let answer: Answer = serde_json::from_str(json).unwrap();
            assert_eq!(answer, Answer::Resume(resume.clone()));
            assert_eq!(
                serde_json::to_string(&Answer::Resume(resume)).unwrap(),
                json
            );
        }
    }

    #[test]
    fn engine_answers_round_trip_by_their_own_names() {
        let answers = [
            EngineAnswer::Choose {
                piece: "review".into(),
            },
            EngineAnswer::Intake {
                slots: BTreeMap::from([("topic".into(), "tides".into())]),
            },
            EngineAnswer::Review {
                artifact: None,
                verdict: HumanVerdict::Revise { instruction: None },
            },
            EngineAnswer::Forwarded {
                from: "job-p".into(),
                answer: Box::new(Answer::Resume(Resume::Answered("yes".into()))),
            },
        ];
        for answer in answers {
            let answer = Answer::Engine(answer);
            let json = serde_json::to_string(&answer).unwrap();
            assert_eq!(
                serde_json::from_str::<Answer>(&json).unwrap(),
                answer,
                "{json}"
            );
        }
    }

    #[test]
    fn a_session_never_reaches_the_log() {
        let forwarded = Answer::Engine(EngineAnswer::Forwarded {
            from: "p".into(),
            answer: Box::new(Answer::Resume(Resume::LoggedIn("sid=secret".into()))),
        });
        let logged = serde_json::to_string(&forwarded.for_the_log()).unwrap();
        assert!(!logged.contains("secret"), "{logged}");
    }
}
