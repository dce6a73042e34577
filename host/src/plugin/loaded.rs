//! A loaded plugin: a checked, linked, described component, ready to run
//! calls.
//!
//! Invariants: a `Plugin` exists only for a component that is a component,
//! targets the `plugin` world, and described valid tools with unique names
//! and compilable JSON Schemas. Every call is validated against its tool's
//! schema before the guest sees it, and runs on a fresh `Store` instantiated
//! from the shared `InstancePre` (ahead of the call, when a spare waits:
//! [`super::instances`]), so no state survives from one call to the next;
//! whatever the guest does, the call ends in an outcome or a `CallError`, and
//! the plugin stays usable.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;
use wasmtime::component::{Component, ResourceTableError};
use wasmtime::{Store, Trap};

use super::budget::check_compile_budget;
use super::cache::{CompiledFrom, content_hash};
use super::checks::{WRONG_SHAPE, WrongShape, check_header, validate_specs, world_error};
use super::error::{CallError, Limit, LoadError};
use super::instances::Instances;
use super::policy::PluginPolicy;
use super::runtime::Runtime;
use super::sandbox::{CallState, CompiledPolicy, Metered};
use super::types::{CallRequest, Outcome, Park, Terminal, ToolSpec};
use super::wit::{GuestCall, ToolInstance, ToolPre, WitVersion};
use super::without_http::{denied_import, link_without_http};
use crate::telemetry;
/// How a load went, for the CLI and the benchmarks.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    pub compiled_from: CompiledFrom,
    #[serde(rename = "compile_or_load_ms", serialize_with = "millis")]
    pub compile_or_load: Duration,
    #[serde(rename = "total_ms", serialize_with = "millis")]
    pub total: Duration,
}

fn millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64() * 1000.0)
}

