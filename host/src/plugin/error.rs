//! Errors of loading a plugin and of calling a tool.
//!
//! Invariant: every error says what failed in words an operator (load) or a
//! model (call) can act on, and carries a stable machine `code()`.

use std::time::Duration;

use serde::Serialize;

/// A sandbox limit; the message names it and its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "limit")]
pub enum Limit {
    Memory {
        cap_bytes: u64,
    },
    Cpu {
        cap: Duration,
    },
    Fuel {
        budget: u64,
    },
    WallClock {
        cap: Duration,
    },
    Output {
        cap_bytes: usize,
        actual_bytes: usize,
    },
    Stack,
    /// Host resources (streams, pollables, HTTP header blocks and bodies)
    /// held at once.
    HostResources {
        cap: usize,
    },
}

impl Limit {
    pub fn name(&self) -> &'static str {
        match self {
            Limit::Memory { .. } => "memory",
            Limit::Cpu { .. } => "cpu",
            Limit::Fuel { .. } => "fuel",
            Limit::WallClock { .. } => "wall-clock",
            Limit::Output { .. } => "output",
            Limit::Stack => "stack",
            Limit::HostResources { .. } => "host-resources",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Memory { cap_bytes } => write!(
                f,
                "memory limit exceeded: the plugin tried to grow past {} MiB",
                cap_bytes >> 20
            ),
            Limit::Cpu { cap } => write!(
                f,
                "cpu limit exceeded: the plugin ran guest code for more than {} ms",
                cap.as_millis()
            ),
            Limit::Fuel { budget } => write!(
                f,
                "fuel limit exceeded: the plugin used its budget of {budget} fuel units"
            ),
            Limit::WallClock { cap } => write!(
                f,
                "wall-clock limit exceeded: the call took longer than {} ms",
                cap.as_millis()
            ),
            Limit::Output {
                cap_bytes,
                actual_bytes,
            } => write!(
                f,
                "output limit exceeded: the outcome carries {actual_bytes} bytes, more than the {cap_bytes} allowed"
            ),
            Limit::Stack => write!(
                f,
                "stack limit exceeded: the plugin overflowed its wasm stack"
            ),
            Limit::HostResources { cap } => write!(
                f,
                "host-resources limit exceeded: the plugin held more than {cap} host resources \
                 (streams, HTTP header blocks, bodies) at once"
            ),
        }
    }
}

/// Why a component could not be loaded as a plugin.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("not a WebAssembly file: {0}")]
    NotWasm(String),
    #[error(
        "this is a core WebAssembly module, not a component: build for wasm32-wasip2, or wrap the module with `wasm-tools component new` (plus a WASI adapter if it imports wasi_snapshot_preview1)"
    )]
    CoreModule,
    #[error("the component does not compile: {0}")]
    Compile(String),
    #[error("the component is not compiled, it is over the compile budget: {0}")]
    TooComplex(String),
    #[error("the policy cannot be applied: {0}")]
    Policy(String),
    #[error(
        "the component does not target the world maestro:tool/plugin@0.1.0: {detail}\n  it imports: {imports}\n  it exports: {exports}"
    )]
    World {
        detail: String,
        imports: String,
        exports: String,
    },
    #[error("describe failed: {0}")]
    Describe(String),
    #[error("describe returned an invalid tool spec{}: {reason}", tool.as_ref().map(|t| format!(" for `{t}`")).unwrap_or_default())]
    InvalidSpec {
        tool: Option<String>,
        reason: String,
    },
}

impl LoadError {
    pub fn code(&self) -> &'static str {
        match self {
            LoadError::Read { .. } => "read",
            LoadError::NotWasm(_) => "not-wasm",
            LoadError::CoreModule => "core-module",
            LoadError::Compile(_) => "compile",
            LoadError::TooComplex(_) => "too-complex",
            LoadError::Policy(_) => "policy",
            LoadError::World { .. } => "wrong-world",
            LoadError::Describe(_) => "describe-failed",
            LoadError::InvalidSpec { .. } => "invalid-spec",
        }
    }
}

/// Why a call produced no outcome. The model sees `to_string()`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("unknown tool `{tool}`; this plugin offers: {}", available.join(", "))]
    UnknownTool {
        tool: String,
        available: Vec<String>,
    },
    #[error("invalid arguments for `{tool}`: {}", problems.join("; "))]
    InvalidArguments { tool: String, problems: Vec<String> },
    #[error("{0}")]
    Limit(Limit),
    #[error("the plugin crashed: {message}{}", if console.is_empty() { String::new() } else { format!("\n--- plugin output ---\n{console}") })]
    Trap { message: String, console: String },
    #[error("{message}")]
    Tool { message: String, retryable: bool },
    /// The plugin returned an outcome the host cannot act on (a park with no
    /// job ids, a login URL that is not a web address …).
    #[error("the plugin returned an unusable outcome: {0}")]
    BadOutcome(String),
    /// The plugin used a capability its policy does not grant.
    #[error("denied: {0}")]
    Denied(String),
    /// Every instance slot of the runtime is taken by calls in flight.
    #[error("the host is at its limit of concurrent calls; try again shortly ({0})")]
    Overloaded(String),
    #[error("the host could not run the call: {0}")]
    Host(String),
}

impl CallError {
    pub fn code(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } => "unknown-tool",
            CallError::InvalidArguments { .. } => "invalid-arguments",
            CallError::Limit(_) => "limit",
            CallError::Trap { .. } => "trap",
            CallError::Tool { .. } => "tool-error",
            CallError::Denied(_) => "denied",
            CallError::BadOutcome(_) => "bad-outcome",
            CallError::Overloaded(_) => "overloaded",
            CallError::Host(_) => "host",
        }
    }

    /// Whether the same call may succeed later.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            CallError::Tool {
                retryable: true,
                ..
            } | CallError::Overloaded(_)
        )
    }

    /// The JSON the CLI and the API report.
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({
            "code": self.code(),
            "message": self.to_string(),
            "retryable": self.retryable(),
        });
        if let CallError::Limit(limit) = self {
            json["limit"] = limit.name().into();
        }
        json
    }
}
