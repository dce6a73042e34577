//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): OpenAI itself and
//! the servers that copy its wire format (Ollama, vLLM, the llama.cpp server).
//!
//! Invariant: the same [`Reply`] comes out whether the answer arrived whole or streamed — a
//! stream is assembled chunk by chunk (tool-call fragments by their `index`) and judged by the
//! same rules as a whole body. A stream counts only if it ends properly (`data: [DONE]` or a
//! `finish_reason`); a cut or garbled stream is `Malformed`, never a partial reply.
//!
//! Compatibility choices: `Authorization: Bearer` is sent only when a key is set (local servers
//! need none); the token limit is sent as `max_completion_tokens` to api.openai.com (its newer
//! models refuse `max_tokens`) and as `max_tokens` to everyone else (not all copies know the
//! new name). A tool call without an id gets `call_<index>` so its result can still be paired.

use std::collections::BTreeMap;
use std::fmt;

use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap};
use serde::Deserialize;
use serde_json::{Value, json};

use super::config::{ModelConfig, ModelConfigError};
use super::retry::{ApiEndpoint, endpoint_url, model_label};
use super::{ChatRequest, Message, Model, ModelError, Reply, ToolCall, Usage};

const PROVIDER: &str = "openai";
pub(super) const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A model behind an OpenAI-compatible Chat Completions endpoint.
pub struct OpenAiModel {
    model: String,
    endpoint: ApiEndpoint,
    stream: bool,
    max_tokens: u32,
    temperature: Option<f32>,
    /// api.openai.com wants `max_completion_tokens`; see the module documentation.
    official_api: bool,
    label: String,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl OpenAiModel {
    /// The model `config.model` at `config.base_url` (default: OpenAI's), with the key, token
    /// limit, temperature, timeout, retry policy and streaming choice of `config`. A missing
    /// key is not an error here: local servers need none (see [`ModelConfig::build`]).
    pub fn from_config(config: &ModelConfig) -> Result<Self, ModelConfigError> {
        let base_url = config.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL);
        let url = endpoint_url(PROVIDER, base_url, "chat/completions")?;
        let official_api = url.host_str() == Some("api.openai.com");
        let label = model_label(PROVIDER, &config.model, base_url, DEFAULT_BASE_URL);
        let mut headers = HeaderMap::new();
        let key = config.api_key.as_deref().filter(|key| !key.is_empty());
        if let Some(key) = key {
            let value = ApiEndpoint::secret_header(&format!("Bearer {key}"))
                .ok_or(ModelConfigError::UnusableKey { provider: PROVIDER })?;
            headers.insert(AUTHORIZATION, value);
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
            stream: config.stream,
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            official_api,
            label,
        })
    }

    fn request_body(&self, request: &ChatRequest) -> Value {
        let limit_key = if self.official_api {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        let mut body = json!({
            "model": self.model,
            "messages": wire_messages(request),
        });
        body[limit_key] = json!(self.max_tokens);
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.parameters,
                        },
                    })
                })
                .collect();
        }
        if let Some(temperature) = self.temperature {
            body["temperature"] = json!(temperature);
        }
        if self.stream {
            body["stream"] = json!(true);
            // Without this, a streamed answer reports no token counts.
            body["stream_options"] = json!({ "include_usage": true });
        }
        body
    }

    async fn reply_whole(&self, body: &Value) -> Result<Reply, ModelError> {
        let response: CompletionResponse = self.endpoint.post_for_json(body).await?;
        let Some(choice) = response.choices.into_iter().next() else {
            return Err(malformed("the answer has no choices".to_owned()));
        };
        let calls = choice.message.tool_calls.unwrap_or_default();
        let tool_calls = calls
            .into_iter()
            .enumerate()
            .map(|(index, call)| {
                let arguments = match call.function.arguments {
                    Some(Value::String(text)) => text,
                    // Some servers send the arguments as an object rather than its text.
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                tool_call(index, call.id, call.function.name, arguments)
            })
            .collect::<Result<Vec<_>, _>>()?;
        finish(Assembled {
            text: choice.message.content.unwrap_or_default(),
            refusal: choice.message.refusal.unwrap_or_default(),
            tool_calls,
            usage: response.usage.map(Usage::from),
            finish_reason: choice.finish_reason,
        })
    }

    async fn reply_streamed(&self, body: &Value) -> Result<Reply, ModelError> {
        let response = self.endpoint.post_for_stream(body).await?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("none")
            .to_owned();
        let mut events = response.bytes_stream().eventsource();
        let mut stream = StreamState::default();
        while let Some(event) = events.next().await {
            let event = event.map_err(|error| match error {
                EventStreamError::Transport(error) => self.endpoint.broken_stream(&error),
                other => malformed(format!("the event stream is garbled: {other}")),
            })?;
            let data = event.data.trim();
            if data == "[DONE]" {
                stream.done = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            stream.chunks += 1;
            let chunk: Chunk = serde_json::from_str(data).map_err(|error| {
                malformed(format!(
                    "stream chunk {} is not a completion chunk ({error}): {}",
                    stream.chunks,
                    super::retry::excerpt(data)
                ))
            })?;
            stream.absorb(chunk)?;
        }
        stream.finish(&self.endpoint.shown_url(), &content_type)
    }
}

#[async_trait::async_trait]
impl Model for OpenAiModel {
    fn describe(&self) -> String {
        self.label.clone()
    }

    async fn reply(&self, request: &ChatRequest) -> Result<Reply, ModelError> {
        let body = self.request_body(request);
        let mut reply = if self.stream {
            self.reply_streamed(&body).await
        } else {
            self.reply_whole(&body).await
        }?;
        reply.usage = self.endpoint.used(reply.usage);
        Ok(reply)
    }
}

fn wire_messages(request: &ChatRequest) -> Vec<Value> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({ "role": "system", "content": request.system }));
    }
    for message in &request.messages {
        messages.push(match message {
            Message::User { text } => json!({ "role": "user", "content": text }),
            Message::Assistant { text, tool_calls } => {
                let mut wire = json!({ "role": "assistant", "content": text });
                if !tool_calls.is_empty() {
                    wire["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": "function",
                                "function": { "name": call.name, "arguments": call.arguments },
                            })
                        })
                        .collect();
                } else if text.is_none() {
                    // An assistant message needs content or tool calls.
                    wire["content"] = json!("");
                }
                wire
            }
            // The wire format has no error flag; the engine's content says what went wrong.
            Message::Tool {
                call_id, content, ..
            } => json!({ "role": "tool", "tool_call_id": call_id, "content": content }),
        });
    }
    messages
}

