//! What a parked call asks of the person at an MCP client, as an elicitation, and what their
//! reply resumes the call with. Pure: no I/O, no protocol session.
//!
//! Invariant: a tool request (a tool's own, or the operator's approval gate) shows the exact
//! tool and the exact arguments text that would run, and only an explicit `approve` resumes it
//! with `approved`; a decline denies it; a dismissal (`cancel`) resumes nothing. A park that
//! only a job can wait for (subtasks, a worker, a review) or that must not pass through the
//! client (a login's session) is never turned into a question: the call ends, saying why.

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, EnumSchema};
use serde_json::Value;

use crate::plugin::{Park, Resume, ToolRequest};

/// What to ask the person at the client.
#[derive(Debug, Clone)]
pub struct Question {
    pub message: String,
    pub schema: ElicitationSchema,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A free-text answer (`ask`).
    Answer,
    /// Approve or deny one exact call.
    Approval,
}

/// How a question was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Go on with the call, resumed (or, at the approval gate, run) with this.
    Resume(Resume),
    /// The person dismissed the question, or declined to answer it: the call ends here, and
    /// this says so.
    Ended(String),
}

/// The field of an answer's form.
const ANSWER: &str = "answer";
/// The fields of an approval's form.
const DECISION: &str = "decision";
const REASON: &str = "reason";

/// The question a park asks, or why no question can settle it over MCP.
pub fn question_for(park: &Park) -> Result<Question, String> {
    match park {
        Park::Ask(question) => Ok(answer_form(question)),
        Park::ToolRequest(request) => Ok(approval_form(
            &format!("A tool asks for permission: {}", request.reason),
            request,
        )),
        Park::BrowserLogin(login) => Err(format!(
            "The call waits for a browser login at {} ({}). A login's session never passes \
             through an MCP client: run the tool in a job of `maestro serve` and log in from its \
             inbox.",
            login.url, login.reason
        )),
        Park::Subtasks(jobs) => Err(format!(
            "The call waits for subtasks ({}), which only a job can wait for: run the tool in a \
             piece.",
            jobs.join(", ")
        )),
        Park::Artifact(draft) => Err(format!(
            "The call hands in `{}` for review, which only a job can wait for: run the tool in a \
             piece.",
            draft.title
        )),
        Park::Worker(worker) => Err(format!(
            "The call starts a worker (piece `{}`) and waits for it, which only a job can do: \
             run the tool in a piece.",
            worker.piece
        )),
    }
}

/// The question of the operator's approval gate, before `tool` runs with `arguments`.
pub fn gate_question(plugin: &str, tool: &str, arguments: &Value) -> Question {
    approval_form(
        &format!(
            "The operator's policy requires a human to approve every call of plugin `{plugin}`."
        ),
        &ToolRequest {
            tool: tool.to_owned(),
            reason: String::new(),
            arguments: arguments.to_string(),
        },
    )
}

/// What a client that cannot be asked gets: what the call waits for, and that it ended.
pub fn unanswerable(question: &Question) -> String {
    format!(
        "The call waits for a human: {}\n\nThis MCP client cannot be asked (it declared no form \
         elicitation), so the call ended here without going on.",
        question.message
    )
}

impl Question {
    /// What the person's reply (`action`, with the form's `content` when accepted) means.
    pub fn reply(&self, action: &ElicitationAction, content: Option<&Value>) -> Reply {
        let field = |name: &str| filled(content, name);
        match (self.kind, action) {
            (Kind::Answer, ElicitationAction::Accept) => match field(ANSWER) {
                Some(text) => Reply::Resume(Resume::Answered(text.to_owned())),
                None => Reply::Ended("Not answered: the reply held no answer.".to_owned()),
            },
            (Kind::Answer, ElicitationAction::Decline) => {
                Reply::Ended("Not answered: the user declined to answer.".to_owned())
            }
            (Kind::Approval, ElicitationAction::Accept) if field(DECISION) == Some("approve") => {
                Reply::Resume(Resume::Approved)
            }
            (Kind::Approval, ElicitationAction::Accept | ElicitationAction::Decline) => {
                Reply::Resume(Resume::Denied(
                    field(REASON)
                        .unwrap_or("denied by the user at the MCP client")
                        .to_owned(),
                ))
            }
            _ => Reply::Ended("Not run on: the user dismissed the question.".to_owned()),
        }
    }
}

/// The trimmed text of field `name` of a form's reply, unless it is empty or absent.
pub fn filled<'a>(content: Option<&'a Value>, name: &str) -> Option<&'a str> {
    content
        .and_then(|content| content.get(name))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty())
}

