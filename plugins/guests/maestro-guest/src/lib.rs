//! Rust SDK for maestro tool plugins.
//!
//! A plugin is a `cdylib` built for `wasm32-wasip2` that implements [`Guest`]
//! and hands it to [`export!`]:
//!
//! ```ignore
//! struct MyTools;
//!
//! impl maestro_guest::Guest for MyTools {
//!     fn describe() -> Vec<maestro_guest::ToolSpec> { /* ... */ }
//!     fn invoke(call: maestro_guest::Call) -> Result<maestro_guest::Outcome, maestro_guest::ToolError> { /* ... */ }
//! }
//!
//! maestro_guest::export!(MyTools);
//! ```
//!
//! The bindings of the `maestro:tool@0.1.0` world (`wit/since_v0.1.0`) are
//! generated here once so every plugin shares the same types, and the helpers
//! keep the plugins' error messages and argument handling uniform. The `http`
//! feature adds a small blocking client over `wasi:http` ([`http`]).

wit_bindgen::generate!({
    path: "../../../wit/since_v0.1.0",
    world: "plugin",
    // The macro is used from the plugin crates, not from here, and must find
    // the bindings through this crate's name.
    pub_export_macro: true,
    default_bindings_module: "maestro_guest",
    export_macro_name: "export",
});

#[cfg(feature = "http")]
pub mod http;

pub use exports::maestro::tool::tool::Guest;
pub use maestro::tool::host::{self, LogLevel};
pub use maestro::tool::types::{
    Call, LoginRequest, Outcome, Park, Resume, SubtaskResult, SubtaskStatus, Terminal, ToolError,
    ToolRequest, ToolSpec,
};
pub use serde_json;

use serde::de::DeserializeOwned;

/// Deserializes the call's `arguments` JSON into `T`.
///
/// The host has already validated the arguments against the tool's schema, so
/// a failure here means the schema and `T` disagree; retrying cannot help,
/// hence a non-retryable error that names serde's complaint.
pub fn parse_args<T: DeserializeOwned>(call: &Call) -> Result<T, ToolError> {
    serde_json::from_str(&call.arguments)
        .map_err(|err| ToolError::permanent(format!("invalid arguments for {}: {err}", call.tool)))
}

/// Builds a [`ToolSpec`] whose `parameters` is `schema` serialized as JSON.
pub fn spec(name: &str, description: &str, schema: serde_json::Value) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: schema.to_string(),
    }
}

/// An [`Outcome::Output`] carrying `value` as compact JSON.
pub fn output_json(value: &serde_json::Value) -> Outcome {
    Outcome::Output(value.to_string())
}

/// The name of a resume kind as written in the WIT (`"answered"`,
/// `"approved"`, `"denied"`, `"logged-in"`, `"subtasks-done"`, `"expired"`),
/// for error messages a model or operator reads.
pub fn resume_kind(resume: &Resume) -> &'static str {
    match resume {
        Resume::Answered(_) => "answered",
        Resume::Approved => "approved",
        Resume::Denied(_) => "denied",
        Resume::LoggedIn(_) => "logged-in",
        Resume::SubtasksDone(_) => "subtasks-done",
        Resume::Expired => "expired",
    }
}

impl Resume {
    /// Same as [`resume_kind`].
    pub fn kind(&self) -> &'static str {
        resume_kind(self)
    }
}

impl ToolError {
    /// A tool error with an explicit retry hint.
    pub fn new(message: impl Into<String>, retryable: bool) -> Self {
        ToolError {
            message: message.into(),
            retryable,
        }
    }

    /// An error that the same call will hit again (bad input, refused
    /// capability, a wait that expired...).
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(message, false)
    }

    /// An error that may go away if the call is tried again later (rate
    /// limits, a server's 5xx...).
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(message, true)
    }

    /// The call named a tool this plugin does not offer. The host checks
    /// names against `describe`, so this only fires on a host bug or a
    /// `describe` that lost a tool.
    pub fn unknown_tool(call: &Call) -> Self {
        Self::permanent(format!("this plugin has no tool named {:?}", call.tool))
    }

    /// The call was resumed with a kind of resume its park cannot produce:
    /// `"<tool> cannot be resumed with <kind>"`.
    pub fn cannot_resume(tool: &str, resume: &Resume) -> Self {
        Self::permanent(format!(
            "{tool} cannot be resumed with {}",
            resume_kind(resume)
        ))
    }
}

/// Writes `message` to the host's log; a thin wrapper so plugins need not
/// reach into the [`host`] module for the common case.
pub fn log(level: LogLevel, message: &str) {
    host::log(level, message);
}
