//! Anthropic's Messages API (`POST {base_url}/v1/messages`), without streaming.
//!
//! Invariant: the conversation sent always alternates `user` / `assistant` as the API requires,
//! without dropping or reordering anything the model or a tool said. Our conversation has a
//! message per tool result; the API wants the results of one turn, and any text following
//! them, in a single `user` message — so consecutive messages of the same role are merged, tool
//! results first. Only empty messages are left out (the API refuses empty text blocks).
//!
//! Tool-call arguments are stored as the text the model wrote, but `tool_use.input` must be a
//! JSON object. Arguments that are an object go as that object; empty arguments as `{}`; any
//! other text (broken JSON, an array — possible when the turn came from another provider) as
//! `{"unparsed_arguments": "<the text>"}`, so the model still sees what was written and the
//! error result that follows still makes sense.

use std::fmt;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};

use super::config::{ModelConfig, ModelConfigError};
use super::retry::{ApiEndpoint, endpoint_url, model_label};
use super::{ChatRequest, Message, Model, ModelError, Reply, ToolCall, Usage};

const PROVIDER: &str = "anthropic";
pub(super) const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const API_VERSION: &str = "2023-06-01";

/// A model behind Anthropic's Messages API.
pub struct AnthropicModel {
    model: String,
    endpoint: ApiEndpoint,
    max_tokens: u32,
    temperature: Option<f32>,
    label: String,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl AnthropicModel {
    /// The model `config.model` at `config.base_url` (default: Anthropic's), with the key,
    /// token limit, temperature, timeout and retry policy of `config`; `config.stream` is
    /// ignored. The key is checked by [`ModelConfig::build`], not here.
    pub fn from_config(config: &ModelConfig) -> Result<Self, ModelConfigError> {
        let base_url = config.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL);
        let url = endpoint_url(PROVIDER, base_url, "v1/messages")?;
        let label = model_label(PROVIDER, &config.model, base_url, DEFAULT_BASE_URL);
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        let key = config.api_key.as_deref().filter(|key| !key.is_empty());
        if let Some(key) = key {
            let value = ApiEndpoint::secret_header(key)
                .ok_or(ModelConfigError::UnusableKey { provider: PROVIDER })?;
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        let endpoint = ApiEndpoint::new(
            PROVIDER,
            url,
            headers,
            key.map(str::to_owned),
            config.timeout,
            config.retry,
        )
        .map_err(|error| ModelConfigError::client(PROVIDER, &error))?;
        Ok(Self {
            model: config.model.clone(),
            endpoint,
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            label,
        })
    }

    fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": wire_messages(&request.messages),
        });
        if !request.system.is_empty() {
            body["system"] = json!(request.system);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.parameters,
                    })
                })
                .collect();
        }
        if let Some(temperature) = self.temperature {
            body["temperature"] = json!(temperature);
        }
        body
    }
}

#[async_trait::async_trait]
impl Model for AnthropicModel {
    fn describe(&self) -> String {
        self.label.clone()
    }

    async fn reply(&self, request: &ChatRequest) -> Result<Reply, ModelError> {
        let response: MessagesResponse = self
            .endpoint
            .post_for_json(&self.request_body(request))
            .await?;
        let mut reply = reply_of(response)?;
        reply.usage = self.endpoint.used(reply.usage);
        Ok(reply)
    }
}

fn wire_messages(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::User { text } => ("user", text_block(text).into_iter().collect()),
            Message::Assistant { text, tool_calls } => {
                let text = text.as_deref().and_then(text_block);
                let calls = tool_calls.iter().map(|call| {
                    json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.arguments),
                    })
                });
                ("assistant", text.into_iter().chain(calls).collect())
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => {
                let mut block = json!({ "type": "tool_result", "tool_use_id": call_id });
                // The API refuses empty content; absent content means "no output".
                if !content.is_empty() {
                    block["content"] = json!(content);
                }
                if *is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // The API wants tool results before any text in the same message.
            blocks.sort_by_key(|block| block["type"] != "tool_result");
            json!({ "role": role, "content": blocks })
        })
        .collect()
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
}

/// `tool_use.input` for stored arguments; see the module documentation.
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => json!({ "unparsed_arguments": arguments }),
    }
}

fn reply_of(response: MessagesResponse) -> Result<Reply, ModelError> {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in response.content {
        match block {
            // Text split into blocks (around citations, say) is one text.
            ContentBlock::Text { text: part } => text.push_str(&part),
            ContentBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input.to_string(),
            }),
            ContentBlock::Other => {}
        }
    }
    if text.is_empty() && tool_calls.is_empty() {
        // As for OpenAI: an empty turn cut short by the server is this request's problem.
        let cause = match response.stop_reason.as_deref() {
            Some("max_tokens") => Some(
                "the model hit the token limit (stop_reason \"max_tokens\") before writing any \
                 text or tool call; raise max_tokens",
            ),
            Some("refusal") => {
                Some("the model declined to answer (stop_reason \"refusal\") and wrote nothing")
            }
            _ => None,
        };
        if let Some(cause) = cause {
            return Err(ModelError::Malformed {
                provider: PROVIDER.to_owned(),
                detail: cause.to_owned(),
            });
        }
    }
    Ok(Reply {
        text: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: response.usage.map(Usage::from),
    })
}

// The wire format, as far as it is read.

#[derive(Deserialize)]
struct MessagesResponse {
    content: Vec<ContentBlock>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// Thinking and server-tool blocks: nothing the engine acts on.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        // `input_tokens` counts only what the cache did not cover; the input read is the sum.
        Usage {
            input_tokens: usage
                .input_tokens
                .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0))
                .saturating_add(usage.cache_read_input_tokens.unwrap_or(0)),
            output_tokens: usage.output_tokens,
        }
    }
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