/// A reply put together from a whole body or from stream chunks, not yet judged.
struct Assembled {
    text: String,
    refusal: String,
    tool_calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
}

/// The rules every reply passes, whichever way it arrived.
fn finish(reply: Assembled) -> Result<Reply, ModelError> {
    // A refusal is the model's answer: the engine shows it like text.
    let text = if reply.text.is_empty() {
        reply.refusal
    } else {
        reply.text
    };
    if text.is_empty() && reply.tool_calls.is_empty() {
        // An empty turn is a legitimate answer, but not when the server cut it short: then
        // the cause is this request's settings, and silence would hide it.
        match reply.finish_reason.as_deref() {
            Some("length") => {
                return Err(malformed(
                    "the model hit the token limit (finish_reason \"length\") before writing \
                     any text or tool call; raise max_tokens"
                        .to_owned(),
                ));
            }
            Some("content_filter") => {
                return Err(malformed(
                    "the server's content filter removed the whole answer (finish_reason \
                     \"content_filter\")"
                        .to_owned(),
                ));
            }
            _ => {}
        }
    }
    Ok(Reply {
        text: (!text.is_empty()).then_some(text),
        tool_calls: reply.tool_calls,
        usage: reply.usage,
    })
}

fn tool_call(
    index: usize,
    id: Option<String>,
    name: String,
    arguments: String,
) -> Result<ToolCall, ModelError> {
    if name.is_empty() {
        return Err(malformed(format!("tool call {index} has no function name")));
    }
    Ok(ToolCall {
        id: id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("call_{index}")),
        name,
        arguments,
    })
}

fn malformed(detail: String) -> ModelError {
    ModelError::Malformed {
        provider: PROVIDER.to_owned(),
        detail,
    }
}

/// What the chunks of one stream have said so far.
#[derive(Default)]
struct StreamState {
    text: String,
    refusal: String,
    /// By the `index` the server gives each call: fragments of one call share it.
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    chunks: usize,
    done: bool,
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl StreamState {
    fn absorb(&mut self, chunk: Chunk) -> Result<(), ModelError> {
        if let Some(error) = chunk.error {
            return Err(malformed(format!(
                "the stream reported an error: {}",
                super::retry::server_message(json!({ "error": error }).to_string().as_bytes())
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        // Only one completion is asked for; other choices would belong to another.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index != 0 {
                continue;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            self.text
                .push_str(delta.content.as_deref().unwrap_or_default());
            self.refusal
                .push_str(delta.refusal.as_deref().unwrap_or_default());
            for fragment in delta.tool_calls.unwrap_or_default() {
                // Without an index, a fragment with a new id starts a call and one without
                // continues the last call.
                let index = fragment.index.unwrap_or_else(|| {
                    let last = self.calls.keys().next_back().copied();
                    match (last, &fragment.id) {
                        (Some(last), None) => last,
                        (Some(last), Some(_)) => last + 1,
                        (None, _) => 0,
                    }
                });
                let call = self.calls.entry(index).or_default();
                if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
                    call.id = Some(id);
                }
                if let Some(function) = fragment.function {
                    call.name
                        .push_str(function.name.as_deref().unwrap_or_default());
                    call.arguments
                        .push_str(function.arguments.as_deref().unwrap_or_default());
                }
            }
        }
        Ok(())
    }

    fn finish(self, url: &str, content_type: &str) -> Result<Reply, ModelError> {
        if !self.done && self.finish_reason.is_none() {
            // A server that ignores `stream: true` answers in one JSON body: no events at all.
            let hint = if self.chunks == 0 && !content_type.starts_with("text/event-stream") {
                format!(" (content type {content_type}: is streaming supported there?)")
            } else {
                String::new()
            };
            return Err(malformed(format!(
                "the stream from {url} ended after {} chunks without [DONE] or a \
                 finish_reason: the answer is incomplete{hint}",
                self.chunks
            )));
        }
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(position, (_, call))| tool_call(position, call.id, call.name, call.arguments))
            .collect::<Result<Vec<_>, _>>()?;
        finish(Assembled {
            text: self.text,
            refusal: self.refusal,
            tool_calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
        })
    }
}

// The wire format, as far as it is read. Servers send `null` for absent lists, so every list
// is an `Option`.

#[derive(Deserialize)]
struct CompletionResponse {
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
        }
    }
}

#[derive(Deserialize)]
struct Chunk {
    choices: Option<Vec<ChunkChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u64,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Deserialize)]
struct DeltaToolCall {
    index: Option<u64>,
    id: Option<String>,
    function: Option<DeltaFunction>,
}

#[derive(Deserialize)]
struct DeltaFunction {
    name: Option<String>,
    arguments: Option<String>,
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