pub struct Plugin {
    name: Arc<str>,
    content_hash: String,
    specs: Vec<ToolSpec>,
    validators: HashMap<String, jsonschema::Validator>,
    pub(super) instances: Arc<Instances>,
    policy: Arc<CompiledPolicy>,
    runtime: Runtime,
    report: LoadReport,
    calls: telemetry::CallMetrics,
    pub(crate) source: Option<PathBuf>,
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
        bytes: Vec<u8>,
        hash: Option<String>,
        policy: PluginPolicy,
    ) -> Result<Self, LoadError> {
        let started = Instant::now();
        check_header(&bytes)?;
        let engine = runtime.engine().clone();
        // Hashing and compiling (or mapping) a large component take milliseconds: off the
        // async threads.
        let (component, compiled_from, hash) = {
            let cache = runtime.inner.cache.clone();
            tokio::task::spawn_blocking(move || {
                let hash = hash.unwrap_or_else(|| content_hash(&bytes));
                // Only what is compiled is measured: a cache entry passed when it was made.
                let compile = || {
                    check_compile_budget(&bytes)?;
                    Component::new(&engine, &bytes)
                        .map_err(|err| LoadError::Compile(format!("{err:#}")))
                };
                match &cache {
                    Some(cache) => cache.get_or_compile(&engine, &hash, compile),
                    None => compile().map(|c| (c, CompiledFrom::Compiler)),
                }
                .map(|(component, from)| (component, from, hash))
            })
            .await
            .map_err(|err| LoadError::Compile(err.to_string()))??
        };
        let compile_or_load = started.elapsed();
        match compiled_from {
            CompiledFrom::Compiler => {
                telemetry::component_prepared("compiler", Some(compile_or_load))
            }
            CompiledFrom::Cache => telemetry::component_prepared("cache", None),
        }

        let wrong_world = |detail: String| world_error(&component, runtime.engine(), detail);
        let policy = Arc::new(CompiledPolicy::new(policy));
        // Every import must be one the host can offer, granted or not: the
        // world check does not depend on the policy.
        let instance_pre = runtime
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|err| wrong_world(format!("an import cannot be satisfied: {err:#}")))?;
        let instance_pre = if policy.grants_http() {
            instance_pre
        } else {
            link_without_http(&runtime, &component)
                .map_err(|err| wrong_world(format!("an import cannot be satisfied: {err:#}")))?
        };
        let pre = ToolPre::new(instance_pre, runtime.engine()).map_err(wrong_world)?;

        let name: Arc<str> = name.into();
        let instances = Instances::new(pre, policy.clone(), runtime.clone(), name.clone());
        let mut plugin = Self {
            calls: telemetry::CallMetrics::new(&name, &hash, []),
            name,
            content_hash: hash,
            specs: Vec::new(),
            validators: HashMap::new(),
            instances: Arc::new(instances),
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
            .run("", "", Spares::Off, |instance, store| {
                Box::pin(async move { instance.describe(store).await })
            })
            .await
            .map_err(|err| match err {
                CallError::Host(detail) if detail.starts_with(WRONG_SHAPE) => world_error(
                    plugin.instances.pre.instance_pre().component(),
                    plugin.runtime.engine(),
                    detail[WRONG_SHAPE.len()..].to_string(),
                ),
                other => LoadError::Describe(other.to_string()),
            })?;
        plugin.validators = validate_specs(&described, &mut plugin.specs)?;
        plugin.calls = telemetry::CallMetrics::new(
            &plugin.name,
            &plugin.content_hash,
            plugin.specs.iter().map(|spec| spec.name.as_str()),
        );
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

    /// The contract version the component targets.
    pub fn wit_version(&self) -> WitVersion {
        self.instances.pre.version()
    }

    /// What the component imports (host interfaces and WASI), by name.
    pub fn imports(&self) -> Vec<String> {
        let component = self.instances.pre.instance_pre().component();
        component
            .component_type()
            .imports(self.runtime.engine())
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    pub fn source(&self) -> Option<&std::path::Path> {
        self.source.as_deref()
    }

    /// Whether the next call finds its fresh instance made (for benchmarks and diagnostics).
    pub fn spare_waiting(&self) -> bool {
        self.instances.spare_waiting()
    }

    /// Runs one call in a fresh instance.
    pub async fn invoke(&self, request: CallRequest) -> Result<Outcome, CallError> {
        let started = Instant::now();
        let calls = self.calls.tool(&request.tool);
        let span = tracing::info_span!("tool.call", maestro.plugin = %self.name,
            maestro.tool = %request.tool, maestro.content_hash = %self.content_hash,
            maestro.call.id = %request.call_id, maestro.outcome = tracing::field::Empty,
            maestro.limit = tracing::field::Empty);
        let result = self.invoke_counted(request).instrument(span.clone()).await;
        let limit = match &result {
            Err(CallError::Limit(limit)) => Some(limit.name()),
            _ => None,
        };
        let outcome = outcome_label(&result);
        span.record("maestro.outcome", outcome);
        if let Some(limit) = limit {
            span.record("maestro.limit", limit);
        }
        calls.record(outcome, limit, started.elapsed());
        result
    }

    async fn invoke_counted(&self, request: CallRequest) -> Result<Outcome, CallError> {
        let arguments = self.check_arguments(&request)?;
        let call = GuestCall {
            call_id: request.call_id,
            job_id: request.job_id,
            movement: request.movement,
            tool: request.tool,
            arguments,
            resume: request.resume,
        };
        let job_id = call.job_id.clone();
        let call_id = call.call_id.clone();
        let result = self
            .run(&job_id, &call_id, Spares::On, |instance, store| {
                Box::pin(async move { instance.invoke(store, call).await })
            })
            .await?;
        // One cap for everything a call hands back, errors and parks included.
        let cap = self.policy.policy.max_output_bytes;
        let over_cap = |actual: usize| {
            (actual > cap).then_some(CallError::Limit(Limit::Output {
                cap_bytes: cap,
                actual_bytes: actual,
            }))
        };
        match result {
            Ok(outcome) => {
                if let Some(error) = over_cap(outcome.text_len()) {
                    return Err(error);
                }
                match outcome.problem() {
                    Some(problem) => Err(CallError::BadOutcome(problem)),
                    None => Ok(outcome),
                }
            }
            Err(error) => match over_cap(error.message.len()) {
                Some(limit) => Err(limit),
                None => Err(CallError::Tool {
                    message: error.message,
                    retryable: error.retryable,
                }),
            },
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
        // The usual case, valid arguments, without building the error iterator.
        if validator.is_valid(&request.arguments) {
            return Ok(request.arguments.to_string());
        }
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

    /// Runs `body` on a fresh instance under the plugin's limits (the spare one, if one waits
    /// and `spares` allows it); a trap, a limit or a timeout becomes a `CallError`.
    async fn run<R>(
        &self,
        job_id: &str,
        call_id: &str,
        spares: Spares,
        body: impl for<'a> FnOnce(
            ToolInstance,
            &'a mut Store<CallState>,
        ) -> std::pin::Pin<
            Box<dyn Future<Output = wasmtime::Result<R>> + Send + 'a>,
        >,
    ) -> Result<R, CallError> {
        let _active = self.runtime.inner.ticker.enter();
        let instances = &self.instances;
        let spare = match spares {
            Spares::On => instances.take_spare(job_id, call_id),
            Spares::Off => None,
        };
        let (mut store, ready) = match spare {
            Some((store, instance)) => (store, Some(instance)),
            None => (instances.fresh_store(job_id, call_id)?, None),
        };
        let meter = store.data().limits.cpu_meter.clone();
        let time_left = store.data().limits.time_left();
        let outcome = {
            let call = std::pin::pin!(async {
                let instance = match ready {
                    Some(instance) => instance,
                    None => {
                        let instance = instances.pre.instantiate(&mut store).await?;
                        instances.instantiated_on_call_path();
                        instance
                    }
                };
                body(instance, &mut store).await
            });
            tokio::time::timeout(time_left, Metered { inner: call, meter }).await
        };
        let result = match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.classify(&store, error)),
            Err(_elapsed) => Err(CallError::Limit(store.data_mut().limits.timed_out())),
        };
        if spares == Spares::On {
            instances.recycle(store);
        }
        result
    }

    /// One instance kept alive across calls: the benchmark baseline for
    /// `invoke`'s fresh instance per call. Calls share memory and state, and
    /// the limits count from the first call, so the engine never uses it.
    pub async fn warm_instance(&self) -> Result<WarmInstance, CallError> {
        let mut store = self.instances.fresh_store("", "")?;
        let instance = self
            .instances
            .pre
            .instantiate(&mut store)
            .await
            .map_err(|err| self.classify(&store, err))?;
        Ok(WarmInstance { store, instance })
    }

    fn classify(&self, store: &Store<CallState>, error: wasmtime::Error) -> CallError {
        if let Some(WrongShape(detail)) = error.downcast_ref::<WrongShape>() {
            return CallError::Host(format!("{WRONG_SHAPE}{detail}"));
        }
        if error.chain().any(|cause| {
            matches!(
                cause.downcast_ref::<ResourceTableError>(),
                Some(ResourceTableError::Full)
            )
        }) {
            return CallError::Limit(Limit::HostResources {
                cap: self.policy.max_resources,
            });
        }
        if let Some(function) = denied_import(&error) {
            return CallError::Denied(format!(
                "the plugin called `{function}`, but the policy of `{}` grants no HTTP \
                 (http_allow is empty), so wasi:http is not linked",
                self.name
            ));
        }
        if let Some(full) = error.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
            return CallError::Overloaded(full.to_string());
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

/// How a call ended, in the words of the tool-call metric: `output`, `park:<kind>`,
/// `terminal:<kind>`, `limit:<limit>` or `error:<code>`.
fn outcome_label(result: &Result<Outcome, CallError>) -> &'static str {
    match result {
        Ok(Outcome::Output(_)) => "output",
        Ok(Outcome::Park(park)) => match park {
            Park::Ask(_) => "park:ask",
            Park::BrowserLogin(_) => "park:browser-login",
            Park::ToolRequest(_) => "park:tool-request",
            Park::Subtasks(_) => "park:subtasks",
            Park::Artifact(_) => "park:artifact",
            Park::Worker(_) => "park:worker",
        },
        Ok(Outcome::Terminal(Terminal::Complete(_))) => "terminal:complete",
        Ok(Outcome::Terminal(Terminal::Abort(_))) => "terminal:abort",
        Err(CallError::Limit(limit)) => match limit {
            Limit::Memory { .. } => "limit:memory",
            Limit::Cpu { .. } => "limit:cpu",
            Limit::Fuel { .. } => "limit:fuel",
            Limit::WallClock { .. } => "limit:wall-clock",
            Limit::Output { .. } => "limit:output",
            Limit::Stack => "limit:stack",
            Limit::HostResources { .. } => "limit:host-resources",
        },
        Err(CallError::UnknownTool { .. }) => "error:unknown-tool",
        Err(CallError::InvalidArguments { .. }) => "error:invalid-arguments",
        Err(CallError::Trap { .. }) => "error:trap",
        Err(CallError::Tool { .. }) => "error:tool-error",
        Err(CallError::Denied(_)) => "error:denied",
        Err(CallError::BadOutcome(_)) => "error:bad-outcome",
        Err(CallError::Overloaded(_)) => "error:overloaded",
        Err(CallError::Host(_)) => "error:host",
    }
}

/// Whether a call takes a spare instance and leaves one for the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spares {
    /// A tool call.
    On,
    /// `describe` at load: a spare made then would wait for a plugin that may not load.
    Off,
}

