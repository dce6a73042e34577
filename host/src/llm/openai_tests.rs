//! The OpenAI-compatible model against a local server speaking the real wire format.

use std::time::Duration;

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::llm::{RetryPolicy, ToolDefinition};

const KEY: &str = "sk-test-0123456789";

fn config(server: &MockServer) -> ModelConfig {
    let mut config = ModelConfig::from_spec("openai:gpt-test").unwrap();
    config.base_url = Some(format!("{}/v1", server.uri()));
    config.api_key = Some(KEY.to_owned());
    config.retry = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    };
    config
}

fn model(server: &MockServer) -> OpenAiModel {
    OpenAiModel::from_config(&config(server)).unwrap()
}

fn streaming_model(server: &MockServer) -> OpenAiModel {
    let mut config = config(server);
    config.stream = true;
    OpenAiModel::from_config(&config).unwrap()
}

/// A conversation with every kind of message: a tool was called and answered.
fn conversation() -> ChatRequest {
    ChatRequest {
        system: "Be brief.".into(),
        messages: vec![
            Message::User {
                text: "What does the page say?".into(),
            },
            Message::Assistant {
                text: Some("Reading it.".into()),
                tool_calls: vec![ToolCall {
                    id: "call_a".into(),
                    name: "BrowseWeb".into(),
                    arguments: r#"{"url":"http://127.0.0.1:1/"}"#.into(),
                }],
            },
            Message::Tool {
                call_id: "call_a".into(),
                name: "BrowseWeb".into(),
                content: "hello".into(),
                is_error: false,
            },
        ],
        tools: vec![ToolDefinition {
            name: "BrowseWeb".into(),
            description: "Fetch a page".into(),
            parameters: json!({"type": "object", "properties": {"url": {"type": "string"}}}),
        }],
    }
}

async fn answering(template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

fn completion(message: serde_json::Value, finish_reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "logprobs": null,
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 5, "total_tokens": 26},
        "system_fingerprint": "fp_1"
    }))
}

fn sse(events: &[&str]) -> ResponseTemplate {
    let body: String = events
        .iter()
        .map(|data| format!("data: {data}\n\n"))
        .collect();
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

async fn requests(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap_or_default()
}

async fn sent_body(server: &MockServer) -> serde_json::Value {
    serde_json::from_slice(&requests(server).await[0].body).unwrap()
}

fn assert_malformed(error: &ModelError, needle: &str) {
    assert!(
        matches!(error, ModelError::Malformed { detail, .. } if detail.contains(needle)),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_text_reply_is_read_with_its_usage() {
    let message = json!({"role": "assistant", "content": "Hello there.", "refusal": null,
                         "annotations": []});
    let server = answering(completion(message, "stop")).await;
    let reply = model(&server).reply(&conversation()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("Hello there."));
    assert!(reply.tool_calls.is_empty());
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 21,
            output_tokens: 5
        })
    );
}

#[tokio::test]
async fn tool_calls_keep_their_ids_and_exact_argument_text() {
    let message = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "BrowseWeb", "arguments": "{\"url\": \"http://a/\"}"}},
        {"id": "call_2", "type": "function",
         "function": {"name": "complete", "arguments": "{not json"}}
    ]});
    let server = answering(completion(message, "tool_calls")).await;
    let reply = model(&server).reply(&conversation()).await.unwrap();
    assert_eq!(reply.text, None);
    let calls: Vec<_> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_1", "BrowseWeb", r#"{"url": "http://a/"}"#),
            ("call_2", "complete", "{not json")
        ]
    );
}

#[tokio::test]
async fn the_request_carries_the_whole_conversation_and_the_tools() {
    let message = json!({"role": "assistant", "content": "ok"});
    let server = answering(completion(message, "stop")).await;
    model(&server).reply(&conversation()).await.unwrap();
    let request = &requests(&server).await[0];
    assert_eq!(
        request.headers.get("authorization").unwrap(),
        &format!("Bearer {KEY}")
    );
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["max_tokens"], 4096);
    assert!(body.get("stream").is_none() && body.get("temperature").is_none());
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What does the page say?"},
            {"role": "assistant", "content": "Reading it.", "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "BrowseWeb", "arguments": "{\"url\":\"http://127.0.0.1:1/\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_a", "content": "hello"}
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "BrowseWeb", "description": "Fetch a page",
            "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}
        }}])
    );
}

