//! The scripted model: replays a YAML script of turns, for tests and the offline demo.
//!
//! Invariant: the scripted model keeps no position of its own. The turn it plays is the number
//! of assistant messages already in the conversation, so a job that parked, was stored and
//! resumed in another process continues the script exactly where it stopped.
//!
//! ```yaml
//! turns:
//!   - text: Let me read the page.
//!     tool_calls:
//!       - name: BrowseWeb
//!         arguments: { url: "http://127.0.0.1:8080/" }
//!   - tool_calls:
//!       - name: complete
//!         arguments: { status: done, summary: "The page says hello." }
//! ```
//!
//! `arguments` is any YAML mapping (sent as its JSON text); `raw_arguments` sends a string as
//! is, to show what happens when a model writes broken JSON.
//!
//! One script can play several jobs (a parent and its subtasks): `conversations` holds turn
//! lists chosen by the job's input (its first user message), `turns` plays any other job.
//!
//! A turn can follow what a human did: with `when: { last_result_contains: "…" }` it is played
//! only when the last tool result holds that text, and its `otherwise` turn is played instead
//! (so a script goes one way when a reviewer asks for a revision and another when they accept).
//!
//! ```yaml
//! turns:
//!   - tool_calls: [{ name: HandIn, arguments: { kind: report, title: T, body: "v1" } }]
//!   - when: { last_result_contains: revision_requested }
//!     tool_calls: [{ name: HandIn, arguments: { kind: report, title: T, body: "v2" } }]
//!     otherwise: { tool_calls: [{ name: complete, arguments: { status: done } }] }
//! ```
//!
//! ```yaml
//! conversations:
//!   - input_contains: "sub-question A"
//!     turns: [{ tool_calls: [{ name: complete, arguments: { status: done, summary: "A" } }] }]
//! turns: []
//! ```

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;

use super::{ChatRequest, Message, Model, ModelError, Reply, ToolCall};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    #[serde(default)]
    conversations: Vec<Conversation>,
    #[serde(default)]
    turns: Vec<ScriptTurn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Conversation {
    input_contains: String,
    turns: Vec<ScriptTurn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptTurn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptToolCall>,
    /// Play this turn only when the condition holds; `otherwise` is played instead.
    #[serde(default)]
    when: Option<When>,
    #[serde(default)]
    otherwise: Option<Box<ScriptTurn>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct When {
    last_result_contains: String,
}

impl ScriptTurn {
    /// The turn to play after `messages`: this one, or its `otherwise`.
    fn chosen(&self, messages: &[Message]) -> &ScriptTurn {
        let (Some(when), Some(otherwise)) = (&self.when, &self.otherwise) else {
            return self;
        };
        let last_result = messages.iter().rev().find_map(|message| match message {
            Message::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        });
        if last_result.is_some_and(|result| result.contains(&when.last_result_contains)) {
            self
        } else {
            otherwise
        }
    }

    /// What is wrong with this turn, if anything.
    fn problem(&self) -> Option<String> {
        if self.text.is_none() && self.tool_calls.is_empty() {
            return Some("a turn needs `text`, `tool_calls` or both".to_owned());
        }
        for (index, call) in self.tool_calls.iter().enumerate() {
            if call.arguments.is_some() && call.raw_arguments.is_some() {
                return Some(format!(
                    "tool_calls[{index}]: give `arguments` or `raw_arguments`, not both"
                ));
            }
        }
        match (&self.when, &self.otherwise) {
            (Some(_), None) => Some("a turn with `when` needs an `otherwise` turn".to_owned()),
            (None, Some(_)) => Some("`otherwise` belongs to a turn with `when`".to_owned()),
            (_, Some(otherwise)) if otherwise.when.is_some() => {
                Some("an `otherwise` turn cannot have a `when` of its own".to_owned())
            }
            (_, Some(otherwise)) => otherwise
                .problem()
                .map(|problem| format!("otherwise: {problem}")),
            (None, None) => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptToolCall {
    name: String,
    #[serde(default)]
    arguments: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    raw_arguments: Option<String>,
}

/// Why a script cannot be used, or cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("{origin}: cannot read: {message}")]
    Read { origin: String, message: String },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: turns[{turn}]: {message}")]
    Turn {
        origin: String,
        turn: usize,
        message: String,
    },
    #[error(
        "{origin}: script exhausted: the conversation already has {played} model turns and the \
         script has {available}"
    )]
    Exhausted {
        origin: String,
        played: usize,
        available: usize,
    },
}

/// How many of the latest requests a scripted model keeps for inspection.
pub const KEPT_REQUESTS: usize = 64;

/// Replays the turns of a script; see the module documentation for the format.
#[derive(Debug)]
pub struct ScriptedModel {
    origin: String,
    conversations: Vec<Conversation>,
    turns: Vec<ScriptTurn>,
    seen: Mutex<std::collections::VecDeque<ChatRequest>>,
}

impl ScriptedModel {
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| ScriptError::Read {
            origin: path.display().to_string(),
            message: error.to_string(),
        })?;
        Self::parse(&text, path)
    }

    /// Parses a script; `origin` names it in every error.
    pub fn parse(text: &str, origin: impl Into<PathBuf>) -> Result<Self, ScriptError> {
        let origin = origin.into().display().to_string();
        let script: Script = serde_saphyr::from_str(text).map_err(|error| ScriptError::Parse {
            origin: origin.clone(),
            message: error.to_string(),
        })?;
        if script.turns.is_empty() && script.conversations.is_empty() {
            return Err(ScriptError::Parse {
                origin,
                message: "the script has no `turns` and no `conversations`".to_owned(),
            });
        }
        let all_turns = script.turns.iter().chain(
            script
                .conversations
                .iter()
                .flat_map(|conversation| conversation.turns.iter()),
        );
        for (turn, entry) in all_turns.enumerate() {
            if let Some(message) = entry.problem() {
                return Err(ScriptError::Turn {
                    origin: origin.clone(),
                    turn,
                    message,
                });
            }
        }
        Ok(Self {
            origin,
            conversations: script.conversations,
            turns: script.turns,
            seen: Mutex::new(std::collections::VecDeque::new()),
        })
    }

    /// The last [`KEPT_REQUESTS`] requests this model answered (or refused), oldest first: what
    /// tests inspect to see what the model was shown. Bounded, so a worker that plays a script
    /// for ever does not keep every conversation it ever saw.
    pub fn requests(&self) -> Vec<ChatRequest> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter().cloned().collect()
    }

    pub fn turn_count(&self) -> usize {
        self.turns.len()
    }
}