/// See `Plugin::warm_instance`.
pub struct WarmInstance {
    store: Store<CallState>,
    instance: ToolInstance,
}

impl WarmInstance {
    /// Calls `tool` on the kept instance, without schema validation.
    pub async fn invoke(&mut self, tool: &str, arguments: &str) -> Result<Outcome, CallError> {
        let call = GuestCall {
            call_id: String::new(),
            job_id: String::new(),
            movement: String::new(),
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            resume: None,
        };
        match self.instance.invoke(&mut self.store, call).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(error)) => Err(CallError::Tool {
                message: error.message,
                retryable: error.retryable,
            }),
            Err(err) => Err(CallError::Host(format!("{err:#}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("ééééé", 3), "…é");
    }

    #[test]
    fn outcome_labels_spell_the_names_used_elsewhere() {
        for limit in [
            Limit::Memory { cap_bytes: 1 },
            Limit::Cpu {
                cap: Duration::ZERO,
            },
            Limit::Fuel { budget: 1 },
            Limit::WallClock {
                cap: Duration::ZERO,
            },
            Limit::Output {
                cap_bytes: 1,
                actual_bytes: 2,
            },
            Limit::Stack,
            Limit::HostResources { cap: 1 },
        ] {
            let expected = format!("limit:{}", limit.name());
            assert_eq!(outcome_label(&Err(CallError::Limit(limit))), expected);
        }
        for error in [
            CallError::UnknownTool {
                tool: "x".into(),
                available: vec![],
            },
            CallError::InvalidArguments {
                tool: "x".into(),
                problems: vec![],
            },
            CallError::Trap {
                message: String::new(),
                console: String::new(),
            },
            CallError::Denied(String::new()),
            CallError::BadOutcome(String::new()),
            CallError::Overloaded(String::new()),
            CallError::Host(String::new()),
        ] {
            let expected = format!("error:{}", error.code());
            assert_eq!(outcome_label(&Err(error)), expected);
        }
    }

    #[test]
    fn each_call_result_has_a_bounded_metric_label() {
        let label = |result| outcome_label(&result);
        assert_eq!(label(Ok(Outcome::Output("x".into()))), "output");
        assert_eq!(
            label(Ok(Outcome::Terminal(Terminal::Abort("no".into())))),
            "terminal:abort"
        );
        assert_eq!(
            label(Err(CallError::Limit(Limit::Memory { cap_bytes: 1 }))),
            "limit:memory"
        );
        // The message is free text: it must never become part of a label.
        assert_eq!(
            label(Err(CallError::Tool {
                message: "disk /tmp/x full".into(),
                retryable: false
            })),
            "error:tool-error"
        );
    }
}
