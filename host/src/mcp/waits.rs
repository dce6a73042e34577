//! What a job that waits asks of the person at an MCP client, as a form, and what their reply
//! answers it with. Pure: no I/O, no protocol session.
//!
//! Invariant: every wait a human answers is shown as a form whose reply becomes an answer the
//! store checks as it checks the inbox's (`WaitRequest::accepts`); a browser login is a link to
//! the job's card in the server's inbox, which shows the site's login link and takes the
//! session, so a session never passes through the client; a wait that only the job's children
//! can settle (subtasks, a worker) is never asked, only a status that says what it waits for.
//! Only an explicit `approve` approves; a decline denies an approval and otherwise gives up the
//! job; a dismissal answers nothing and leaves the job waiting.

use std::collections::BTreeMap;

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use serde_json::{Map, Value, json};

use super::parks::filled;
use crate::engine::{Answer, EngineAnswer, HumanVerdict, JobState, WaitRequest};
use crate::plugin::Resume;

/// Where a person settles a job's wait outside the MCP client: pages of `maestro serve`, at the
/// address the client's request came to, or only the job's id when it came some other way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPages {
    server: Option<String>,
    job: String,
}

impl JobPages {
    /// The pages of `job` on the server at `server` (`http://host:port`), if known.
    pub fn new(server: Option<String>, job: &str) -> Self {
        Self {
            server,
            job: job.to_owned(),
        }
    }

    /// The job's card in the inbox (the server's front page), which takes a browser login's
    /// session.
    pub fn login(&self) -> Option<String> {
        let server = self.server.as_ref()?;
        Some(format!("{server}/#job-{}", self.job))
    }
}

/// The job's page, or the job when there is no address.
impl std::fmt::Display for JobPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.server {
            Some(server) => write!(f, "{server}/jobs/{}", self.job),
            None => write!(f, "job {}", self.job),
        }
    }
}

/// How a job's wait shows at the client.
#[derive(Debug, Clone)]
pub enum Shown {
    /// A form for the person at the client.
    Form(JobQuestion),
    /// A browser login, done on a page of the server the client sends the person to.
    Login(JobLogin),
    /// Nothing the client can answer: what the job waits for, and where it is settled.
    Status(String),
}

/// The browser login the wait `wait` of a job waits for: `url` is the page of the server where
/// the person logs in (a URL elicitation's `url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLogin {
    pub wait: u32,
    pub message: String,
    pub url: String,
    /// Names this login among the client's URL elicitations.
    pub elicitation_id: String,
}

impl JobLogin {
    /// The URL elicitation that sends the person to the page.
    pub fn link(&self) -> ElicitRequestParams {
        ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: self.message.clone(),
            url: self.url.clone(),
            elicitation_id: self.elicitation_id.clone(),
        }
    }

    /// What the person's reply to the link does: a decline gives the job up; opening the page
    /// (or dismissing the link) answers nothing, since the session comes by the page.
    pub fn reply(&self, action: &ElicitationAction) -> JobReply {
        match action {
            ElicitationAction::Decline => {
                JobReply::GiveUp("the user declined to log in at the MCP client".to_owned())
            }
            _ => JobReply::Dismissed,
        }
    }
}

/// A form that answers the wait `wait` of a job.
#[derive(Debug, Clone)]
pub struct JobQuestion {
    pub wait: u32,
    pub message: String,
    pub schema: ElicitationSchema,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A free-text answer (a question, the job's or its worker's).
    Answer,
    /// Approve or deny one exact tool call.
    Approval,
    /// Go on, stop, or say something else after a burst of tool calls.
    Burst,
    /// One of these pieces.
    Choose(Vec<String>),
    /// The intake's fields.
    Intake(Vec<String>),
    /// A verdict on an artifact.
    Review(String),
    /// What to change in an artifact sent back for revision.
    Instruction(String),
}

/// What the person's reply does to the job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobReply {
    /// Answers the wait.
    Answer(Answer),
    /// The person declined to answer: the job is given up, for this reason.
    GiveUp(String),
    /// The person dismissed the question: nothing changes, the job still waits.
    Dismissed,
}

const ANSWER: &str = "answer";
const DECISION: &str = "decision";
const REASON: &str = "reason";
const PIECE: &str = "piece";
const VERDICT: &str = "verdict";
const NOTE: &str = "note";
const INSTRUCTION: &str = "instruction";