#[async_trait::async_trait]
impl Model for ScriptedModel {
    fn describe(&self) -> String {
        format!("scripted:{}", self.origin)
    }

    async fn reply(&self, request: &ChatRequest) -> Result<Reply, ModelError> {
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.len() == KEPT_REQUESTS {
                seen.pop_front();
            }
            seen.push_back(request.clone());
        }
        let played = request
            .messages
            .iter()
            .filter(|message| matches!(message, Message::Assistant { .. }))
            .count();
        let input = request.messages.iter().find_map(|message| match message {
            Message::User { text } => Some(text.as_str()),
            _ => None,
        });
        let turns = self
            .conversations
            .iter()
            .find(|conversation| {
                input.is_some_and(|input| input.contains(&conversation.input_contains))
            })
            .map_or(&self.turns, |conversation| &conversation.turns);
        let turn = turns
            .get(played)
            .ok_or_else(|| ScriptError::Exhausted {
                origin: self.origin.clone(),
                played,
                available: turns.len(),
            })?
            .chosen(&request.messages);
        let tool_calls = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, call)| ToolCall {
                id: format!("call-{played}-{index}"),
                name: call.name.clone(),
                arguments: match (&call.raw_arguments, &call.arguments) {
                    (Some(raw), _) => raw.clone(),
                    (None, Some(arguments)) => {
                        serde_json::Value::Object(arguments.clone()).to_string()
                    }
                    (None, None) => "{}".to_owned(),
                },
            })
            .collect();
        Ok(Reply {
            text: turn.text.clone(),
            tool_calls,
            usage: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_after(assistant_turns: usize) -> ChatRequest {
        let mut messages = vec![Message::User { text: "hi".into() }];
        for _ in 0..assistant_turns {
            messages.push(Message::Assistant {
                text: Some("…".into()),
                tool_calls: vec![],
            });
        }
        ChatRequest {
            messages,
            ..ChatRequest::default()
        }
    }

    const SCRIPT: &str = r#"
turns:
  - text: looking
    tool_calls:
      - name: BrowseWeb
        arguments: { url: "http://127.0.0.1:1/" }
      - name: complete
        raw_arguments: "{not json"
  - text: bye
"#;

    #[tokio::test]
    async fn the_turn_played_is_the_number_of_model_turns_so_far() {
        let model = ScriptedModel::parse(SCRIPT, "script.yaml").unwrap();
        let first = model.reply(&request_after(0)).await.unwrap();
        assert_eq!(first.text.as_deref(), Some("looking"));
        assert_eq!(first.tool_calls.len(), 2);
        assert_eq!(first.tool_calls[0].id, "call-0-0");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&first.tool_calls[0].arguments).unwrap(),
            serde_json::json!({"url": "http://127.0.0.1:1/"})
        );
        assert_eq!(first.tool_calls[1].arguments, "{not json");
        // A second model, as after a restart, continues from the conversation alone.
        let again = ScriptedModel::parse(SCRIPT, "script.yaml").unwrap();
        let second = again.reply(&request_after(1)).await.unwrap();
        assert_eq!(second.text.as_deref(), Some("bye"));
        assert!(second.tool_calls.is_empty());
        assert_eq!(model.requests().len(), 1);
    }

    #[tokio::test]
    async fn an_exhausted_script_is_an_error_that_says_how_far_it_got() {
        let model = ScriptedModel::parse(SCRIPT, "script.yaml").unwrap();
        let error = model.reply(&request_after(2)).await.unwrap_err();
        assert_eq!(error.code(), "model_script");
        let text = error.to_string();
        assert!(
            text.contains("script.yaml") && text.contains("2 model turns"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn conversations_are_chosen_by_the_job_input() {
        let model = ScriptedModel::parse(
            "conversations:\n  - input_contains: child\n    turns: [{ text: from child }]\nturns: [{ text: from parent }]\n",
            "s.yaml",
        )
        .unwrap();
        let ask = |input: &str| ChatRequest {
            messages: vec![Message::User { text: input.into() }],
            ..ChatRequest::default()
        };
        let child = model.reply(&ask("the child task")).await.unwrap();
        assert_eq!(child.text.as_deref(), Some("from child"));
        let parent = model.reply(&ask("the main task")).await.unwrap();
        assert_eq!(parent.text.as_deref(), Some("from parent"));
        assert!(ScriptedModel::parse("turns: []\n", "s.yaml").is_err());
    }

    #[tokio::test]
    async fn a_turn_with_when_follows_the_last_tool_result() {
        let model = ScriptedModel::parse(
            "turns:\n  - text: first\n  - when: { last_result_contains: revise }\n    text: again\n    otherwise: { text: done }\n",
            "s.yaml",
        )
        .unwrap();
        let after = |result: &str| ChatRequest {
            messages: vec![
                Message::User { text: "go".into() },
                Message::Assistant {
                    text: Some("first".into()),
                    tool_calls: vec![],
                },
                Message::Tool {
                    call_id: "c".into(),
                    name: "HandIn".into(),
                    content: result.into(),
                    is_error: false,
                },
            ],
            ..ChatRequest::default()
        };
        let revised = model.reply(&after("status: revise it")).await.unwrap();
        assert_eq!(revised.text.as_deref(), Some("again"));
        let accepted = model.reply(&after("status: accepted")).await.unwrap();
        assert_eq!(accepted.text.as_deref(), Some("done"));
        let error = ScriptedModel::parse(
            "turns:\n  - when: { last_result_contains: x }\n    text: a\n",
            "s.yaml",
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("needs an `otherwise`"),
            "{error}"
        );
    }

    #[test]
    fn bad_scripts_are_refused_with_their_location() {
        let error = ScriptedModel::parse("turns:\n  - {}\n", "s.yaml").unwrap_err();
        assert!(error.to_string().contains("s.yaml: turns[0]"), "{error}");
        let error =
            ScriptedModel::parse("turns:\n  - text: a\n    tools: []\n", "s.yaml").unwrap_err();
        let text = error.to_string();
        assert!(text.contains("s.yaml") && text.contains("tools"), "{text}");
        assert!(text.contains("line 3"), "{text}");
        let error = ScriptedModel::parse(
            "turns:\n  - tool_calls:\n      - name: x\n        arguments: {}\n        raw_arguments: '{}'\n",
            "s.yaml",
        )
        .unwrap_err();
        assert!(error.to_string().contains("tool_calls[0]"), "{error}");
    }
}