#[tokio::test]
async fn without_a_key_no_authorization_header_is_sent() {
    let server = answering(completion(
        json!({"role": "assistant", "content": "hi"}),
        "stop",
    ))
    .await;
    let mut config = config(&server);
    config.api_key = None;
    let request = ChatRequest {
        messages: vec![Message::User { text: "hi".into() }],
        ..ChatRequest::default()
    };
    OpenAiModel::from_config(&config)
        .unwrap()
        .reply(&request)
        .await
        .unwrap();
    let sent = &requests(&server).await[0];
    assert!(sent.headers.get("authorization").is_none());
    let body: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    // No system prompt, no tools: neither is sent.
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    assert!(body.get("tools").is_none());
}

#[test]
fn openai_itself_gets_the_new_name_of_the_token_limit() {
    let mut config = ModelConfig::from_spec("openai:gpt-5").unwrap();
    config.temperature = Some(0.5);
    let model = OpenAiModel::from_config(&config).unwrap();
    let body = model.request_body(&ChatRequest::default());
    assert_eq!(body["max_completion_tokens"], 4096);
    assert!(body.get("max_tokens").is_none());
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(model.describe(), "openai:gpt-5");
}

#[tokio::test]
async fn a_stream_is_assembled_into_text_tool_calls_and_usage() {
    let server = answering(sse(&[
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"look."},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"BrowseWeb","arguments":""}}]},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"url\":"}}]},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_y","type":"function","function":{"name":"complete","arguments":"{}"}}]},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \"http://a/\"}"}}]},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":12,"total_tokens":52}}"#,
        "[DONE]",
    ]))
    .await;
    let reply = streaming_model(&server)
        .reply(&conversation())
        .await
        .unwrap();
    assert_eq!(reply.text.as_deref(), Some("Let me look."));
    assert_eq!(
        reply.tool_calls,
        [
            ToolCall {
                id: "call_x".into(),
                name: "BrowseWeb".into(),
                arguments: r#"{"url": "http://a/"}"#.into()
            },
            ToolCall {
                id: "call_y".into(),
                name: "complete".into(),
                arguments: "{}".into()
            }
        ]
    );
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 40,
            output_tokens: 12
        })
    );
    let body = sent_body(&server).await;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_stream_that_finished_but_sent_no_done_still_counts() {
    let server = answering(sse(&[
        r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#,
    ]))
    .await;
    let reply = streaming_model(&server)
        .reply(&conversation())
        .await
        .unwrap();
    assert_eq!(reply.text.as_deref(), Some("hi"));
}

#[tokio::test]
async fn a_stream_cut_before_its_end_is_malformed() {
    let server = answering(sse(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"x","arguments":"{\"a"}}]},"finish_reason":null}]}"#,
    ]))
    .await;
    let error = streaming_model(&server)
        .reply(&conversation())
        .await
        .unwrap_err();
    assert_malformed(&error, "without [DONE]");
}

#[tokio::test]
async fn a_stream_chunk_that_is_not_json_is_malformed() {
    let server = answering(sse(&[
        r#"{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}"#,
        "{this is not json",
        "[DONE]",
    ]))
    .await;
    let error = streaming_model(&server)
        .reply(&conversation())
        .await
        .unwrap_err();
    assert_malformed(&error, "stream chunk 2");
}

#[tokio::test]
async fn an_error_inside_a_stream_is_reported_with_its_message() {
    let server = answering(sse(&[
        r#"{"error":{"message":"model overloaded","type":"server_error"}}"#,
    ]))
    .await;
    let error = streaming_model(&server)
        .reply(&conversation())
        .await
        .unwrap_err();
    assert_malformed(&error, "server_error: model overloaded");
}

#[tokio::test]
async fn a_401_is_an_auth_error_with_the_servers_message_and_no_retry() {
    let server = answering(ResponseTemplate::new(401).set_body_json(json!({"error": {
        "message": format!("Incorrect API key provided: {KEY}."),
        "type": "invalid_request_error", "param": null, "code": "invalid_api_key"
    }})))
    .await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::Auth { status: 401, message, .. }
            if message.contains("Incorrect API key")),
        "{error:?}"
    );
    // Even when the server echoes the key, the error does not.
    assert!(!format!("{error} {error:?}").contains(KEY), "{error:?}");
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn rate_limits_are_retried_until_the_server_answers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_json(json!({"error": {"message": "slow down"}})),
        )
        .up_to_n_times(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(completion(
            json!({"role": "assistant", "content": "done"}),
            "stop",
        ))
        .mount(&server)
        .await;
    let reply = model(&server).reply(&conversation()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("done"));
    let sent = requests(&server).await;
    assert_eq!(sent.len(), 3);
    // Every attempt sends the same request.
    assert!(sent.iter().all(|request| request.body == sent[0].body));
}