/// How the wait of `job` shows at the client; `None` when the job does not wait. `pages` are
/// where a person settles what the client cannot.
pub fn shown(job: &JobState, pages: &JobPages) -> Option<Shown> {
    let wait = job.wait.as_ref()?;
    let form = |message: String, schema: Value, kind: Kind| {
        let schema = ElicitationSchema::from_json_schema(object(schema))
            .expect("the forms below are valid elicitation schemas");
        Shown::Form(JobQuestion {
            wait: wait.id,
            message,
            schema,
            kind,
        })
    };
    Some(match &wait.request {
        WaitRequest::Question { question } => {
            form(question.clone(), text_form(ANSWER), Kind::Answer)
        }
        WaitRequest::WorkerQuestion {
            question, worker, ..
        } => form(
            format!("The job's worker {worker} asks: {question}"),
            text_form(ANSWER),
            Kind::Answer,
        ),
        WaitRequest::ToolApproval {
            tool,
            reason,
            arguments,
        } => form(
            format!(
                "The job asks for permission to run a tool: {reason}\n\nTool: {tool}\n\
                 Arguments (exactly what it will receive):\n{arguments}"
            ),
            approval_form(),
            Kind::Approval,
        ),
        WaitRequest::BurstConfirmation {
            tool,
            arguments,
            calls,
        } => form(
            format!(
                "The job made {calls} tool calls since a person last spoke. Next it runs \
                 {tool} with:\n{arguments}\n\nApprove to go on, deny to stop it (the reason \
                 goes to the agent), or write something to tell the agent instead."
            ),
            json!({
                "type": "object",
                "properties": {
                    DECISION: decision(),
                    REASON: {"type": "string", "title": "Reason, or what to tell the agent"},
                },
                "required": [DECISION],
            }),
            Kind::Burst,
        ),
        WaitRequest::SkillSelection { pieces } => {
            let names: Vec<String> = pieces.iter().map(|piece| piece.name.clone()).collect();
            let titles: Vec<String> = pieces
                .iter()
                .map(|piece| {
                    if piece.description.is_empty() {
                        piece.name.clone()
                    } else {
                        format!("{}: {}", piece.name, piece.description)
                    }
                })
                .collect();
            form(
                "Which piece should run this job?".to_owned(),
                json!({
                    "type": "object",
                    "properties": {PIECE: choice("Piece", names.iter().zip(&titles))},
                    "required": [PIECE],
                }),
                Kind::Choose(names),
            )
        }
        WaitRequest::Intake { prompt, fields } => {
            let mut properties = Map::new();
            for field in fields {
                let mut property = json!({"type": "string", "title": field.name});
                if !field.description.is_empty() {
                    property["description"] = json!(field.description);
                }
                if let Some(value) = &field.value {
                    property["default"] = json!(value);
                }
                properties.insert(field.name.clone(), property);
            }
            let required: Vec<&str> = fields
                .iter()
                .filter(|field| field.required)
                .map(|field| field.name.as_str())
                .collect();
            form(
                prompt.clone(),
                json!({"type": "object", "properties": properties, "required": required}),
                Kind::Intake(fields.iter().map(|field| field.name.clone()).collect()),
            )
        }
        WaitRequest::ArtifactReview {
            artifact_id, title, ..
        } => {
            let content = job
                .phase_session()
                .and_then(|session| session.artifact(artifact_id))
                .map(|artifact| artifact.content().to_owned())
                .unwrap_or_default();
            form(
                format!(
                    "Review the artifact \"{title}\": accept it, reject it (say why) or send it \
                     back for revision (say what to change).\n\n{content}"
                ),
                json!({
                    "type": "object",
                    "properties": {
                        VERDICT: choice("Verdict", [
                            ("accept", "Accept it"),
                            ("reject", "Reject it"),
                            ("revise", "Send it back for revision"),
                        ]),
                        NOTE: {"type": "string", "title": "Why it is rejected, or what to change"},
                    },
                    "required": [VERDICT],
                }),
                Kind::Review(artifact_id.clone()),
            )
        }
        WaitRequest::RevisionInstruction {
            artifact_id, title, ..
        } => form(
            format!("\"{title}\" goes back for revision: what should change?"),
            text_form(INSTRUCTION),
            Kind::Instruction(artifact_id.clone()),
        ),
        WaitRequest::BrowserLogin { url, reason } => match pages.login() {
            Some(page) => Shown::Login(JobLogin {
                wait: wait.id,
                message: format!(
                    "The job needs a browser login at {url}. {reason}\n\nOpen maestro's page \
                     for the job: it shows the site's login link and takes the session, which \
                     never passes through this client or the model."
                ),
                url: page,
                elicitation_id: format!("{}/wait-{}", job.id, wait.id),
            }),
            None => Shown::Status(format!(
                "The job waits for a browser login at {url} ({reason}). A login's session never \
                 passes through an MCP client: log in from the job's card in the inbox of \
                 maestro serve ({pages})."
            )),
        },
        WaitRequest::Subtasks { job_ids } => Shown::Status(format!(
            "The job waits for its {} subtasks to end: {}.",
            job_ids.len(),
            job_ids.join(", ")
        )),
        WaitRequest::Worker { worker } => {
            Shown::Status(format!("The job waits while its worker {worker} runs."))
        }
    })
}

