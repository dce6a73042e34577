//! `maestro mcp --jobs` on stdio, driven by the official MCP Python SDK: the pieces are tools
//! beside the plugins' tools, a call of one is a job of the store run by the process's own
//! runners, a task for a client of the tasks extension that outlives the process (the next
//! `maestro mcp` on the store answers it and runs the job to its end), and for a 2025-11-25
//! client a question asked in the middle of the call; a client that cannot be asked is sent to
//! the job's page at the public address the operator gave.

mod common;
mod serve_support;

use common::McpSdk;
use serde_json::{Value, json};
use serve_support::{APPROVED, ServerFolder, approval_folder, check_asked_in_call};

/// The folder's config: the approval piece, its scripted model, the first-party plugins and a
/// SQLite store.
fn folder() -> ServerFolder {
    approval_folder(false)
}

/// The client's target: `maestro mcp --jobs` on `folder`'s config, started by the client.
fn stdio(folder: &ServerFolder, extra: &[&str]) -> String {
    let config = folder.path("maestro.toml");
    let mut command = vec![
        env!("CARGO_BIN_EXE_maestro"),
        "mcp",
        "--jobs",
        "--config",
        config.to_str().unwrap(),
    ];
    command.extend(extra);
    format!("stdio:{}", serde_json::to_string(&command).unwrap())
}

/// Runs the Python client on `args` to its end; what it saw.
fn python(args: &[&str]) -> Value {
    let output = McpSdk::Python.command(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("the client printed no JSON ({error}):\n{stdout}"))
}

/// The status of `job` in `folder`'s store, as `maestro jobs show` reads it.
fn status_of(folder: &ServerFolder, job: &str) -> String {
    let output = common::maestro_command()
        .args(["jobs", "show", job, "--json", "--config"])
        .arg(folder.path("maestro.toml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    shown["status"].as_str().unwrap().to_owned()
}

#[test]
fn a_piece_called_over_stdio_is_a_task_of_the_store_that_the_next_process_finishes() {
    let folder = folder();
    let target = stdio(&folder, &[]);
    let asked = python(&["task-ask", &target, "-"]);
    assert_eq!(asked["protocol_version"], "2026-07-28", "{asked}");
    assert_eq!(asked["handle"]["resultType"], "task", "{asked}");
    assert_eq!(asked["asked"]["status"], "input_required", "{asked}");
    let task = asked["handle"]["taskId"].as_str().unwrap().to_owned();
    let (_, request) = asked["asked"]["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let message = request["params"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"{"revoke_old_after_minutes":60,"service":"staging"}"#),
        "{message}"
    );
    // The client went, and its `maestro mcp` with it: the job waits in the store.
    let job = task.split_once('.').unwrap().0.to_owned();
    assert_eq!(status_of(&folder, &job), "waiting_human");

    // Another `maestro mcp` on the store opens the same task, takes its approval, and its
    // runners run the job to its end.
    let seen = python(&["task-answer", &target, "-", "-", &task]);
    assert_eq!(seen["before"]["status"], "input_required", "{seen}");
    assert_eq!(seen["wrong_key"]["code"], -32602, "{seen}");
    assert_eq!(seen["after"]["status"], "completed", "{seen}");
    assert_eq!(seen["after"]["result"]["content"][0]["text"], APPROVED);
    assert_eq!(status_of(&folder, &job), "completed");
}

#[test]
fn a_piece_called_over_stdio_is_asked_in_the_call_or_sends_the_person_to_the_public_address() {
    let folder = folder();
    let target = stdio(
        &folder,
        &["--public-url", "https://maestro.example.com/ops/"],
    );
    let seen = python(&["pieces", "legacy", &target, "-"]);
    assert_eq!(seen["protocol_version"], "2025-11-25", "{seen}");
    // The plugins' tools and the piece, side by side.
    let tools = seen["tools"].as_array().unwrap();
    for tool in ["approval", "RequestTool", "BrowseWeb", "complete"] {
        assert!(tools.contains(&json!(tool)), "{tool} missing: {seen}");
    }
    assert_eq!(seen["piece"]["schema"]["required"], json!(["input"]));
    check_asked_in_call(&seen);
    let bad = seen["bad_arguments"]["message"].as_str().unwrap();
    assert!(bad.contains("no argument `text`"), "{bad}");
    // A client that cannot be asked is told where the job waits: its page at the address the
    // operator gave, the job waiting there.
    let told = seen["unasked"]["text"].as_str().unwrap();
    let job = common::job_of_page(told, "https://maestro.example.com/ops");
    assert_eq!(status_of(&folder, job), "waiting_human");
}

#[test]
fn a_public_url_that_is_not_an_http_address_stops_the_start_naming_it() {
    let folder = folder();
    let output = common::maestro_command()
        .args([
            "mcp",
            "--jobs",
            "--public-url",
            "maestro.example.com",
            "--config",
        ])
        .arg(folder.path("maestro.toml"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--public-url (or MAESTRO_PUBLIC_URL): `maestro.example.com` is not a URL"),
        "{stderr}"
    );
}

#[test]
fn maestro_mcp_with_jobs_stops_its_runners_when_the_client_goes_or_on_sigterm() {
    use std::io::Read;
    let folder = folder();
    for signal in [None, Some("TERM")] {
        let mut command = common::maestro_command();
        command
            .args(["mcp", "--jobs", "--config"])
            .arg(folder.path("maestro.toml"))
            .stderr(std::process::Stdio::piped());
        let (mut server, input, _output) = common::initialized_mcp(command);
        let input = match signal {
            None => {
                drop(input);
                None
            }
            Some(signal) => {
                let sent = std::process::Command::new("kill")
                    .args(["-s", signal, &server.id().to_string()])
                    .status()
                    .unwrap();
                assert!(sent.success());
                Some(input)
            }
        };
        let deadline = std::time::Instant::now() + serve_support::STATE_WAIT;
        let status = loop {
            if let Some(status) = server.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running ({signal:?})"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        drop(input);
        let mut said = String::new();
        server
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut said)
            .unwrap();
        assert!(status.success(), "{signal:?}: {status}\n{said}");
        assert!(said.contains("maestro mcp done: "), "{signal:?}: {said}");
    }
}
