//! The Anthropic model against a local server speaking the real wire format.

use std::time::Duration;

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::llm::{RetryPolicy, ToolDefinition};

const KEY: &str = "sk-ant-test-0123456789";

fn model(server: &MockServer) -> AnthropicModel {
    let mut config = ModelConfig::from_spec("anthropic:claude-test").unwrap();
    config.base_url = Some(server.uri());
    config.api_key = Some(KEY.to_owned());
    config.max_tokens = 1024;
    config.retry = RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    };
    AnthropicModel::from_config(&config).unwrap()
}

async fn answering(template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

fn message(content: serde_json::Value, stop_reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": 30, "output_tokens": 9,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 100}
    }))
}

fn error_body(kind: &str, text: &str) -> serde_json::Value {
    json!({"type": "error", "error": {"type": kind, "message": text}})
}

/// Two tools called in one turn, both answered, then a word from the user.
fn conversation() -> ChatRequest {
    let call = |id: &str, arguments: &str| ToolCall {
        id: id.into(),
        name: "BrowseWeb".into(),
        arguments: arguments.into(),
    };
    let result = |id: &str, content: &str, is_error| Message::Tool {
        call_id: id.into(),
        name: "BrowseWeb".into(),
        content: content.into(),
        is_error,
    };
    ChatRequest {
        system: "Be brief.".into(),
        messages: vec![
            Message::User {
                text: "Compare two pages.".into(),
            },
            Message::Assistant {
                text: Some("Reading both.".into()),
                tool_calls: vec![
                    call("toolu_1", r#"{"url":"http://a/"}"#),
                    call("toolu_2", "{broken"),
                ],
            },
            result("toolu_1", "page a", false),
            result("toolu_2", "arguments are not valid JSON", true),
            Message::User {
                text: "Hurry.".into(),
            },
        ],
        tools: vec![ToolDefinition {
            name: "BrowseWeb".into(),
            description: "Fetch a page".into(),
            parameters: json!({"type": "object", "properties": {"url": {"type": "string"}}}),
        }],
    }
}

async fn requests(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap_or_default()
}

#[tokio::test]
async fn text_and_tool_use_blocks_become_a_reply() {
    let server = answering(message(
        json!([
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Checking "},
            {"type": "text", "text": "both."},
            {"type": "tool_use", "id": "toolu_9", "name": "BrowseWeb",
             "input": {"url": "http://b/"}}
        ]),
        "tool_use",
    ))
    .await;
    let reply = model(&server).reply(&conversation()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("Checking both."));
    assert_eq!(
        reply.tool_calls,
        [ToolCall {
            id: "toolu_9".into(),
            name: "BrowseWeb".into(),
            arguments: r#"{"url":"http://b/"}"#.into()
        }]
    );
    // Tokens read from the cache are input too.
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 130,
            output_tokens: 9
        })
    );
}

#[tokio::test]
async fn the_request_alternates_roles_and_merges_tool_results() {
    let server = answering(message(json!([{"type": "text", "text": "ok"}]), "end_turn")).await;
    model(&server).reply(&conversation()).await.unwrap();
    let request = &requests(&server).await[0];
    assert_eq!(request.headers.get("x-api-key").unwrap(), KEY);
    assert_eq!(
        request.headers.get("anthropic-version").unwrap(),
        "2023-06-01"
    );
    assert!(request.headers.get("authorization").is_none());
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 1024);
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(
        body["tools"],
        json!([{"name": "BrowseWeb", "description": "Fetch a page",
                "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Compare two pages."}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "toolu_1", "name": "BrowseWeb",
                 "input": {"url": "http://a/"}},
                {"type": "tool_use", "id": "toolu_2", "name": "BrowseWeb",
                 "input": {"unparsed_arguments": "{broken"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "page a"},
                {"type": "tool_result", "tool_use_id": "toolu_2",
                 "content": "arguments are not valid JSON", "is_error": true},
                {"type": "text", "text": "Hurry."}
            ]}
        ])
    );
}

#[test]
fn empty_messages_are_left_out_and_tool_results_come_first() {
    let messages = [
        Message::User { text: "go".into() },
        Message::Assistant {
            text: None,
            tool_calls: vec![ToolCall {
                id: "t".into(),
                name: "noop".into(),
                arguments: String::new(),
            }],
        },
        Message::User {
            text: "also this".into(),
        },
        Message::Tool {
            call_id: "t".into(),
            name: "noop".into(),
            content: String::new(),
            is_error: false,
        },
        Message::Assistant {
            text: Some(String::new()),
            tool_calls: vec![],
        },
        Message::User { text: "".into() },
    ];
    assert_eq!(
        Value::Array(wire_messages(&messages)),
        json!([
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "noop", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t"},
                {"type": "text", "text": "also this"}]}
        ])
    );
    assert_eq!(
        tool_input(r#"[1, 2]"#),
        json!({"unparsed_arguments": "[1, 2]"})
    );
}

#[tokio::test]
async fn an_error_body_gives_its_message() {
    let body = error_body(
        "invalid_request_error",
        "messages.0.content: Field required",
    );
    let server = answering(ResponseTemplate::new(400).set_body_json(body)).await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "anthropic: request refused (HTTP 400): invalid_request_error: messages.0.content: \
         Field required"
    );
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn a_401_is_an_auth_error_without_retry() {
    let body = error_body("authentication_error", "invalid x-api-key");
    let server = answering(ResponseTemplate::new(401).set_body_json(body)).await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::Auth { status: 401, message, .. }
            if message.contains("invalid x-api-key")),
        "{error:?}"
    );
    assert!(!format!("{error:?}").contains(KEY));
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn rate_limits_and_overload_are_retried_then_reported() {
    let body = error_body(
        "rate_limit_error",
        "Number of requests has exceeded your limit",
    );
    let server = answering(ResponseTemplate::new(429).set_body_json(body)).await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::RateLimited { attempts: 2, message, .. }
            if message.contains("exceeded your limit")),
        "{error:?}"
    );
    assert_eq!(requests(&server).await.len(), 2);

    let body = error_body("overloaded_error", "Overloaded");
    let server = answering(ResponseTemplate::new(529).set_body_json(body)).await;
    let error = model(&server).reply(&conversation()).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::Server { status: 529, attempts: 2, message, .. }
            if message == "overloaded_error: Overloaded"),
        "{error:?}"
    );
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn bodies_that_break_the_wire_format_are_malformed() {
    let cases = [
        (
            ResponseTemplate::new(200).set_body_string("not json"),
            "not json",
        ),
        (
            ResponseTemplate::new(200).set_body_json(json!({"id": "msg"})),
            "content",
        ),
        (
            ResponseTemplate::new(200)
                .set_body_json(json!({"content": [{"type": "tool_use", "id": "t"}]})),
            "name",
        ),
        (message(json!([]), "max_tokens"), "raise max_tokens"),
    ];
    for (template, needle) in cases {
        let server = answering(template).await;
        let error = model(&server).reply(&conversation()).await.unwrap_err();
        assert!(
            matches!(&error, ModelError::Malformed { provider, detail }
                if provider == "anthropic" && detail.contains(needle)),
            "{error:?}"
        );
    }
}