/// The form elicitation that asks `message` with the fields of `schema`.
pub fn form(message: &str, schema: &ElicitationSchema) -> ElicitRequestParams {
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message.to_owned(),
        requested_schema: schema.clone(),
    }
}

fn answer_form(question: &str) -> Question {
    let schema = ElicitationSchema::builder()
        .required_string_with(ANSWER, |field| field.title("Your answer"))
        .build()
        .expect("a form of one text field is a valid schema");
    Question {
        message: question.to_owned(),
        schema,
        kind: Kind::Answer,
    }
}

fn approval_form(why: &str, request: &ToolRequest) -> Question {
    let choices = EnumSchema::builder(vec!["approve".to_owned(), "deny".to_owned()])
        .enum_titles(vec![
            "Approve this exact call".to_owned(),
            "Deny it".to_owned(),
        ])
        .expect("one title per choice")
        .build();
    let schema = ElicitationSchema::builder()
        .required_enum_schema(DECISION, choices)
        .optional_string_with(REASON, |field| {
            field
                .title("Reason for denying")
                .description("Sent back to the agent when the call is denied.")
        })
        .build()
        .expect("a choice and a text field are a valid schema");
    Question {
        message: format!(
            "{why}\n\nTool: {}\nArguments (exactly what it will receive):\n{}",
            request.tool, request.arguments
        ),
        schema,
        kind: Kind::Approval,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plugin::LoginRequest;

    fn tool_request() -> Park {
        Park::ToolRequest(ToolRequest {
            tool: "RotateKey".into(),
            reason: "Rotate the staging key.".into(),
            arguments: r#"{"service":"staging","revoke_old_after_minutes":60}"#.into(),
        })
    }

    #[test]
    fn a_tool_request_shows_the_exact_arguments_and_only_approve_approves() {
        let question = question_for(&tool_request()).unwrap();
        assert!(
            question
                .message
                .contains(r#"{"service":"staging","revoke_old_after_minutes":60}"#),
            "{}",
            question.message
        );
        assert!(question.message.contains("RotateKey"));
        let accept = ElicitationAction::Accept;
        assert_eq!(
            question.reply(&accept, Some(&json!({ "decision": "approve" }))),
            Reply::Resume(Resume::Approved)
        );
        assert_eq!(
            question.reply(
                &accept,
                Some(&json!({ "decision": "deny", "reason": "not today" }))
            ),
            Reply::Resume(Resume::Denied("not today".into()))
        );
        // An accepted form without a decision, or a decline, denies.
        assert!(matches!(
            question.reply(&accept, Some(&json!({}))),
            Reply::Resume(Resume::Denied(_))
        ));
        assert!(matches!(
            question.reply(&ElicitationAction::Decline, None),
            Reply::Resume(Resume::Denied(_))
        ));
        assert!(matches!(
            question.reply(&ElicitationAction::Cancel, None),
            Reply::Ended(_)
        ));
    }

    #[test]
    fn a_question_takes_a_non_empty_answer() {
        let question = question_for(&Park::Ask("Which city?".into())).unwrap();
        assert_eq!(question.message, "Which city?");
        let accept = ElicitationAction::Accept;
        assert_eq!(
            question.reply(&accept, Some(&json!({ "answer": " Lisbon " }))),
            Reply::Resume(Resume::Answered("Lisbon".into()))
        );
        assert!(matches!(
            question.reply(&accept, Some(&json!({ "answer": "  " }))),
            Reply::Ended(_)
        ));
        assert!(matches!(
            question.reply(&ElicitationAction::Decline, None),
            Reply::Ended(_)
        ));
    }

    #[test]
    fn a_login_or_a_wait_only_a_job_can_hold_is_never_asked() {
        let login = Park::BrowserLogin(LoginRequest {
            url: "https://example.test/login".into(),
            reason: "the site needs a login".into(),
        });
        let why = question_for(&login).unwrap_err();
        assert!(why.contains("https://example.test/login"), "{why}");
        assert!(question_for(&Park::Subtasks(vec!["job-1".into()])).is_err());
    }

    #[test]
    fn the_gate_shows_the_plugin_and_the_exact_call() {
        let question = gate_question("keys", "RotateKey", &json!({ "service": "prod" }));
        assert!(question.message.contains("plugin `keys`"));
        assert!(question.message.contains(r#"{"service":"prod"}"#));
    }
}
