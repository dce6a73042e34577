//! Version-independent host types of the tool contract, with conversions
//! from and to the generated bindings.
//!
//! Invariant: these types mirror `wit/since_v0.1.0/types.wit` one to one; the
//! serde form (kebab-case, externally tagged) is the JSON the CLI prints and
//! accepts, and what later layers store.

use serde::{Deserialize, Serialize};

use super::wit::latest::maestro::tool::types as wit;

/// One tool a plugin offers, with its parsed JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// One invocation, as the host asks for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRequest {
    pub call_id: String,
    pub job_id: String,
    pub movement: String,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub resume: Option<Resume>,
}

impl CallRequest {
    /// A call outside any job (the CLI, tests): ids are generated.
    pub fn new(tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        Self {
            call_id: next_call_id(),
            job_id: String::new(),
            movement: String::new(),
            tool: tool.into(),
            arguments,
            resume: None,
        }
    }

    /// The same call re-invoked after a park.
    pub fn resumed(mut self, resume: Resume) -> Self {
        self.resume = Some(resume);
        self
    }
}

fn next_call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "call-{nanos:x}-{:x}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Output(String),
    Park(Park),
    Terminal(Terminal),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Park {
    Ask(String),
    BrowserLogin(LoginRequest),
    ToolRequest(ToolRequest),
    Subtasks(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginRequest {
    pub url: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRequest {
    pub tool: String,
    pub reason: String,
    /// The exact arguments, as the JSON text the tool produced.
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Terminal {
    Complete(String),
    Abort(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resume {
    Answered(String),
    Approved,
    Denied(String),
    LoggedIn(String),
    SubtasksDone(Vec<SubtaskResult>),
    Expired,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskResult {
    pub job_id: String,
    pub status: SubtaskStatus,
    pub output: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubtaskStatus {
    Completed,
    Aborted,
    Cancelled,
    Failed,
}

/// What one list element costs against the output cap beyond its text: the
/// host keeps a string per element, so a list of empty strings is not free.
pub const LIST_ELEMENT_BYTES: usize = 24;

/// Child jobs one `subtasks` park may wait for.
pub const MAX_AWAITED_SUBTASKS: usize = 256;

impl Outcome {
    /// Bytes the outcome carries: what the output-size cap counts.
    pub fn text_len(&self) -> usize {
        match self {
            Outcome::Output(text) => text.len(),
            Outcome::Terminal(Terminal::Complete(text) | Terminal::Abort(text)) => text.len(),
            Outcome::Park(Park::Ask(question)) => question.len(),
            Outcome::Park(Park::BrowserLogin(login)) => login.url.len() + login.reason.len(),
            Outcome::Park(Park::ToolRequest(request)) => {
                request.tool.len() + request.reason.len() + request.arguments.len()
            }
            Outcome::Park(Park::Subtasks(ids)) => {
                ids.iter().map(|id| id.len() + LIST_ELEMENT_BYTES).sum()
            }
        }
    }

    /// Why the host cannot act on this outcome, if it cannot: each field of a
    /// park is checked here, at the boundary, before anything stores or shows it.
    pub fn problem(&self) -> Option<String> {
        match self {
            Outcome::Park(Park::Subtasks(ids)) => {
                if ids.is_empty() {
                    Some("park subtasks: the list of job ids is empty, so nothing would end the wait".into())
                } else if ids.len() > MAX_AWAITED_SUBTASKS {
                    Some(format!(
                        "park subtasks: {} job ids, more than the {MAX_AWAITED_SUBTASKS} one park may wait for",
                        ids.len()
                    ))
                } else if ids.iter().any(|id| id.trim().is_empty()) {
                    Some("park subtasks: a job id is empty".into())
                } else {
                    None
                }
            }
            Outcome::Park(Park::BrowserLogin(login)) => {
                let scheme = login.url.split_once("://").map(|(scheme, _)| scheme);
                let web = scheme.is_some_and(|s| {
                    s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https")
                });
                if !web
                    || login
                        .url
                        .chars()
                        .any(|c| c.is_control() || c.is_whitespace())
                {
                    Some(format!(
                        "park browser-login: the url must be an http or https address without \
                         spaces or control characters, not {:?}",
                        login.url.chars().take(200).collect::<String>()
                    ))
                } else {
                    None
                }
            }
            Outcome::Park(Park::ToolRequest(request)) => {
                match serde_json::from_str::<serde_json::Value>(&request.arguments) {
                    Ok(serde_json::Value::Object(_)) => None,
                    _ => Some(format!(
                        "park tool-request: the arguments for `{}` must be a JSON object",
                        request.tool
                    )),
                }
            }
            _ => None,
        }
    }
}

impl From<wit::Outcome> for Outcome {
    fn from(outcome: wit::Outcome) -> Self {
        match outcome {
            wit::Outcome::Output(text) => Outcome::Output(text),
            wit::Outcome::Terminal(wit::Terminal::Complete(text)) => {
                Outcome::Terminal(Terminal::Complete(text))
            }
            wit::Outcome::Terminal(wit::Terminal::Abort(text)) => {
                Outcome::Terminal(Terminal::Abort(text))
            }
            wit::Outcome::Park(park) => Outcome::Park(match park {
                wit::Park::Ask(question) => Park::Ask(question),
                wit::Park::BrowserLogin(login) => Park::BrowserLogin(LoginRequest {
                    url: login.url,
                    reason: login.reason,
                }),
                wit::Park::ToolRequest(request) => Park::ToolRequest(ToolRequest {
                    tool: request.tool,
                    reason: request.reason,
                    arguments: request.arguments,
                }),
                wit::Park::Subtasks(ids) => Park::Subtasks(ids),
            }),
        }
    }
}

impl From<Resume> for wit::Resume {
    fn from(resume: Resume) -> Self {
        match resume {
            Resume::Answered(answer) => wit::Resume::Answered(answer),
            Resume::Approved => wit::Resume::Approved,
            Resume::Denied(reason) => wit::Resume::Denied(reason),
            Resume::LoggedIn(session) => wit::Resume::LoggedIn(session),
            Resume::SubtasksDone(results) => wit::Resume::SubtasksDone(
                results
                    .into_iter()
                    .map(|result| wit::SubtaskResult {
                        job_id: result.job_id,
                        status: match result.status {
                            SubtaskStatus::Completed => wit::SubtaskStatus::Completed,
                            SubtaskStatus::Aborted => wit::SubtaskStatus::Aborted,
                            SubtaskStatus::Cancelled => wit::SubtaskStatus::Cancelled,
                            SubtaskStatus::Failed => wit::SubtaskStatus::Failed,
                        },
                        output: result.output,
                    })
                    .collect(),
            ),
            Resume::Expired => wit::Resume::Expired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_json_matches_wit_case_names() {
        let parsed: Resume = serde_json::from_str(r#""approved""#).unwrap();
        assert_eq!(parsed, Resume::Approved);
        let parsed: Resume = serde_json::from_str(r#"{"logged-in":"sid=1"}"#).unwrap();
        assert_eq!(parsed, Resume::LoggedIn("sid=1".into()));
        let parsed: Resume = serde_json::from_str(
            r#"{"subtasks-done":[{"job_id":"j1","status":"aborted","output":"no"}]}"#,
        )
        .unwrap();
        assert_eq!(
            parsed,
            Resume::SubtasksDone(vec![SubtaskResult {
                job_id: "j1".into(),
                status: SubtaskStatus::Aborted,
                output: "no".into()
            }])
        );
        assert!(serde_json::from_str::<Resume>(r#"{"approve":null}"#).is_err());
    }

    #[test]
    fn outcome_json_is_tagged_by_kind() {
        let outcome = Outcome::Park(Park::BrowserLogin(LoginRequest {
            url: "http://127.0.0.1/login".into(),
            reason: "401".into(),
        }));
        assert_eq!(
            serde_json::to_value(&outcome).unwrap(),
            serde_json::json!({"park": {"browser-login": {"url": "http://127.0.0.1/login", "reason": "401"}}})
        );
    }
}
