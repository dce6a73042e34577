//! `--log-format json`: log lines on stderr as one JSON object each, and a line written during
//! a tool call names the job, the call, the plugin and the trace it happened in.

mod common;

use std::path::Path;

use serde_json::Value;

const PIECE: &str = "
name: logger
initial_movement: work
max_movements: 1
movements:
  - name: work
    instructions: Log a warning, then complete.
    tools: [log, complete]
";

const SCRIPT: &str = r#"
turns:
  - tool_calls: [{ name: log, arguments: { message: "disk nearly full", level: warn } }]
  - tool_calls: [{ name: complete, arguments: { status: done, summary: "logged" } }]
"#;

#[test]
fn a_json_log_line_names_its_job_call_plugin_and_trace() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    for path in [maestro_plugins::ECHO, maestro_plugins::COMPLETE] {
        let name = Path::new(path).file_name().unwrap();
        std::fs::copy(path, plugins.join(name)).unwrap();
    }
    std::fs::write(dir.path().join("logger.yaml"), PIECE).unwrap();
    std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
    // Traces on, to an address where nothing listens: the export fails, the ids are made.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let output = common::maestro_command()
        .arg("run")
        .arg(dir.path().join("logger.yaml"))
        .args(["--input", "log something", "--log-format", "json"])
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            dir.path().join("script.yaml").display()
        ))
        .arg("--plugins")
        .arg(&plugins)
        .arg("--store")
        .arg(dir.path().join("jobs.db"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{closed}"))
        .env_remove("MAESTRO_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let job = format!("{stdout}{stderr}")
        .split_whitespace()
        .find(|word| word.starts_with("job-"))
        .expect("the run names its job")
        .trim_end_matches(':')
        .to_owned();

    let lines: Vec<Value> = stderr
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let warning = lines
        .iter()
        .find(|line| line["message"] == "disk nearly full")
        .unwrap_or_else(|| panic!("no line for the plugin's warning in:\n{stderr}"));
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["target"], "maestro::guest");
    let spans = warning["spans"]
        .as_array()
        .expect("the spans it happened in");
    let span = |name: &str| {
        spans
            .iter()
            .find(|span| span["name"] == name)
            .unwrap_or_else(|| panic!("no {name} span in {warning}"))
    };
    let run = span("run");
    assert_eq!(run["maestro.job.id"], job.as_str(), "{warning}");
    let trace = run["maestro.trace_id"].as_str().unwrap_or_default();
    assert_eq!(trace.len(), 32, "the trace's id: {warning}");
    let call = span("tool.call");
    assert_eq!(call["maestro.plugin"], "echo");
    assert_eq!(call["maestro.tool"], "log");
    assert!(
        !call["maestro.call.id"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(span("movement")["maestro.movement"], "work");
}
