//! A loaded plugin: a checked, linked, described component, ready to run
//! calls.
//!
//! Invariants: a `Plugin` exists only for a component that is a component,
//! targets the `plugin` world, and described valid tools with unique names
//! and compilable JSON Schemas. Every call is validated against its tool's
//! schema before the guest sees it, and runs on a fresh `Store` instantiated
//! from the shared `InstancePre`, so no state survives from one call to the
//! next; whatever the guest does, the call ends in an outcome or a
//! `CallError`, and the plugin stays usable.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Instance};
use wasmtime::{Store, Trap, UpdateDeadline};

use super::cache::{CompiledFrom, content_hash};
use super::capabilities::Capabilities;
use super::error::{CallError, Limit, LoadError};
use super::policy::PluginPolicy;
use super::runtime::{Runtime, TICK};
use super::sandbox::{CallState, CompiledPolicy};
use super::types::{CallRequest, Outcome, ToolSpec};
use super::wit::{TOOL_INTERFACE, latest};

/// Bounds on what `describe` may return.
const MAX_TOOLS: usize = 256;
const MAX_SCHEMA_BYTES: usize = 256 << 10;

/// How a load went, for the CLI and the benchmarks.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    pub compiled_from: CompiledFrom,
    pub compile_or_load: Duration,
    pub total: Duration,
}

