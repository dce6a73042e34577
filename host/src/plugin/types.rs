//! Version-independent host types of the tool contract. Each binding module
//! of `wit/` converts its generated types from and to these.
//!
//! Invariant: these types mirror the newest `wit/since_v*/types.wit` one to
//! one, and every older version is a subset of them; the serde form
//! (kebab-case, externally tagged) is the JSON the CLI prints and accepts,
//! and what later layers store, so a field added by a later version has a
//! serde default.

use serde::{Deserialize, Serialize};

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

#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Output(String),
    Park(Park),
    Terminal(Terminal),
}

#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Park {
    Ask(String),
    BrowserLogin(LoginRequest),
    ToolRequest(ToolRequest),
    Subtasks(Vec<String>),
    /// Since 0.2.0: a draft handed in for review.
    Artifact(ArtifactDraft),
    /// Since 0.2.0: start a worker and wait for it.
    Worker(WorkerRequest),
}

/// A piece of work handed in for review (since 0.2.0).
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactDraft {
    pub kind: String,
    pub title: String,
    pub media_type: String,
    pub body: String,
    #[serde(default)]
    pub revises: Option<String>,
}

/// A worker to start: a child job running `piece` with `input` (since 0.2.0).
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRequest {
    pub piece: String,
    pub input: String,
}

/// An accepted artifact, as it is handed downstream (since 0.2.0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    pub artifact_id: String,
    pub kind: String,
    pub title: String,
    pub media_type: String,
    pub body: String,
}

/// A reviewer's word on a draft (since 0.2.0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Accepted,
    Rejected(String),
    RevisionRequested(String),
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Rejected(_) => "rejected",
            Verdict::RevisionRequested(_) => "revision-requested",
        }
    }
}

/// The review of one artifact (since 0.2.0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub artifact_id: String,
    pub verdict: Verdict,
}

#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginRequest {
    pub url: String,
    pub reason: String,
}

#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRequest {
    pub tool: String,
    pub reason: String,
    /// The exact arguments, as the JSON text the tool produced.
    pub arguments: String,
}

#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
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
    /// Since 0.2.0: the draft of a `park.artifact` was reviewed.
    Reviewed(Review),
    /// Since 0.2.0: the worker of a `park.worker` has ended.
    WorkerDone(SubtaskResult),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskResult {
    pub job_id: String,
    pub status: SubtaskStatus,
    pub output: String,
    /// The child's accepted artifacts (since 0.2.0; a 0.1.0 tool does not see them).
    #[serde(default)]
    pub facts: Vec<Fact>,
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
            Outcome::Park(Park::Artifact(draft)) => {
                draft.kind.len()
                    + draft.title.len()
                    + draft.media_type.len()
                    + draft.body.len()
                    + draft.revises.as_ref().map_or(0, String::len)
            }
            Outcome::Park(Park::Worker(worker)) => worker.piece.len() + worker.input.len(),
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
            Outcome::Park(Park::Artifact(draft)) => draft_problem(draft),
            Outcome::Park(Park::Worker(worker)) => {
                if worker.piece.trim().is_empty() {
                    Some("park worker: the piece is empty".into())
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

/// Longest `kind` and `media-type` of a draft: words, not text.
pub const MAX_ARTIFACT_LABEL: usize = 128;

/// Why a draft cannot be reviewed: its labels are what a reviewer and a page act on.
fn draft_problem(draft: &ArtifactDraft) -> Option<String> {
    let word = |text: &str| {
        !text.is_empty()
            && text.len() <= MAX_ARTIFACT_LABEL
            && !text.chars().any(|c| c.is_control() || c.is_whitespace())
    };
    if !word(&draft.kind) {
        return Some(format!(
            "park artifact: the kind must be one word of at most {MAX_ARTIFACT_LABEL} bytes, \
             not {:?}",
            draft.kind.chars().take(80).collect::<String>()
        ));
    }
    let media_type = draft.media_type.split_once('/');
    if !word(&draft.media_type) || media_type.is_none_or(|(a, b)| a.is_empty() || b.is_empty()) {
        return Some(format!(
            "park artifact: the media type must look like `text/markdown`, not {:?}",
            draft.media_type.chars().take(80).collect::<String>()
        ));
    }
    if draft.title.trim().is_empty() || draft.title.chars().any(char::is_control) {
        return Some("park artifact: the title must be a line of text".into());
    }
    if draft
        .revises
        .as_deref()
        .is_some_and(|id| id.trim().is_empty())
    {
        return Some("park artifact: `revises` names no artifact".into());
    }
    None
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
                output: "no".into(),
                facts: vec![],
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
