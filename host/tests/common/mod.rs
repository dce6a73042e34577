//! What every test of the `maestro` binary shares (each test binary uses part of it).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `maestro` binary with a compile cache shared across test runs (the Python and
/// JavaScript examples take seconds to compile) and none of the caller's `MAESTRO_*`
/// variables, so a developer's shell cannot change what a test chooses.
pub fn maestro_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_maestro"));
    isolate(&mut command);
    command
}

/// The environment [`maestro_command`] gives maestro, for a program that starts maestro itself.
pub fn isolate(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MAESTRO_") {
            command.env_remove(&name);
        }
    }
    command.env(
        "MAESTRO_CACHE_DIR",
        Path::new(maestro_plugins::DIR).join("../e2e-cache"),
    );
}

/// A program `.ci/install` puts under the target dir's `toolchains/` (third-party clients and
/// checkers from PyPI), at `relative`.
pub fn toolchain(relative: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = target.join("toolchains").join(relative);
    assert!(
        path.exists(),
        "{} is missing: run .ci/install",
        path.display()
    );
    path
}

/// An official MCP SDK as a client of maestro, nobody here wrote it: its scenarios are
/// `host/tests/mcp/client.py` (PyPI `mcp`, under the target dir) and
/// `host/tests/mcp/typescript/client.mjs` (npm `@modelcontextprotocol/sdk`, in its
/// `node_modules`), which print what the client saw in one shape.
#[derive(Clone, Copy, Debug)]
pub enum McpSdk {
    Python,
    TypeScript,
}

impl McpSdk {
    /// The client running `args` (a scenario and its arguments).
    pub fn command(self, args: &[&str]) -> Command {
        let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
        let mut command = match self {
            McpSdk::Python => {
                let mut command = Command::new(toolchain("mcp/bin/python"));
                command.arg(tests.join("client.py"));
                command
            }
            McpSdk::TypeScript => {
                let client = tests.join("typescript");
                assert!(
                    client
                        .join("node_modules/@modelcontextprotocol/sdk")
                        .exists(),
                    "{}/node_modules is missing: run .ci/install",
                    client.display()
                );
                let mut command = Command::new("node");
                command.arg(client.join("client.mjs"));
                command
            }
        };
        isolate(&mut command);
        command.args(args);
        command
    }
}

/// `command` (a `maestro mcp`) started on pipes, past a 2025-11-25 `initialize`: the server, its
/// stdin and its stdout.
pub fn initialized_mcp(
    mut command: Command,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::{BufRead, Write};
    let mut server = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = server.stdin.take().unwrap();
    let mut output = std::io::BufReader::new(server.stdout.take().unwrap());
    writeln!(
        input,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"0"}}}}}}"#
    )
    .unwrap();
    let mut answer = String::new();
    output.read_line(&mut answer).unwrap();
    assert!(answer.contains(r#""id":1,"result""#), "{answer}");
    (server, input, output)
}

/// The job whose page (`{server}/jobs/<id>`, maybe in parentheses) `told` names.
pub fn job_of_page<'a>(told: &'a str, server: &str) -> &'a str {
    let prefix = format!("{server}/jobs/job-");
    let page = told
        .split_whitespace()
        .map(|word| word.trim_start_matches('('))
        .find(|word| word.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no page of {server} in {told}"));
    page.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .rsplit('/')
        .next()
        .unwrap()
}
