//! What maestro adds to an MCP tool call: `tools/call` round trips over stdio from the official
//! MCP Python SDK, to `maestro mcp` serving the `echo` test plugin (policy, schema check, a
//! fresh sandboxed instance per call) and to a near-zero server on the same SDK (`rmcp`, the
//! same transport, an `echo` tool that returns its text), driven by the same client in the same
//! run.
//!
//! Each server is a child process of this bench (`MCP_BENCH_SERVER=maestro|maestro-no-spare|
//! near-zero`): maestro runs `maestro mcp` through the binary's own entry point, allocator
//! included; `maestro-no-spare` the same with `--no-spare-instances`, each call instantiating its
//! instance on its own path, for the spare instance's share. The rounds
//! alternate the servers, so that drift in the machine's speed falls on both; what maestro adds
//! is the median over rounds of the difference between the two medians of a round (many short
//! rounds, so that a round rarely straddles a change in the machine's speed). Both
//! revisions are measured: 2025-11-25 (`legacy`, a session) and 2026-07-28 (the SDK's `auto`).
//! What else the machine did meanwhile is printed last: a busy neighbour slows maestro's calls,
//! whose processor time shares a core with the client, far more than the near-zero server's.
//!
//! Needs the Python SDK of `.ci/install` under the target dir.
//!
//! `cargo bench -p maestro-benches --bench mcp_stdio`

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use maestro_benches::{MachineLoad, median};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

maestro_benches::allocate_like_maestro!();

const SERVERS: [&str; 3] = ["near-zero", "maestro", "maestro-no-spare"];
const MODES: [(&str, &str); 2] = [("legacy", "2025-11-25"), ("auto", "2026-07-28")];
const ROUNDS: usize = 15;
const WARMUP: usize = 300;
const CALLS: usize = 1_000;

fn main() -> ExitCode {
    match std::env::var("MCP_BENCH_SERVER").as_deref() {
        Ok(server @ ("maestro" | "maestro-no-spare")) => {
            let plugins = std::env::var("MCP_BENCH_PLUGINS").expect("the plugin folder");
            let mut args = vec!["maestro", "mcp", "--plugins", plugins.as_str()];
            if server == "maestro-no-spare" {
                args.push("--no-spare-instances");
            }
            maestro::cli::run(args)
        }
        Ok("near-zero") => {
            near_zero();
            ExitCode::SUCCESS
        }
        Ok(other) => panic!("no server `{other}`"),
        Err(_) => {
            compare();
            ExitCode::SUCCESS
        }
    }
}

/// One round of one client against one server: every timed round trip.
fn round(server: &str, mode: &str, revision: &str, plugins: &Path, cache: &Path) -> Vec<Duration> {
    let output = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp_client.py"))
        .args([mode, &WARMUP.to_string(), &CALLS.to_string()])
        .arg(std::env::current_exe().unwrap())
        .env("MCP_BENCH_SERVER", server)
        .env("MCP_BENCH_PLUGINS", plugins)
        .env("MAESTRO_CACHE_DIR", cache)
        .output()
        .expect("the client runs");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{server} ({mode}): {said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(said.trim()).expect("the client prints JSON");
    assert_eq!(seen["protocol_version"], revision, "{server} ({mode})");
    seen["times"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ns| Duration::from_nanos(ns.as_u64().unwrap()))
        .collect()
}

fn compare() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(maestro_plugins::ECHO, plugins.path().join("echo.wasm")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let load = MachineLoad::start();
    println!(
        "`tools/call` of `echo` over stdio from the official MCP Python SDK: {CALLS} calls after \
         {WARMUP} unmeasured, {ROUNDS} rounds alternating the servers; medians of the rounds' \
         medians, and the round trips' p99"
    );
    println!(
        "| revision | near-zero server | p99 | maestro mcp | p99 | maestro adds | no spare \
         instances | p99 | adds |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (mode, revision) in MODES {
        // Per server: each round's median, and every round trip.
        let mut medians: Vec<Vec<Duration>> = vec![Vec::new(); SERVERS.len()];
        let mut all: Vec<Vec<Duration>> = vec![Vec::new(); SERVERS.len()];
        // Per maestro server: what it adds to the near-zero server, each round.
        let mut added: Vec<Vec<f64>> = vec![Vec::new(); SERVERS.len()];
        for _ in 0..ROUNDS {
            for (n, server) in SERVERS.iter().enumerate() {
                let mut times = round(server, mode, revision, plugins.path(), cache.path());
                medians[n].push(median(&mut times));
                all[n].extend(times);
            }
            let near_zero = medians[0].last().unwrap().as_secs_f64();
            for n in 1..SERVERS.len() {
                added[n].push(medians[n].last().unwrap().as_secs_f64() - near_zero);
            }
        }
        let cells: Vec<String> = (0..SERVERS.len())
            .map(|n| {
                all[n].sort();
                let times = format!(
                    "{} | {}",
                    micros(median(&mut medians[n])),
                    micros(all[n][all[n].len() * 99 / 100])
                );
                if n == 0 {
                    return times;
                }
                added[n].sort_by(f64::total_cmp);
                format!("{times} | {:.0} µs", added[n][added[n].len() / 2] * 1e6)
            })
            .collect();
        println!("| {revision} | {} |", cells.join(" | "));
    }
    println!("{}", load.report());
}

fn micros(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}

/// The Python of the MCP SDK that `.ci/install` puts under the target dir.
fn python() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let python = target.join("toolchains/mcp/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run .ci/install",
        python.display()
    );
    python
}

/// The floor: an MCP server on the same SDK and transport whose `echo` does nothing.
#[derive(Clone)]
struct NearZero;

impl ServerHandler for NearZero {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({
            "type": "object",
            "properties": { "text": { "type": "string" } },
            "required": ["text"],
        });
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Returns its text.",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

fn near_zero() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let running = NearZero
            .serve(rmcp::transport::stdio_pipes())
            .await
            .expect("the handshake");
        running.waiting().await.expect("the connection");
    });
}