pub struct Plugin {
    name: Arc<str>,
    content_hash: String,
    specs: Vec<ToolSpec>,
    validators: HashMap<String, jsonschema::Validator>,
    pre: latest::PluginPre<CallState>,
    policy: Arc<CompiledPolicy>,
    runtime: Runtime,
    report: LoadReport,
    pub(super) source: Option<PathBuf>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("content_hash", &self.content_hash)
            .field(
                "tools",
                &self.specs.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Plugin {
    pub(super) async fn load(
        runtime: Runtime,
        name: &str,
        bytes: &[u8],
        policy: PluginPolicy,
    ) -> Result<Self, LoadError> {
        let started = Instant::now();
        check_header(bytes)?;
        let hash = content_hash(bytes);
        let engine = runtime.engine().clone();
        let (component, compiled_from) = {
            let cache = runtime.inner.cache.clone();
            let (bytes, hash) = (bytes.to_vec(), hash.clone());
            tokio::task::spawn_blocking(move || match &cache {
                Some(cache) => cache.get_or_compile(&engine, &bytes, &hash),
                None => Component::new(&engine, &bytes).map(|c| (c, CompiledFrom::Compiler)),
            })
            .await
            .map_err(|err| LoadError::Compile(err.to_string()))?
            .map_err(|err| LoadError::Compile(format!("{err:#}")))?
        };
        let compile_or_load = started.elapsed();

        let wrong_world = |detail: String| world_error(&component, runtime.engine(), detail);
        let instance_pre = runtime
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|err| wrong_world(format!("an import cannot be satisfied: {err:#}")))?;
        let pre = latest::PluginPre::new(instance_pre).map_err(|err| {
            wrong_world(format!(
                "the export `{TOOL_INTERFACE}` is missing or has the wrong shape: {err:#}"
            ))
        })?;

        let name: Arc<str> = name.into();
        let policy = Arc::new(CompiledPolicy::new(policy, TICK));
        let mut plugin = Self {
            name,
            content_hash: hash,
            specs: Vec::new(),
            validators: HashMap::new(),
            pre,
            policy,
            runtime,
            report: LoadReport {
                compiled_from,
                compile_or_load,
                total: Duration::ZERO,
            },
            source: None,
        };
        let described = plugin
            .run(Shape::Check, "", "", |instance, store| {
                Box::pin(async move { instance.maestro_tool_tool().call_describe(store).await })
            })
            .await
            .map_err(|err| match err {
                CallError::Host(detail) if detail.starts_with(WRONG_SHAPE) => world_error(
                    plugin.pre.instance_pre().component(),
                    plugin.runtime.engine(),
                    detail[WRONG_SHAPE.len()..].to_string(),
                ),
                other => LoadError::Describe(other.to_string()),
            })?;
        plugin.validators = validate_specs(&described, &mut plugin.specs)?;
        plugin.report.total = started.elapsed();
        Ok(plugin)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the component bytes: the version a parked call pins.
    pub fn content_hash(&self) -> &str {
        &self.content_hash
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn policy(&self) -> &PluginPolicy {
        &self.policy.policy
    }

    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    pub fn source(&self) -> Option<&std::path::Path> {
        self.source.as_deref()
    }

    /// Runs one call in a fresh instance.
    pub async fn invoke(&self, request: CallRequest) -> Result<Outcome, CallError> {
        let arguments = self.check_arguments(&request)?;
        let call = latest::maestro::tool::types::Call {
            call_id: request.call_id,
            job_id: request.job_id,
            movement: request.movement,
            tool: request.tool,
            arguments,
            resume: request.resume.map(Into::into),
        };
        let job_id = call.job_id.clone();
        let call_id = call.call_id.clone();
        let result = self
            .run(Shape::Checked, &job_id, &call_id, |instance, store| {
                Box::pin(
                    async move { instance.maestro_tool_tool().call_invoke(store, &call).await },
                )
            })
            .await?;
        match result {
            Ok(outcome) => {
                let outcome = Outcome::from(outcome);
                let cap = self.policy.policy.max_output_bytes;
                let actual = outcome.text_len();
                if actual > cap {
                    return Err(CallError::Limit(Limit::Output {
                        cap_bytes: cap,
                        actual_bytes: actual,
                    }));
                }
                Ok(outcome)
            }
            Err(error) => Err(CallError::Tool {
                message: error.message,
                retryable: error.retryable,
            }),
        }
    }

    /// The arguments as JSON text, once they satisfy the tool's schema.
    fn check_arguments(&self, request: &CallRequest) -> Result<String, CallError> {
        let Some(validator) = self.validators.get(&request.tool) else {
            return Err(CallError::UnknownTool {
                tool: request.tool.clone(),
                available: self.specs.iter().map(|s| s.name.clone()).collect(),
            });
        };
        let problems: Vec<String> = validator
            .iter_errors(&request.arguments)
            .map(|error| {
                let path = error.instance_path().to_string();
                if path.is_empty() {
                    error.to_string()
                } else {
                    format!("{path}: {error}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(CallError::InvalidArguments {
                tool: request.tool.clone(),
                problems,
            });
        }
        Ok(request.arguments.to_string())
    }

    /// Instantiates the component in a fresh store under the plugin's
    /// limits and runs `body` on it; a trap, a limit or a timeout becomes a
    /// `CallError`.
    async fn run<R>(
        &self,
        shape: Shape,
        job_id: &str,
        call_id: &str,
        body: impl for<'a> FnOnce(
            latest::Plugin,
            &'a mut Store<CallState>,
        ) -> std::pin::Pin<
            Box<dyn Future<Output = wasmtime::Result<R>> + Send + 'a>,
        >,
    ) -> Result<R, CallError> {
        let _active = self.runtime.inner.ticker.enter();
        let mut store = self.new_store(job_id, call_id)?;
        let policy = &self.policy.policy;
        let pre = &self.pre;
        let outcome = tokio::time::timeout(policy.timeout, async {
            let raw = pre.instance_pre().instantiate_async(&mut store).await?;
            if shape == Shape::Check {
                check_export_types(raw, &mut store)
                    .map_err(|err| wasmtime::Error::new(WrongShape(err)))?;
            }
            let instance = latest::Plugin::new(&mut store, &raw)?;
            body(instance, &mut store).await
        })
        .await;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.classify(&store, error)),
            Err(_elapsed) => Err(CallError::Limit(store.data_mut().limits.timed_out())),
        }
    }

    /// A store under this plugin's policy, for one call.
    fn new_store(&self, job_id: &str, call_id: &str) -> Result<Store<CallState>, CallError> {
        let policy = &self.policy.policy;
        let capabilities = Capabilities::new(
            self.name.clone(),
            job_id.to_string(),
            call_id.to_string(),
            policy.spawn_subtasks,
            self.runtime
                .inner
                .spawner
                .lock()
                .expect("spawner lock")
                .clone(),
            policy.max_log_bytes,
        );
        let state = CallState::new(&self.policy, &self.name, capabilities)
            .map_err(|err| CallError::Host(format!("cannot build the sandbox: {err:#}")))?;
        let mut store = Store::new(self.runtime.engine(), state);
        store.limiter(|state| &mut state.limits);
        if self.runtime.inner.fuel {
            store
                .set_fuel(policy.fuel.unwrap_or(u64::MAX))
                .map_err(|err| CallError::Host(err.to_string()))?;
        }
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            ctx.data_mut().limits.on_epoch()?;
            Ok(UpdateDeadline::Yield(1))
        });
        Ok(store)
    }

    /// One instance kept alive across calls: the benchmark baseline for
    /// `invoke`'s fresh instance per call. Calls share memory and state, and
    /// the limits count from the first call, so the engine never uses it.
    pub async fn warm_instance(&self) -> Result<WarmInstance, CallError> {
        let mut store = self.new_store("", "")?;
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|err| self.classify(&store, err))?;
        Ok(WarmInstance { store, instance })
    }

    fn classify(&self, store: &Store<CallState>, error: wasmtime::Error) -> CallError {
        if let Some(WrongShape(detail)) = error.downcast_ref::<WrongShape>() {
            return CallError::Host(format!("{WRONG_SHAPE}{detail}"));
        }
        if let Some(limit) = &store.data().limits.exceeded {
            return CallError::Limit(limit.clone());
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => {
                return CallError::Limit(Limit::Fuel {
                    budget: self.policy.policy.fuel.unwrap_or(u64::MAX),
                });
            }
            Some(Trap::StackOverflow) => return CallError::Limit(Limit::Stack),
            _ => {}
        }
        let console = store.data().console.text();
        let message = match error.downcast_ref::<Trap>() {
            Some(trap) => trap.to_string(),
            None => format!("{error:#}"),
        };
        tracing::debug!(plugin = %self.name, "call trapped: {error:?}");
        CallError::Trap {
            message,
            console: tail(&console, 4096),
        }
    }
}

