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
//! It binds the newest contract, `maestro:tool@0.2.0` (`wit/since_v0.2.0`):
//! artifacts handed in for review (`Park::Artifact`), workers
//! (`Park::Worker`) and the facts of child jobs. The crate
//! `maestro-guest-v0-1` binds the frozen `maestro:tool@0.1.0` for tools that
//! need none of that; a host binds both, so such a component keeps loading
//! unchanged. Every plugin shares the same generated types, and the helpers
//! (from `maestro-guest-core`, shared by both) keep their error messages and
//! argument handling uniform. The `http` feature adds a small blocking client
//! over `wasi:http` ([`http`]).

wit_bindgen::generate!({
    path: "../../../wit/since_v0.2.0",
    world: "plugin",
    // The macro is used from the plugin crates, not from here, and must find
    // the bindings through this crate's name.
    pub_export_macro: true,
    default_bindings_module: "maestro_guest",
    export_macro_name: "export",
});

#[cfg(feature = "http")]
pub use maestro_guest_core::http;

pub use exports::maestro::tool::tool::Guest;
pub use maestro::tool::host::{self, LogLevel};
pub use maestro::tool::types::{
    ArtifactDraft, Call, Fact, LoginRequest, Outcome, Park, Resume, Review, SubtaskResult,
    SubtaskStatus, Terminal, ToolError, ToolRequest, ToolSpec, Verdict, WorkerRequest,
};
pub use maestro_guest_core::{serde, serde_json};

maestro_guest_core::helpers!();

/// The name of a resume kind as written in the WIT (`"answered"`,
/// `"approved"`, `"denied"`, `"logged-in"`, `"subtasks-done"`, `"expired"`,
/// `"reviewed"`, `"worker-done"`), for error messages a model or operator
/// reads.
pub fn resume_kind(resume: &Resume) -> &'static str {
    match resume {
        Resume::Answered(_) => "answered",
        Resume::Approved => "approved",
        Resume::Denied(_) => "denied",
        Resume::LoggedIn(_) => "logged-in",
        Resume::SubtasksDone(_) => "subtasks-done",
        Resume::Expired => "expired",
        Resume::Reviewed(_) => "reviewed",
        Resume::WorkerDone(_) => "worker-done",
    }
}

/// The name of a child job's status, as a model reads it.
pub fn status_name(status: SubtaskStatus) -> &'static str {
    match status {
        SubtaskStatus::Completed => "completed",
        SubtaskStatus::Aborted => "aborted",
        SubtaskStatus::Cancelled => "cancelled",
        SubtaskStatus::Failed => "failed",
    }
}

/// A child job's end as JSON a model reads: its id, status, output and facts
/// (the artifacts a reviewer accepted, the only ones handed on).
pub fn subtask_json(result: &SubtaskResult) -> serde_json::Value {
    let facts: Vec<serde_json::Value> = result
        .facts
        .iter()
        .map(|fact| {
            serde_json::json!({
                "artifact_id": fact.artifact_id,
                "kind": fact.kind,
                "title": fact.title,
                "media_type": fact.media_type,
                "body": fact.body,
            })
        })
        .collect();
    serde_json::json!({
        "job_id": result.job_id,
        "status": status_name(result.status),
        "output": result.output,
        "facts": facts,
    })
}