impl JobQuestion {
    /// What the person's reply (`action`, with the form's `content` when accepted) does to the
    /// job. An accepted form whose fields do not fit is an error that names the field.
    pub fn reply(
        &self,
        action: &ElicitationAction,
        content: Option<&Value>,
    ) -> Result<JobReply, String> {
        let field = |name: &str| filled(content, name);
        let required = |name: &str| {
            field(name)
                .map(str::to_owned)
                .ok_or_else(|| format!("the reply's `{name}` is missing or empty"))
        };
        let answer = |answer: Answer| Ok(JobReply::Answer(answer));
        match action {
            ElicitationAction::Accept => {}
            ElicitationAction::Decline => {
                return match self.kind {
                    Kind::Approval | Kind::Burst => answer(
                        Resume::Denied("declined by the user at the MCP client".to_owned()).into(),
                    ),
                    _ => Ok(JobReply::GiveUp(
                        "the user declined to answer at the MCP client".to_owned(),
                    )),
                };
            }
            // A dismissal, or an action of a later revision: nothing is answered.
            _ => return Ok(JobReply::Dismissed),
        }
        match &self.kind {
            Kind::Answer => answer(Resume::Answered(required(ANSWER)?).into()),
            Kind::Approval => answer(self.decision(field(DECISION), field(REASON))?.into()),
            Kind::Burst => match (field(DECISION), field(REASON)) {
                (Some("deny"), _) | (Some("approve"), None) => {
                    answer(self.decision(field(DECISION), field(REASON))?.into())
                }
                // Approving with words tells the agent something instead of going on blindly.
                (Some("approve"), Some(text)) => answer(Resume::Answered(text.to_owned()).into()),
                (other, _) => Err(unknown_decision(other)),
            },
            Kind::Choose(pieces) => {
                let piece = required(PIECE)?;
                if !pieces.contains(&piece) {
                    return Err(format!(
                        "the reply's `{PIECE}` names `{piece}`, which is not offered: {}",
                        pieces.join(", ")
                    ));
                }
                answer(EngineAnswer::Choose { piece }.into())
            }
            Kind::Intake(names) => {
                let slots: BTreeMap<String, String> = names
                    .iter()
                    .filter_map(|name| field(name).map(|value| (name.clone(), value.to_owned())))
                    .collect();
                answer(EngineAnswer::Intake { slots }.into())
            }
            Kind::Review(artifact) => {
                let verdict = match field(VERDICT) {
                    Some("accept") => HumanVerdict::Accept,
                    Some("reject") => HumanVerdict::Reject {
                        reason: required(NOTE)
                            .map_err(|_| format!("a rejection needs a reason in `{NOTE}`"))?,
                    },
                    Some("revise") => HumanVerdict::Revise {
                        instruction: field(NOTE).map(str::to_owned),
                    },
                    other => {
                        return Err(format!(
                            "the reply's `{VERDICT}` must be accept, reject or revise, not {}",
                            other.map_or("nothing".to_owned(), |text| format!("`{text}`"))
                        ));
                    }
                };
                answer(review(artifact, verdict))
            }
            Kind::Instruction(artifact) => answer(review(
                artifact,
                HumanVerdict::Revise {
                    instruction: Some(required(INSTRUCTION)?),
                },
            )),
        }
    }

    fn decision(&self, decision: Option<&str>, reason: Option<&str>) -> Result<Resume, String> {
        match decision {
            Some("approve") => Ok(Resume::Approved),
            Some("deny") => Ok(Resume::Denied(
                reason
                    .unwrap_or("denied by the user at the MCP client")
                    .to_owned(),
            )),
            other => Err(unknown_decision(other)),
        }
    }
}

fn unknown_decision(decision: Option<&str>) -> String {
    format!(
        "the reply's `{DECISION}` must be approve or deny, not {}",
        decision.map_or("nothing".to_owned(), |text| format!("`{text}`"))
    )
}

fn review(artifact: &str, verdict: HumanVerdict) -> Answer {
    EngineAnswer::Review {
        artifact: Some(artifact.to_owned()),
        verdict,
    }
    .into()
}

fn decision() -> Value {
    choice(
        "Decision",
        [("approve", "Approve this exact call"), ("deny", "Deny it")],
    )
}

/// A single choice among `(value, title)` pairs.
fn choice<V: serde::Serialize, T: serde::Serialize>(
    title: &str,
    options: impl IntoIterator<Item = (V, T)>,
) -> Value {
    let options: Vec<Value> = options
        .into_iter()
        .map(|(value, title)| json!({"const": value, "title": title}))
        .collect();
    json!({"type": "string", "title": title, "oneOf": options})
}

fn approval_form() -> Value {
    json!({
        "type": "object",
        "properties": {
            DECISION: decision(),
            REASON: {
                "type": "string", "title": "Reason for denying",
                "description": "Sent back to the agent when the call is denied.",
            },
        },
        "required": [DECISION],
    })
}

fn text_form(name: &str) -> Value {
    json!({
        "type": "object",
        "properties": {name: {"type": "string", "title": "Your answer"}},
        "required": [name],
    })
}

/// The fields of a JSON object built above.
pub(super) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("every schema built here is an object"),
    }
}

#[cfg(test)]
#[path = "waits_tests.rs"]
mod tests;
