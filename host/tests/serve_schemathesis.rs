//! `maestro serve` against its own API description, checked from the outside by schemathesis
//! (from PyPI; `.ci/install` puts it under the target dir): every generated request, valid or
//! not, in every phase (coverage, fuzzing, and stateful runs that follow the description's links
//! from a created job to the routes that take its id), gets an answer the description allows,
//! with the status, headers and body it documents, and never a server error.

mod common;
mod serve_support;

use std::path::PathBuf;
use std::process::Command;

use serve_support::{APPROVAL_SCRIPT, ServerFolder, TOKEN, TestServer, approval_piece};

#[test]
fn every_generated_request_gets_an_answer_the_api_description_allows() {
    let schemathesis = common::toolchain("schemathesis/bin/schemathesis");
    let server = TestServer::start(ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
        true,
    ));
    let config =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis/schemathesis.toml");
    // schemathesis keeps its crash cache in the folder it runs in: a throwaway one, not the repo.
    let scratch = tempfile::tempdir().unwrap();
    let output = Command::new(&schemathesis)
        .current_dir(scratch.path())
        .arg("--no-color")
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(server.url("/openapi.json"))
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--checks", "all"])
        .args(["--max-examples", "10"])
        .args(["--seed", "20261201"])
        // An event stream of a job that waits never ends: it is read for this long.
        .args(["--request-timeout", "3"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found what the description does not allow:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        report.contains("✅ Stateful"),
        "the stateful phase ran:\n{report}"
    );
}
