//! `/mcp` of a real `maestro serve`, driven by the official MCP Python SDK (and the TypeScript
//! SDK, a client of 2025-11-25) over streamable HTTP:
//! only with a token and from the server's own origin; the tools listed and called by a client
//! of revision 2025-11-25 and one of 2026-07-28, a tool request answered through elicitation on
//! the session's stream or as an `input_required` result; a plugin installed while the clients
//! are connected is announced to both (`notifications/tools/list_changed`) and callable. A
//! question's sealed state outlives a restart of the server, opens only for its caller's token,
//! and is answered once. A piece is a tool too: to a client of the tasks extension its call is a
//! task, which is its job, so it outlives a restart and an answer in the inbox moves it; to
//! another client the call follows the job, asking its question in the middle of the call where
//! the revision allows it, and otherwise saying where the job waits.

mod common;
mod serve_support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use common::McpSdk;
use reqwest::Method;
use serde_json::{Value, json};
use serve_support::{APPROVED, TOKEN, TestServer, approval_folder, check_asked_in_call};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_uses_the_tools_over_http_and_hears_of_a_plugin_installed_meanwhile() {
    let server = TestServer::start(approval_folder(true));
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

    // A client of each revision, connected at once.
    let mut clients: Vec<_> = ["legacy", "auto"]
        .into_iter()
        .map(|mode| {
            let mut client = McpSdk::Python
                .command(&["http", mode, &server.url("/mcp"), TOKEN])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
            let first = tokio::task::block_in_place(|| lines.next());
            assert_eq!(
                first.map(Result::unwrap).as_deref(),
                Some("listed"),
                "{mode}: {}",
                server.log()
            );
            (mode, client, lines)
        })
        .collect();

    // A plugin installed while the clients are connected.
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
    for (mode, mut client, lines) in clients.drain(..) {
        writeln!(client.stdin.take().unwrap()).unwrap();
        let rest: Vec<String> = tokio::task::block_in_place(|| lines.map(Result::unwrap).collect());
        let exit = client.wait().unwrap();
        assert!(
            exit.success(),
            "the {mode} client failed: {rest:?}\n{}",
            server.log()
        );
        let seen: Value = serde_json::from_str(rest.last().unwrap()).unwrap();
        let revision = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(seen["protocol_version"], revision);
        check_http_client(&seen);
    }
}