#[tokio::test]
async fn a_rate_limit_that_lasts_gives_up_after_the_allowed_attempts() {
    let server = answering(
        ResponseTemplate::new(429).set_body_json(json!({"error": {"message": "quota exceeded"}})),
    )
    .await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::RateLimited { attempts: 3, message, .. }
            if message == "quota exceeded"),
        "{error:?}"
    );
    assert_eq!(requests(&server).await.len(), 3);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let server =
        answering(ResponseTemplate::new(503).set_body_string("upstream unavailable")).await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::Server { status: 503, attempts: 3, message, .. }
            if message == "upstream unavailable"),
        "{error:?}"
    );
    assert_eq!(requests(&server).await.len(), 3);
}

#[tokio::test]
async fn a_400_is_refused_at_once_with_the_servers_message() {
    let server = answering(ResponseTemplate::new(400).set_body_json(json!({"error": {
        "message": "Invalid schema for function 'BrowseWeb'", "type": "invalid_request_error"
    }})))
    .await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::Refused { status: 400, message, .. }
            if message.contains("Invalid schema for function 'BrowseWeb'")),
        "{error:?}"
    );
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn bodies_that_break_the_wire_format_are_malformed() {
    let cases = [
        (
            ResponseTemplate::new(200).set_body_string("<html>gateway</html>"),
            "<html>gateway",
        ),
        (
            ResponseTemplate::new(200).set_body_json(json!({"id": "x"})),
            "choices",
        ),
        (
            ResponseTemplate::new(200).set_body_json(json!({"choices": []})),
            "no choices",
        ),
        (
            ResponseTemplate::new(200).set_body_json(json!({"choices": [{"message":
                {"tool_calls": [{"id": "c", "function": {"name": "", "arguments": "{}"}}]}}]})),
            "no function name",
        ),
    ];
    for (template, needle) in cases {
        let server = answering(template).await;
        let error = model(&server).reply(&conversation()).await.unwrap_err();
        assert_malformed(&error, needle);
    }
}

#[tokio::test]
async fn an_empty_answer_cut_by_the_token_limit_names_max_tokens() {
    let server = answering(completion(
        json!({"role": "assistant", "content": ""}),
        "length",
    ))
    .await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert_malformed(&error, "raise max_tokens");
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error_after_the_retries() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut config = ModelConfig::from_spec("openai:gpt-test").unwrap();
    config.base_url = Some(format!("http://127.0.0.1:{closed_port}/v1"));
    config.retry = RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    };
    let model = OpenAiModel::from_config(&config).unwrap();
    let error = model.reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::Transport { message, .. }
            if message.contains("127.0.0.1") && message.contains("after 2 attempts")),
        "{error:?}"
    );
    assert_eq!(
        model.describe(),
        format!("openai:gpt-test@http://127.0.0.1:{closed_port}/v1")
    );
}

#[tokio::test]
async fn a_server_slower_than_the_timeout_is_a_transport_error() {
    let slow = completion(json!({"role": "assistant", "content": "late"}), "stop")
        .set_delay(Duration::from_millis(500));
    let server = answering(slow).await;
    let mut config = config(&server);
    config.timeout = Duration::from_millis(50);
    config.retry.max_attempts = 1;
    let error = OpenAiModel::from_config(&config)
        .unwrap()
        .reply(&conversation())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ModelError::Transport { message, .. } if message.contains("timed out")),
        "{error:?}"
    );
}

#[test]
fn stream_fragments_without_index_or_id_still_form_calls() {
    let mut stream = StreamState::default();
    for chunk in [
        json!({"choices": [{"delta": {"tool_calls": [{"function": {"name": "a", "arguments": "{"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "}"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"id": "b1", "function": {"name": "b"}}]}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ] {
        stream
            .absorb(serde_json::from_value(chunk).unwrap())
            .unwrap();
    }
    let reply = stream.finish("test", "text/event-stream").unwrap();
    let calls: Vec<_> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(calls, [("call_0", "a", "{}"), ("b1", "b", "")]);
}
