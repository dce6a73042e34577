//! Language models behind one trait: a conversation and tool definitions in, text and/or tool
//! calls out.
//!
//! Invariant: every provider speaks only the types of this module to the engine. Whatever a
//! provider's server answers — an HTTP error, a rate limit, a body that is not what the wire
//! format promises — becomes a [`ModelError`] that names the provider and what went wrong; no
//! answer from a server can panic the host. Tool-call arguments are passed on as the exact text
//! the model produced: judging them is the engine's job, so a model that writes broken JSON is
//! told so and can try again.

mod anthropic;
mod config;
mod openai;
mod retry;
mod scripted;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use anthropic::AnthropicModel;
pub use config::{ModelConfig, ModelConfigError, Provider};
pub use openai::OpenAiModel;
pub use retry::RetryPolicy;
pub use scripted::{ScriptError, ScriptedModel};

/// One entry of a conversation, in the order the model saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Text from the user, or from the engine speaking for the user (movement instructions,
    /// resume notes).
    User { text: String },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The answer to one tool call of the preceding assistant message.
    Tool {
        call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

/// A tool call as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call (used to pair it with its result).
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them; usually a JSON object, not guaranteed.
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Everything a model needs for one turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Standing instructions (the system prompt).
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
}

/// One turn of the model.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reply {
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// Tokens in and out, when the provider reports them.
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Reply {
    /// The assistant message this reply adds to the conversation.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            text: self.text.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// Why a model gave no reply. Each variant names the provider (`openai`, `anthropic`,
/// `scripted`, …) so that a log line or a job's error says whose answer it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// 401/403: the key is missing, wrong or lacks access. Never retried.
    #[error("{provider}: authentication failed (HTTP {status}): {message}")]
    Auth {
        provider: String,
        status: u16,
        message: String,
    },
    /// 429 on every attempt the retry policy allowed.
    #[error("{provider}: rate limited, gave up after {attempts} attempts: {message}")]
    RateLimited {
        provider: String,
        attempts: u32,
        message: String,
    },
    /// 5xx on every attempt the retry policy allowed.
    #[error("{provider}: server error (HTTP {status}) after {attempts} attempts: {message}")]
    Server {
        provider: String,
        status: u16,
        attempts: u32,
        message: String,
    },
    /// Any other HTTP error status (400, 404, 413, …): the request itself was refused.
    #[error("{provider}: request refused (HTTP {status}): {message}")]
    Refused {
        provider: String,
        status: u16,
        message: String,
    },
    /// The server answered 2xx with a body that does not follow the wire format.
    #[error("{provider}: malformed response: {detail}")]
    Malformed { provider: String, detail: String },
    /// The server could not be reached or the connection broke.
    #[error("{provider}: transport error: {message}")]
    Transport { provider: String, message: String },
    /// The scripted model's script is exhausted or does not fit the conversation.
    #[error("scripted: {0}")]
    Script(#[from] ScriptError),
}

impl ModelError {
    /// A short stable code for APIs and events.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Auth { .. } => "model_auth",
            ModelError::RateLimited { .. } => "model_rate_limited",
            ModelError::Server { .. } => "model_server_error",
            ModelError::Refused { .. } => "model_request_refused",
            ModelError::Malformed { .. } => "model_malformed_response",
            ModelError::Transport { .. } => "model_transport",
            ModelError::Script(_) => "model_script",
        }
    }
}

/// A language model. Implementations are cheap to share (`Arc<dyn Model>`) and safe to call
/// from many jobs at once.
#[async_trait::async_trait]
pub trait Model: Send + Sync {
    /// What to call this model in logs and job records, e.g. `openai:gpt-4o-mini`.
    fn describe(&self) -> String;

    /// One turn: the model reads the conversation and answers with text and/or tool calls.
    async fn reply(&self, request: &ChatRequest) -> Result<Reply, ModelError>;
}

impl fmt::Debug for dyn Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}