/// What a client of either revision saw: the tools, a tool request approved with its exact
/// arguments shown, and the plugin installed while it was connected.
fn check_http_client(seen: &Value) {
    let tools = seen["tools"].as_array().unwrap();
    for tool in ["BrowseWeb", "RequestTool", "WaitSubTask", "complete"] {
        assert!(tools.contains(&json!(tool)), "{tool} in {tools:?}");
    }
    assert!(!tools.contains(&json!("echo")));
    // The tool request came to the client (on its session's stream, or as the call's result),
    // with the exact arguments.
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

/// Runs the Python client on `args` to its end; what it saw.
fn run_python(args: &[&str], server: &TestServer) -> Value {
    server.mcp_client(McpSdk::Python, args)
}

/// A server of the approval piece whose API takes two tokens: [`TOKEN`] and this one.
const OTHER_TOKEN: &str = "another-token-for-another-caller";

fn two_token_server() -> TestServer {
    let folder = approval_folder(true);
    let config = folder.path("maestro.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let two_tokens = format!("tokens = [\"{TOKEN}\", \"{OTHER_TOKEN}\"]");
    std::fs::write(
        &config,
        text.replace(&format!("tokens = [\"{TOKEN}\"]"), &two_tokens),
    )
    .unwrap();
    TestServer::start(folder)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_piece_is_a_task_that_outlives_a_restart_and_moves_by_tasks_update_or_the_inbox() {
    let server = two_token_server();
    let asked = tokio::task::block_in_place(|| {
        run_python(&["task-ask", &server.url("/mcp"), TOKEN], &server)
    });
    assert_eq!(asked["protocol_version"], "2026-07-28");
    // The call came back as a task at once, and the task asks for the approval its job waits for.
    assert_eq!(asked["handle"]["resultType"], "task", "{asked}");
    let task = asked["handle"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(asked["asked"]["status"], "input_required", "{asked}");
    let requests = asked["asked"]["inputRequests"].as_object().unwrap();
    let (key, request) = requests.iter().next().unwrap();
    let message = request["params"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"{"revoke_old_after_minutes":60,"service":"staging"}"#),
        "{message}"
    );
    // The task is the job, which the API shows waiting for that approval.
    let job = task.split_once('.').unwrap().0.to_owned();
    let shown = server.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(shown["status"], "waiting_human", "{shown}");
    assert_eq!(key, &format!("wait-{}", shown["wait"]["id"]));

    // The server goes down and comes back: the task is read from the store.
    let server = tokio::task::block_in_place(|| server.restart());
    let seen = tokio::task::block_in_place(|| {
        run_python(
            &[
                "task-answer",
                &server.url("/mcp"),
                TOKEN,
                OTHER_TOKEN,
                &task,
            ],
            &server,
        )
    });
    // Another token's client cannot see it; its own sees the same question, refuses a reply
    // that names no open question or gives no decision, and takes the approval.
    assert_eq!(seen["other_caller"]["code"], -32602, "{seen}");
    assert_eq!(seen["before"]["status"], "input_required", "{seen}");
    assert!(seen["before"]["inputRequests"].get(key).is_some(), "{seen}");
    assert_eq!(seen["wrong_key"]["code"], -32602, "{seen}");
    let no_decision = seen["no_decision"]["message"].as_str().unwrap();
    assert!(no_decision.contains("`decision`"), "{no_decision}");
    assert_eq!(seen["after"]["status"], "completed", "{seen}");
    assert_eq!(seen["after"]["result"]["content"][0]["text"], APPROVED);
    let shown = server.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(shown["status"], "completed", "{shown}");

    // A question answered in the inbox (the API) moves the task too.
    let asked = tokio::task::block_in_place(|| {
        run_python(&["task-ask", &server.url("/mcp"), TOKEN], &server)
    });
    let task = asked["handle"]["taskId"].as_str().unwrap().to_owned();
    let job = task.split_once('.').unwrap().0.to_owned();
    let waiting = server.get(&format!("/v1/jobs/{job}")).await;
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{job}/approve"),
            json!({ "wait": waiting["wait"]["id"] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let done = tokio::task::block_in_place(|| {
        run_python(&["task-wait", &server.url("/mcp"), TOKEN, &task], &server)
    });
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], APPROVED);

    // The SDK's own call, finished by the extension's claim: it polls, is asked, answers; and a
    // task cancelled with tasks/cancel cancels its job.
    let seen = tokio::task::block_in_place(|| {
        run_python(&["task-run", &server.url("/mcp"), TOKEN], &server)
    });
    assert_eq!(
        seen["ran"],
        json!({ "is_error": false, "text": APPROVED }),
        "{seen}"
    );
    assert!(
        seen["asked"][0].as_str().unwrap().contains("RotateKey"),
        "{seen}"
    );
    assert_eq!(seen["cancelled"]["status"], "cancelled", "{seen}");
    let cancelled = seen["cancelled"]["taskId"].as_str().unwrap();
    let job = cancelled.split_once('.').unwrap().0;
    let shown = server.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(shown["status"], "cancelled", "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_piece_called_without_tasks_is_asked_in_the_call_or_says_where_its_job_waits() {
    let server = two_token_server();
    for mode in ["legacy", "auto"] {
        let seen = tokio::task::block_in_place(|| {
            run_python(&["pieces", mode, &server.url("/mcp"), TOKEN], &server)
        });
        // The piece is listed with its description and an `input`.
        let schema = &seen["piece"]["schema"];
        assert_eq!(schema["required"], json!(["input"]), "{seen}");
        assert!(
            seen["piece"]["description"]
                .as_str()
                .unwrap()
                .starts_with("Prepare a change"),
            "{seen}"
        );
        let bad = seen["bad_arguments"]["message"].as_str().unwrap();
        assert!(bad.contains("no argument `text`"), "{mode}: {bad}");
        if mode == "legacy" {
            check_asked_in_call(&seen);
        } else {
            // 2026-07-28 forbids it: without tasks the call says where the job waits.
            assert_eq!(seen["asked_in_call"]["is_error"], true, "{seen}");
        }
        check_unasked_piece(&seen, &server).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_a_proxy_the_job_pages_mcp_clients_are_sent_to_are_at_the_public_url() {
    let folder =
        approval_folder(true).with_server_setting(r#"public_url = "https://maestro.example.com/""#);
    let server = TestServer::start(folder);
    let seen = tokio::task::block_in_place(|| {
        run_python(&["pieces", "auto", &server.url("/mcp"), TOKEN], &server)
    });
    // Told where the job waits: at the address the operator gave, not the one the request
    // named.
    let told = seen["unasked"]["text"].as_str().unwrap();
    assert!(
        told.contains("(https://maestro.example.com/jobs/job-"),
        "{told}"
    );
    assert!(!told.contains("127.0.0.1"), "{told}");
}

/// What a client that cannot be asked saw of the piece: where its job waits, which it does.
async fn check_unasked_piece(seen: &Value, server: &TestServer) {
    let told = seen["unasked"]["text"].as_str().unwrap();
    assert!(told.contains("waits for a person"), "{told}");
    let job = common::job_of_page(told, &server.url(""));
    let shown = server.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(shown["status"], "waiting_human", "{shown}");
    assert!(
        told.contains(&server.url(&format!("/jobs/{job}"))),
        "{told}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_calls_tools_and_pieces_over_http_and_answers_their_questions_in_the_call()
 {
    let server = two_token_server();
    let seen = tokio::task::block_in_place(|| {
        server.mcp_client(McpSdk::TypeScript, &["http", &server.url("/mcp"), TOKEN])
    });
    assert_eq!(seen["protocol_version"], "2025-11-25", "{seen}");
    let tools = seen["tools"].as_array().unwrap();
    for tool in [
        "BrowseWeb",
        "RequestTool",
        "WaitSubTask",
        "complete",
        "approval",
    ] {
        assert!(tools.contains(&json!(tool)), "{tool} in {tools:?}");
    }
    assert_eq!(seen["piece"]["schema"]["required"], json!(["input"]));
    // The tool request, asked on the session's stream with its exact arguments.
    let message = seen["approved_asked"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"{"revoke_old_after_minutes":60,"service":"staging"}"#),
        "{message}"
    );
    let approved: Value = serde_json::from_str(seen["approved"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(approved["decision"], "approved", "{seen}");
    let declined: Value = serde_json::from_str(seen["declined"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(declined["decision"], "denied", "{seen}");
    check_asked_in_call(&seen);
    let bad = seen["bad_arguments"]["message"].as_str().unwrap();
    assert!(bad.contains("no argument `text`"), "{bad}");
    check_unasked_piece(&seen, &server).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_asked_before_a_restart_is_answered_after_it_once_and_only_by_its_caller() {
    let server = two_token_server();
    let asked =
        tokio::task::block_in_place(|| run_python(&["ask", &server.url("/mcp"), TOKEN], &server));
    assert_eq!(asked["protocol_version"], "2026-07-28");
    let message = asked["message"].as_str().unwrap();
    assert!(message.contains("Tool: RotateKey"), "{message}");
    let state = asked["state"].as_str().unwrap().to_owned();

    // The server goes down and comes back: the state is sealed under the store's key.
    let server = tokio::task::block_in_place(|| server.restart());
    let seen = tokio::task::block_in_place(|| {
        run_python(
            &["answer", &server.url("/mcp"), TOKEN, OTHER_TOKEN, &state],
            &server,
        )
    });
    // Another token may not answer it; its own may, once.
    assert_eq!(seen["other_caller"]["code"], -32602, "{seen}");
    let other = seen["other_caller"]["message"].as_str().unwrap();
    assert!(other.contains("requestState is not valid"), "{other}");
    let answered: Value = serde_json::from_str(seen["answered"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answered["decision"], "approved", "{seen}");
    assert_eq!(seen["answered_again"]["code"], -32602, "{seen}");
    let again = seen["answered_again"]["message"].as_str().unwrap();
    assert!(again.contains("already answered"), "{again}");
}
