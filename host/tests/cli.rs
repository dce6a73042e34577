//! The `maestro` binary: `plugin list|describe|call`, parks with the resume
//! hint, errors with exit codes, and bad policy files.

use std::path::Path;
use std::process::{Command, Output};

mod common;

use maestro_plugins as artifacts;
use serde_json::{Value, json};

fn maestro() -> Command {
    common::maestro_command()
}

fn run(args: &[&str]) -> (Output, Value) {
    let output = maestro().args(args).output().unwrap();
    let json = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output, json)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn describe_prints_the_tool_specs() {
    let (output, json) = run(&["plugin", "describe", artifacts::COMPLETE]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json["plugin"], "complete");
    assert_eq!(json["tools"][0]["name"], "complete");
    assert_eq!(json["tools"][0]["parameters"]["type"], "object");
}

#[test]
fn call_parks_and_the_printed_resume_command_finishes_it() {
    let args =
        r#"{"tool":"SendMail","reason":"notify the team","arguments":{"to":"team@example.com"}}"#;
    let (output, parked) = run(&[
        "plugin",
        "call",
        artifacts::REQUEST_TOOL,
        "RequestTool",
        "--args",
        args,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        parked["outcome"]["park"]["tool-request"]["tool"],
        "SendMail"
    );
    let call_id = parked["call_id"].as_str().unwrap();
    let hint = stderr(&output);
    assert!(
        hint.contains("Resume this call with") && hint.contains(&format!("--call-id {call_id}")),
        "{hint}"
    );

    let (output, resumed) = run(&[
        "plugin",
        "call",
        artifacts::REQUEST_TOOL,
        "RequestTool",
        "--args",
        args,
        "--call-id",
        call_id,
        "--resume",
        r#""approved""#,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(resumed["call_id"], call_id);
    let text: Value = serde_json::from_str(resumed["outcome"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(text["decision"], "approved");
    assert_eq!(text["arguments"], json!({"to": "team@example.com"}));
}

#[test]
fn a_limit_is_reported_as_json_with_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[plugins.hostile]\ncpu_ms = 100\n").unwrap();
    let (output, json) = run(&[
        "plugin",
        "call",
        artifacts::HOSTILE,
        "spin",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(json["error"]["code"], "limit");
    assert_eq!(json["error"]["limit"], "cpu");
}

#[test]
fn a_fuel_budget_in_the_policy_is_metered() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[plugins.hostile]\nfuel = 5000000\n").unwrap();
    let (output, json) = run(&[
        "plugin",
        "call",
        artifacts::HOSTILE,
        "spin",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(json["error"]["limit"], "fuel", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget of 5000000 fuel units"),
        "{json}"
    );
}

#[test]
fn bad_input_exits_2_with_the_reason() {
    let (output, _) = run(&[
        "plugin",
        "call",
        artifacts::ECHO,
        "echo",
        "--args",
        "{not json",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--args is not JSON"));

    let (output, _) = run(&[
        "plugin",
        "call",
        artifacts::ECHO,
        "echo",
        "--resume",
        r#"{"approve":1}"#,
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--resume is not a resume value"));

    let (output, _) = run(&["plugin", "describe", artifacts::NOT_A_COMPONENT]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("not a component"));
}

#[test]
fn bad_policy_files_name_the_offending_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[plugins.echo]\nmemory_mib = 64\ntimeout = 5\n",
            "policy.toml:3:1",
            "timeout",
        ),
        (
            "[plugins.echo]\ncpu_ms = -5\n",
            "policy.toml:2:10",
            "cpu_ms",
        ),
        (
            "[plugins.echo]\nhttp_allow = [\"http://x.org\"]\n",
            "policy.toml:2:15",
            "plugins.echo.http_allow",
        ),
        (
            "[defaults]\nmax_output_bytes = 0\n",
            "policy.toml:2:20",
            "defaults.max_output_bytes",
        ),
        (
            "[plugin.echo]\nmemory_mib = 1\n",
            "policy.toml:1:2",
            "plugin",
        ),
    ];
    for (text, location, key) in cases {
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, text).unwrap();
        let (output, _) = run(&[
            "plugin",
            "describe",
            artifacts::ECHO,
            "--policy",
            policy.to_str().unwrap(),
        ]);
        assert_eq!(output.status.code(), Some(2), "{text}");
        let message = stderr(&output);
        assert!(
            message.contains(location) && message.contains(key),
            "{text}\n→ {message}"
        );
    }
}

#[test]
fn list_loads_a_folder_and_reports_what_fails() {
    let (output, json) = run(&["plugin", "list", artifacts::DIR]);
    assert!(output.status.success(), "{}", stderr(&output));
    let rows = json.as_array().unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["plugin"] == name)
            .unwrap_or_else(|| panic!("{name} listed"))
    };
    assert_eq!(row("browse_web")["tools"], json!(["BrowseWeb"]));
    assert_eq!(row("wait_subtask")["tools"], json!(["WaitSubTask"]));
    assert_eq!(row("spawn_subtask")["tools"], json!(["SpawnSubTask"]));
    assert_eq!(
        rows.len(),
        artifacts::FIRST_PARTY.len(),
        "only the first-party plugins: {rows:?}"
    );

    let (output, json) = run(&["plugin", "list", artifacts::TEST_DIR]);
    assert!(output.status.success(), "{}", stderr(&output));
    let rows = json.as_array().unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["plugin"] == name)
            .unwrap_or_else(|| panic!("{name} listed"))
    };
    assert_eq!(row("echo")["tools"], json!(["echo", "log"]));
    assert_eq!(row("not_a_component")["error"]["code"], "core-module");
    assert_eq!(row("wrong_world")["error"]["code"], "wrong-world");
}

#[test]
fn a_tool_offered_by_two_plugins_stops_a_run_naming_both() {
    let plugins = tempfile::tempdir().unwrap();
    for name in ["echo", "echo2"] {
        std::fs::copy(artifacts::ECHO, plugins.path().join(format!("{name}.wasm"))).unwrap();
    }
    std::fs::copy(artifacts::COMPLETE, plugins.path().join("complete.wasm")).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let store = tempfile::tempdir().unwrap();
    let output = maestro()
        .args(["run", "chat", "--input", "hello", "--plugins"])
        .arg(plugins.path())
        .arg("--pieces")
        .arg(repo.join("pieces"))
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            repo.join("pieces/scripts/chat.yaml").display()
        ))
        .arg("--store")
        .arg(store.path().join("jobs.db"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("tool `echo` is offered by two plugins: `echo` and `echo2`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn piece_lint_passes_the_examples_and_names_each_problem() {
    let pieces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pieces");
    let (output, _) = run(&[
        "piece",
        "lint",
        pieces.to_str().unwrap(),
        "--plugins",
        artifacts::DIR,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("6 piece(s) checked: no problem"),
        "{}",
        stderr(&output)
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "name: bad\ninitial_movement: start\nmax_movements: 3\nmovements:\n  - name: start\n    instructions: go\n    tools: [Teleport]\n    rules:\n      - condition: done\n        next: COMPLETE\n",
    )
    .unwrap();
    let output = maestro()
        .args([
            "piece",
            "lint",
            bad.to_str().unwrap(),
            "--plugins",
            artifacts::DIR,
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        report.contains("bad.yaml:7:13: movements[0].tools[0]") && report.contains("Teleport"),
        "{report}"
    );
    assert!(
        report.contains("bad.yaml:10:15: movements[0].rules[0].next")
            && report.contains("sentinel"),
        "{report}"
    );
}

#[test]
fn piece_graph_draws_a_piece_by_name_in_each_format_and_marks_a_movement() {
    let pieces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pieces");
    let pieces = pieces.to_str().unwrap();
    let draw = |format: &str, extra: &[&str]| {
        let mut args = vec![
            "piece", "graph", "research", "--pieces", pieces, "--format", format,
        ];
        args.extend_from_slice(extra);
        let output = maestro().args(&args).output().unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        String::from_utf8(output.stdout).unwrap()
    };
    let mermaid = draw("mermaid", &["--current", "gather"]);
    assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
    assert!(mermaid.contains("class m1 current"), "{mermaid}");
    let dot = draw("dot", &[]);
    assert!(
        dot.starts_with("digraph \"research\" {") && dot.ends_with("}\n"),
        "{dot}"
    );
    let svg = draw("svg", &["--current", "write"]);
    assert!(
        svg.contains("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(
        svg.contains(r#"id="node-m2" class="node movement current" data-movement="write""#),
        "{svg}"
    );

    // A piece file works without a pieces folder; a movement it lacks is a usage error.
    let file = Path::new(pieces).join("chat.yaml");
    let output = maestro()
        .args([
            "piece",
            "graph",
            file.to_str().unwrap(),
            "--current",
            "nowhere",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--current: piece `chat` has no movement `nowhere`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn loading_a_folder_says_what_it_compiled_and_draws_a_bar_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    for path in [artifacts::ECHO, artifacts::COMPLETE] {
        std::fs::copy(path, plugins.join(Path::new(path).file_name().unwrap())).unwrap();
    }
    let cache = dir.path().join("cache");
    let list = [
        "plugin",
        "list",
        plugins.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];

    // Not a terminal: a line per component compiled, none for one taken from the cache.
    let (first, listed) = run(&list);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    for name in ["complete", "echo"] {
        assert!(
            stderr(&first).contains(&format!("compiled {name} in ")),
            "{}",
            stderr(&first)
        );
    }
    let (again, _) = run(&list);
    assert!(again.status.success());
    assert!(!stderr(&again).contains("compiled"), "{}", stderr(&again));

    // On a terminal (a pseudo-terminal from `script`): the bar.
    std::fs::remove_dir_all(&cache).unwrap();
    let command = std::iter::once(env!("CARGO_BIN_EXE_maestro").to_owned())
        .chain(list.iter().map(|arg| arg.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let output = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("loading plugins"), "{shown}");
    assert!(shown.contains("compiled echo in "), "{shown}");
}
