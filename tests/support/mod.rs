//! Shared helpers of the end-to-end tests: a runtime per test binary, plugin
//! loading with a policy, and a loopback web site with a login wall.

pub mod demo;
pub mod engine;
pub mod site;
pub mod world;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use maestro::plugin::{
    CallError, CallRequest, Outcome, Plugin, PluginPolicy, Policy, Runtime, RuntimeConfig,
};

pub use maestro_plugins as artifacts;

/// The compiled-component cache the tests share (inside the target dir, so
/// a clean build starts cold).
pub fn cache_dir() -> PathBuf {
    Path::new(artifacts::DIR).join("../e2e-cache")
}

/// One runtime per test binary, with the shared cache.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(cache_dir()),
            ..RuntimeConfig::default()
        })
        .expect("runtime starts")
    })
}

/// Loads a built artifact under `policy`.
pub async fn load(path: &str, policy: PluginPolicy) -> Plugin {
    runtime()
        .load_file(Path::new(path), policy)
        .await
        .unwrap_or_else(|err| panic!("{path} loads: {err}"))
}

/// Loads a built artifact under the policy a TOML text gives its name.
pub async fn load_with_toml(path: &str, toml: &str) -> Plugin {
    let policy = Policy::parse(toml, "test-policy.toml").expect("test policy parses");
    let name = Path::new(path)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    load(path, policy.for_plugin(&name)).await
}

/// Calls `tool` with `arguments`.
pub async fn call(
    plugin: &Plugin,
    tool: &str,
    arguments: serde_json::Value,
) -> Result<Outcome, CallError> {
    plugin.invoke(CallRequest::new(tool, arguments)).await
}

/// The text of an `Outcome::Output`, parsed as JSON.
pub fn output_json(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Output(text) => serde_json::from_str(text)
            .unwrap_or_else(|err| panic!("output is JSON ({err}): {text}")),
        other => panic!("expected an output, got {other:?}"),
    }
}

/// Asserts that a call ended in the tool's own error and that its message
/// contains `needle`; returns the message.
pub fn assert_tool_error(result: Result<Outcome, CallError>, needle: &str) -> String {
    match result {
        Err(CallError::Tool { message, .. }) if message.contains(needle) => message,
        other => panic!("expected a tool error containing {needle:?}, got {other:?}"),
    }
}