/// A `LoadError::World` that lists what the component imports and exports.
fn world_error(component: &Component, engine: &wasmtime::Engine, detail: String) -> LoadError {
    let ty = component.component_type();
    let names = |items: Vec<String>| {
        if items.is_empty() {
            "(nothing)".to_string()
        } else {
            items.join(", ")
        }
    };
    LoadError::World {
        detail,
        imports: names(
            ty.imports(engine)
                .map(|(name, _)| name.to_string())
                .collect(),
        ),
        exports: names(
            ty.exports(engine)
                .map(|(name, _)| name.to_string())
                .collect(),
        ),
    }
}

/// Whether a run checks the export signatures first (once, at load; the
/// bindings only say "type mismatch", without naming the function).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Check,
    Checked,
}

const WRONG_SHAPE: &str = "wrong export shape: ";

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct WrongShape(String);

/// Checks that `describe` and `invoke` have the signatures of the contract.
fn check_export_types(instance: Instance, store: &mut Store<CallState>) -> Result<(), String> {
    use latest::maestro::tool::types as wit;
    let interface = instance
        .get_export_index(&mut *store, None, TOOL_INTERFACE)
        .ok_or_else(|| format!("`{TOOL_INTERFACE}` is not exported"))?;
    let index = |store: &mut Store<CallState>, name: &str| {
        instance
            .get_export_index(&mut *store, Some(&interface), name)
            .ok_or_else(|| format!("`{TOOL_INTERFACE}` has no function `{name}`"))
    };
    let describe = index(store, "describe")?;
    instance
        .get_typed_func::<(), (Vec<wit::ToolSpec>,)>(&mut *store, describe)
        .map_err(|err| {
            format!("`{TOOL_INTERFACE}#describe` must be `func() -> list<tool-spec>`: {err}")
        })?;
    let invoke = index(store, "invoke")?;
    instance
        .get_typed_func::<(&wit::Call,), (Result<wit::Outcome, wit::ToolError>,)>(&mut *store, invoke)
        .map_err(|err| {
            format!("`{TOOL_INTERFACE}#invoke` must be `func(call: call) -> result<outcome, tool-error>`: {err}")
        })?;
    Ok(())
}

/// The last `max` bytes of `text`, on a character boundary.
fn tail(text: &str, max: usize) -> String {
    let text = text.trim_end();
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// Distinguishes components from core modules and non-wasm before the
/// compiler sees them, so the error says what the file is.
fn check_header(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(16)]).into_owned();
        return Err(LoadError::NotWasm(format!(
            "the file does not start with the wasm magic `\\0asm` (it starts with {shown:?})"
        )));
    }
    match bytes[4..8] {
        [1, 0, 0, 0] => Err(LoadError::CoreModule),
        [_, _, 1, 0] => Ok(()),
        _ => Err(LoadError::NotWasm(format!(
            "unknown wasm version/layer bytes {:02x?}",
            &bytes[4..8]
        ))),
    }
}

