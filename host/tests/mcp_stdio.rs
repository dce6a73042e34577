//! `maestro mcp` on stdio, driven by clients nobody here wrote: the official MCP Python SDK
//! (`mcp` from PyPI; `.ci/install` puts it under the target dir), running
//! `host/tests/mcp/client.py`, as a client of revision 2025-11-25 (asked in the middle of a
//! call) and of 2026-07-28 (sent the question as a result, with a sealed state to call again
//! with); and the official TypeScript SDK (`@modelcontextprotocol/sdk` from npm), running
//! `host/tests/mcp/typescript/client.mjs` as a client of 2025-11-25. Each lists the first-party tools with their schemas, calls a tool, gets a tool's failure
//! as a result the model can read, answers a question and a tool request (approved, then
//! declined), sees a park come back as a plain result to a client that cannot be asked, holds
//! the operator's approval gate, and refuses a state answered twice, altered or sent with other
//! arguments.

mod common;

use std::path::Path;

use common::McpSdk;
use serde_json::{Value, json};

/// Runs `sdk`'s `scenario` against `maestro mcp` on `plugins`, with `extra` arguments for
/// maestro; what the client saw.
fn client(sdk: McpSdk, plugins: &Path, scenario: &[&str], extra: &[&str]) -> Value {
    let output = sdk
        .command(scenario)
        .arg(env!("CARGO_BIN_EXE_maestro"))
        .arg(plugins)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the {sdk:?} client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("the client printed no JSON ({error}):\n{stdout}\n{stderr}"))
}

/// A plugin folder with every first-party plugin and the `echo` test plugin.
fn plugins() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for plugin in maestro_plugins::FIRST_PARTY
        .iter()
        .chain([&maestro_plugins::ECHO])
    {
        let name = Path::new(plugin).file_name().unwrap();
        std::fs::copy(plugin, dir.path().join(name)).unwrap();
    }
    dir
}

fn text(result: &Value) -> &str {
    result["text"].as_str().unwrap()
}

#[test]
fn the_python_sdk_lists_calls_and_answers_parks_in_the_middle_of_a_call_on_2025_11_25() {
    let plugins = plugins();
    let seen = client(McpSdk::Python, plugins.path(), &["tour", "legacy"], &[]);
    assert_eq!(seen["protocol_version"], "2025-11-25");
    check_tour(&seen);
}

#[test]
fn the_typescript_sdk_lists_calls_and_answers_parks_in_the_middle_of_a_call() {
    let plugins = plugins();
    let seen = client(McpSdk::TypeScript, plugins.path(), &["tour"], &[]);
    assert_eq!(seen["protocol_version"], "2025-11-25");
    check_tour(&seen);
}

#[test]
fn the_python_sdk_lists_calls_and_answers_parks_as_input_required_on_2026_07_28() {
    let plugins = plugins();
    // The client probes `server/discover` and adopts the newest revision the server offers.
    let seen = client(McpSdk::Python, plugins.path(), &["tour", "auto"], &[]);
    assert_eq!(seen["protocol_version"], "2026-07-28");
    check_tour(&seen);
}

