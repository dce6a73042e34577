//! `maestro plugin check` on every plugin the project ships, each built from source: the
//! first-party tools and the examples in WAT, C, Python and JavaScript pass, and each example's
//! park is reached and resumed; a hostile plugin fails and the report says why.

use std::process::Output;

mod common;

use maestro_examples as examples;
use maestro_plugins as artifacts;
use serde_json::Value;

/// `maestro plugin check` with `args`, with no policy from the environment.
fn plugin_check(args: &[&str]) -> Output {
    common::maestro_command()
        .args(["plugin", "check"])
        .args(args)
        .output()
        .unwrap()
}

fn check(component: &str, extra: &[&str]) -> (Output, Value) {
    let output = plugin_check(&[&["--json", component], extra].concat());
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "{component}: the report is not JSON ({err}):\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, report)
}

fn checks<'a>(report: &'a Value, name: &str) -> Vec<&'a Value> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|check| check["check"] == name)
        .collect()
}

fn assert_passes(component: &str) -> Value {
    let (output, report) = check(component, &[]);
    assert!(
        output.status.success() && report["passed"] == true,
        "{component}:\n{report:#}"
    );
    for name in ["load", "describe", "call", "invalid-arguments"] {
        assert!(
            !checks(&report, name).is_empty(),
            "{component}: no {name} check"
        );
    }
    report
}

#[test]
fn every_first_party_plugin_passes() {
    for component in artifacts::FIRST_PARTY.iter().chain([&artifacts::ECHO]) {
        assert_passes(component);
    }
}

#[test]
fn every_example_passes_and_its_park_is_resumed_with_each_answer() {
    let parks = [
        (examples::CONFIRM, "park ask", 2),
        (examples::TEXT_STATS, "park ask", 2),
        (examples::CONVERT_UNITS, "park ask", 2),
        (examples::RENDER_TABLE, "park tool-request", 3),
    ];
    for (component, park, answers) in parks {
        let report = assert_passes(component);
        let calls = checks(&report, "call");
        assert!(
            calls
                .iter()
                .any(|c| c["detail"].as_str().unwrap().ends_with(park)),
            "{component}: no call reached `{park}`:\n{report:#}"
        );
        let resumes = checks(&report, "resume");
        assert!(
            calls
                .iter()
                .chain(&resumes)
                .any(|c| c["detail"].as_str().unwrap().contains("→ output")),
            "{component}: no call gave an ordinary output:\n{report:#}"
        );
        assert!(resumes.len() >= answers, "{component}:\n{report:#}");
        assert!(resumes.iter().all(|c| c["status"] == "pass"));
    }
}

#[test]
fn a_plugin_that_breaks_the_policy_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    // Cuts the hostile loops short, yet leaves the harmless calls room on a loaded machine.
    std::fs::write(&policy, "[defaults]\ntimeout_ms = 2000\n").unwrap();
    let (output, report) = check(artifacts::HOSTILE, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(report["passed"], false);
    let failed: Vec<&Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .collect();
    let spin = failed
        .iter()
        .find(|c| c["tool"] == "spin")
        .unwrap_or_else(|| panic!("spin must fail:\n{report:#}"));
    assert!(spin["detail"].as_str().unwrap().contains("limit"), "{spin}");
    assert!(failed.iter().any(|c| c["tool"] == "panic"), "{report:#}");
}

#[test]
fn text_output_is_a_readable_table_and_a_missing_file_is_a_clear_failure() {
    let output = plugin_check(&[examples::CONFIRM]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("PASS  resume"), "{text}");
    assert!(text.contains("passed: "), "{text}");

    let (output, report) = check("/nonexistent/tool.wasm", &[]);
    assert_eq!(output.status.code(), Some(1));
    let load = &checks(&report, "load")[0];
    assert_eq!(load["status"], "fail");
    assert!(
        load["detail"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/tool.wasm")
    );
}

#[test]
fn a_0_2_0_tool_is_checked_as_one_and_its_new_parks_are_resumed() {
    for (component, version, park, answers) in [
        (artifacts::HAND_IN, "maestro:tool@0.2.0", "park artifact", 3),
        (
            artifacts::RUN_WORKER,
            "maestro:tool@0.2.0",
            "park worker",
            1,
        ),
        (
            artifacts::REQUEST_TOOL,
            "maestro:tool@0.1.0",
            "park tool-request",
            2,
        ),
    ] {
        let report = assert_passes(component);
        let load = &checks(&report, "load")[0];
        assert!(
            load["detail"]
                .as_str()
                .unwrap()
                .starts_with(&format!("targets {version}")),
            "{component}: {load}"
        );
        let calls = checks(&report, "call");
        assert!(
            calls
                .iter()
                .any(|c| c["detail"].as_str().unwrap().ends_with(park)),
            "{component}: no call reached `{park}`:\n{report:#}"
        );
        let resumed = checks(&report, "resume")
            .into_iter()
            .filter(|c| c["detail"].as_str().unwrap().starts_with(park))
            .filter(|c| !c["detail"].as_str().unwrap().contains("expired"))
            .count();
        assert!(
            resumed >= answers,
            "{component}: {resumed} resumes:\n{report:#}"
        );
    }
}
