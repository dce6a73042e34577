//! `/mcp` of a real `maestro serve`, driven by the official MCP Python SDK over streamable HTTP:
//! only with a token and from the server's own origin; the tools listed and called, a tool
//! request answered through elicitation on the session's stream; and a plugin installed while
//! the client is connected is announced to it (`notifications/tools/list_changed`) and callable.

mod common;
mod serve_support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use reqwest::Method;
use serde_json::{Value, json};
use serve_support::{APPROVAL_SCRIPT, ServerFolder, TOKEN, TestServer, approval_piece};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_uses_the_tools_over_http_and_hears_of_a_plugin_installed_meanwhile() {
    let server = TestServer::start(ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        maestro_plugins::FIRST_PARTY,
        true,
    ));
    let post = |token: Option<&str>, origin: Option<&str>| {
        let mut request = server
            .http
            .post(server.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(INITIALIZE);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    assert_eq!(post(None, None).await.unwrap().status(), 401);
    assert_eq!(
        post(Some(TOKEN), Some("http://attacker.example"))
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(post(Some(TOKEN), None).await.unwrap().status(), 200);

    let mut command = Command::new(common::toolchain("mcp/bin/python"));
    common::isolate(&mut command);
    let mut client = command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py"))
        .arg("http")
        .arg(server.url("/mcp"))
        .arg(TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let first = tokio::task::block_in_place(|| lines.next());
    assert_eq!(
        first.map(Result::unwrap).as_deref(),
        Some("listed"),
        "{}",
        server.log()
    );

    // A plugin installed while the client is connected.
    let echo = std::fs::read(maestro_plugins::ECHO).unwrap();
    let (status, body) = {
        let response = server
            .request(Method::PUT, "/v1/plugins/echo")
            .body(echo)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    };
    assert!(status == 200 || status == 201, "{status}: {body}");
    writeln!(client.stdin.take().unwrap()).unwrap();
    let rest: Vec<String> = tokio::task::block_in_place(|| lines.map(Result::unwrap).collect());
    let exit = client.wait().unwrap();
    assert!(
        exit.success(),
        "the client failed: {rest:?}\n{}",
        server.log()
    );
    let seen: Value = serde_json::from_str(rest.last().unwrap()).unwrap();

    assert_eq!(seen["protocol_version"], "2025-11-25");
    let tools = seen["tools"].as_array().unwrap();
    for tool in ["BrowseWeb", "RequestTool", "WaitSubTask", "complete"] {
        assert!(tools.contains(&json!(tool)), "{tool} in {tools:?}");
    }
    assert!(!tools.contains(&json!("echo")));
    // The tool request came to the client on its session's stream, with the exact arguments.
    let message = seen["approved_asked"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"{"revoke_old_after_minutes":60,"service":"staging"}"#),
        "{message}"
    );
    let approved: Value = serde_json::from_str(seen["approved"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(approved["decision"], "approved");
    // Told of the new plugin, the client lists it and calls it.
    assert!(
        seen["tools_after_change"]
            .as_array()
            .unwrap()
            .contains(&json!("echo")),
        "{seen}"
    );
    assert_eq!(
        seen["echo"],
        json!({ "is_error": false, "text": "hot loaded" })
    );
}