/// What the tour saw, the same on every revision.
fn check_tour(seen: &Value) {
    let tools = &seen["tools"];
    for tool in [
        "BrowseWeb",
        "RequestTool",
        "WaitSubTask",
        "complete",
        "echo",
    ] {
        assert!(tools[tool]["description"].is_string(), "{tool}: {tools}");
        assert_eq!(tools[tool]["schema"]["type"], "object", "{tool}");
    }
    assert_eq!(
        tools["RequestTool"]["schema"]["required"],
        json!(["tool", "reason", "arguments"])
    );
    assert_eq!(
        tools["echo"]["schema"]["properties"]["text"]["type"],
        "string"
    );

    assert_eq!(
        seen["echo"],
        json!({ "is_error": false, "text": "hello, sandbox" })
    );
    // Arguments that break the schema never reach the tool: the model reads why.
    assert_eq!(seen["invalid"]["is_error"], true);
    assert!(
        text(&seen["invalid"]).contains("invalid-arguments"),
        "{}",
        seen["invalid"]
    );
    // A method nobody knows is an error, and the connection goes on.
    assert_eq!(seen["unknown_method"]["code"], -32601);
    assert_eq!(seen["tools_after_unknown"], 9);

    // A client without elicitation gets what the call waits for, never a hang.
    assert_eq!(seen["unasked"]["is_error"], true);
    let unasked = text(&seen["unasked"]);
    assert!(unasked.contains("cannot be asked"), "{unasked}");
    assert!(unasked.contains("RotateKey"), "{unasked}");

    // The tool request as an elicitation: the exact tool and arguments, approve or deny.
    let asked = &seen["approved_asked"];
    assert_eq!(asked.as_array().unwrap().len(), 1, "{asked}");
    let message = asked[0]["message"].as_str().unwrap();
    assert!(message.contains("Tool: RotateKey"), "{message}");
    assert!(
        message.contains(r#"{"revoke_old_after_minutes":60,"service":"staging"}"#),
        "{message}"
    );
    assert_eq!(asked[0]["schema"]["required"], json!(["decision"]));
    let approved: Value = serde_json::from_str(text(&seen["approved"])).unwrap();
    assert_eq!(approved["decision"], "approved", "{approved}");
    assert_eq!(
        approved["arguments"],
        json!({ "service": "staging", "revoke_old_after_minutes": 60 })
    );
    let declined: Value = serde_json::from_str(text(&seen["declined"])).unwrap();
    assert_eq!(declined["decision"], "denied", "{declined}");

    // `complete` asking the user: a one-field form, the answer resumes the call.
    assert_eq!(seen["answered_asked"][0]["message"], "Which city?");
    let answered: Value = serde_json::from_str(text(&seen["answered"])).unwrap();
    assert_eq!(answered["answer"], "Lisbon", "{answered}");
}

#[test]
fn the_operators_approval_gate_holds_a_call_until_the_client_approves_it() {
    let clients = [
        (McpSdk::Python, &["gate", "legacy"][..]),
        (McpSdk::Python, &["gate", "auto"]),
        (McpSdk::TypeScript, &["gate"]),
    ];
    for (sdk, scenario) in clients {
        let plugins = plugins();
        let policy = plugins.path().join("policy.toml");
        std::fs::write(&policy, "[plugins.echo]\nrequire_approval = true\n").unwrap();
        let seen = client(
            sdk,
            plugins.path(),
            scenario,
            &["--policy", policy.to_str().unwrap()],
        );
        check_gate(&seen);
    }
}

fn check_gate(seen: &Value) {
    let message = seen["approved_asked"][0]["message"].as_str().unwrap();
    assert!(message.contains("plugin `echo`"), "{message}");
    assert!(message.contains(r#"{"text":"gated"}"#), "{message}");
    assert_eq!(
        seen["approved"],
        json!({ "is_error": false, "text": "gated" })
    );
    assert_eq!(seen["denied"]["is_error"], true);
    assert_eq!(
        text(&seen["denied"]),
        "Not run: the call was denied: not now"
    );
}

#[test]
fn a_2026_state_is_answered_once_and_never_altered_or_moved_to_other_arguments() {
    let plugins = plugins();
    let seen = client(McpSdk::Python, plugins.path(), &["rounds"], &[]);
    assert_eq!(seen["protocol_version"], "2026-07-28");
    // The tool request comes back as one question, with the exact arguments.
    assert_eq!(seen["questions"], json!(["question"]));
    let message = seen["message"].as_str().unwrap();
    assert!(message.contains("Tool: RotateKey"), "{message}");
    let approved: Value = serde_json::from_str(text(&seen["answered"])).unwrap();
    assert_eq!(approved["decision"], "approved", "{seen}");
    // The same state and answer again: refused, as a second answer to a job is.
    assert_eq!(seen["answered_again"]["code"], -32602, "{seen}");
    let again = seen["answered_again"]["message"].as_str().unwrap();
    assert!(again.contains("already answered"), "{again}");
    // Altered, or sent with other arguments: one refusal that tells nothing more.
    for refused in ["altered", "other_arguments"] {
        assert_eq!(seen[refused]["code"], -32602, "{refused}: {seen}");
        let message = seen[refused]["message"].as_str().unwrap();
        assert!(message.contains("requestState is not valid"), "{message}");
    }
    let missing = seen["no_answer"]["message"].as_str().unwrap();
    assert!(missing.contains("inputResponses.question"), "{missing}");
    // Refused tries spend nothing: the state's own answer still goes through.
    let second: Value = serde_json::from_str(text(&seen["second_answered"])).unwrap();
    assert_eq!(second["decision"], "approved", "{seen}");
}

#[test]
fn maestro_mcp_reads_and_writes_its_pipes_without_blocking_on_descriptions_of_its_own() {
    let plugins = plugins();
    let mut command = common::maestro_command();
    command
        .args(["mcp", "--plugins"])
        .arg(plugins.path())
        .stderr(std::process::Stdio::null());
    let (mut server, input, _output) = common::initialized_mcp(command);

    // Each of its standard pipes is open a second time, non-blocking, on the runtime's
    // reactor; the standard descriptors themselves keep blocking, for anything it starts.
    let proc = std::path::PathBuf::from(format!("/proc/{}", server.id()));
    let target = |fd: &str| std::fs::read_link(proc.join("fd").join(fd)).unwrap();
    let non_blocking = |fd: &str| {
        let info = std::fs::read_to_string(proc.join("fdinfo").join(fd)).unwrap();
        let flags = info
            .lines()
            .find_map(|line| line.strip_prefix("flags:"))
            .unwrap()
            .trim();
        u32::from_str_radix(flags, 8).unwrap() & 0o4000 != 0
    };
    for standard in ["0", "1"] {
        let pipe = target(standard);
        assert!(pipe.to_string_lossy().starts_with("pipe:"), "{pipe:?}");
        assert!(
            !non_blocking(standard),
            "fd {standard} was made non-blocking"
        );
        let reopened = std::fs::read_dir(proc.join("fd"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|fd| fd != standard && target(fd) == pipe)
            .any(|fd| non_blocking(&fd));
        assert!(
            reopened,
            "no non-blocking descriptor of fd {standard}'s pipe"
        );
    }
    drop(input);
    assert!(
        server.wait().unwrap().success(),
        "ends when its client goes"
    );
}