/// Checks what `describe` returned and compiles each tool's schema.
fn validate_specs(
    described: &[latest::maestro::tool::types::ToolSpec],
    specs: &mut Vec<ToolSpec>,
) -> Result<HashMap<String, jsonschema::Validator>, LoadError> {
    if described.is_empty() {
        return Err(LoadError::InvalidSpec {
            tool: None,
            reason: "the plugin describes no tools".into(),
        });
    }
    if described.len() > MAX_TOOLS {
        return Err(LoadError::InvalidSpec {
            tool: None,
            reason: format!(
                "{} tools is more than the {MAX_TOOLS} allowed",
                described.len()
            ),
        });
    }
    let mut seen = HashSet::new();
    let mut validators = HashMap::new();
    for spec in described {
        let invalid = |reason: String| LoadError::InvalidSpec {
            tool: Some(spec.name.clone()),
            reason,
        };
        if !valid_tool_name(&spec.name) {
            return Err(invalid(
                "a tool name must match ^[A-Za-z][A-Za-z0-9_-]{0,63}$".into(),
            ));
        }
        if !seen.insert(spec.name.clone()) {
            return Err(invalid("the name is used by two tools".into()));
        }
        if spec.parameters.len() > MAX_SCHEMA_BYTES {
            return Err(invalid(format!(
                "parameters schema is larger than {MAX_SCHEMA_BYTES} bytes"
            )));
        }
        let schema: serde_json::Value = serde_json::from_str(&spec.parameters)
            .map_err(|err| invalid(format!("parameters is not JSON: {err}")))?;
        if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(invalid(
                r#"parameters must be a JSON Schema with "type": "object""#.into(),
            ));
        }
        let validator = jsonschema::validator_for(&schema)
            .map_err(|err| invalid(format!("parameters is not a valid JSON Schema: {err}")))?;
        validators.insert(spec.name.clone(), validator);
        specs.push(ToolSpec {
            name: spec.name.clone(),
            description: spec.description.clone(),
            parameters: schema,
        });
    }
    Ok(validators)
}

fn valid_tool_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tells_core_modules_components_and_garbage_apart() {
        assert!(matches!(
            check_header(b"\0asm\x01\0\0\0rest"),
            Err(LoadError::CoreModule)
        ));
        assert!(check_header(b"\0asm\x0d\0\x01\0rest").is_ok());
        assert!(matches!(
            check_header(b"hello world, not wasm"),
            Err(LoadError::NotWasm(_))
        ));
        assert!(matches!(check_header(b"\0as"), Err(LoadError::NotWasm(_))));
    }

    #[test]
    fn tool_names_are_checked() {
        assert!(valid_tool_name("BrowseWeb"));
        assert!(valid_tool_name("read_file-2"));
        assert!(!valid_tool_name("2fast"));
        assert!(!valid_tool_name("has space"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"a".repeat(65)));
    }

    fn spec(name: &str, parameters: &str) -> latest::maestro::tool::types::ToolSpec {
        latest::maestro::tool::types::ToolSpec {
            name: name.into(),
            description: "d".into(),
            parameters: parameters.into(),
        }
    }

    fn spec_error(described: &[latest::maestro::tool::types::ToolSpec]) -> String {
        validate_specs(described, &mut Vec::new())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn specs_are_validated() {
        let object = r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1}}}"#;
        let mut specs = Vec::new();
        let validators =
            validate_specs(&[spec("a", object), spec("b", object)], &mut specs).unwrap();
        assert_eq!(specs.len(), 2);
        assert!(validators["a"].is_valid(&serde_json::json!({"n": 3})));
        assert!(!validators["a"].is_valid(&serde_json::json!({"n": 0})));

        assert!(spec_error(&[]).contains("no tools"));
        assert!(
            spec_error(&[spec("a", object), spec("a", object)])
                .contains("`a`: the name is used by two tools")
        );
        assert!(spec_error(&[spec("bad name", object)]).contains("must match"));
        assert!(spec_error(&[spec("a", "{not json")]).contains("not JSON"));
        assert!(spec_error(&[spec("a", r#"{"type":"string"}"#)]).contains(r#""type": "object""#));
        assert!(
            spec_error(&[spec(
                "a",
                r#"{"type":"object","properties":{"n":{"type":"nope"}}}"#
            )])
            .contains("not a valid JSON Schema")
        );
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("ééééé", 3), "…é");
    }
}

/// See `Plugin::warm_instance`.
pub struct WarmInstance {
    store: Store<CallState>,
    instance: latest::Plugin,
}

impl WarmInstance {
    /// Calls `tool` on the kept instance, without schema validation.
    pub async fn invoke(&mut self, tool: &str, arguments: &str) -> Result<Outcome, CallError> {
        let call = latest::maestro::tool::types::Call {
            call_id: String::new(),
            job_id: String::new(),
            movement: String::new(),
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            resume: None,
        };
        match self
            .instance
            .maestro_tool_tool()
            .call_invoke(&mut self.store, &call)
            .await
        {
            Ok(Ok(outcome)) => Ok(outcome.into()),
            Ok(Err(error)) => Err(CallError::Tool {
                message: error.message,
                retryable: error.retryable,
            }),
            Err(err) => Err(CallError::Host(format!("{err:#}"))),
        }
    }
}
