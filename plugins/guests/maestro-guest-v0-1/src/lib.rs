//! Rust SDK for maestro tool plugins of the frozen contract
//! `maestro:tool@0.1.0` (`wit/since_v0.1.0`): the same helpers as
//! `maestro-guest` (from `maestro-guest-core`), for tools that hand in no artifacts and start no workers.
//! A host binds every version it supports, so a 0.1.0 component keeps loading
//! and running unchanged beside 0.2.0 ones. New tools use `maestro-guest`.

wit_bindgen::generate!({
    path: "../../../wit/since_v0.1.0",
    world: "plugin",
    pub_export_macro: true,
    default_bindings_module: "maestro_guest_v0_1",
    export_macro_name: "export",
});

pub use exports::maestro::tool::tool::Guest;
pub use maestro::tool::host::{self, LogLevel};
pub use maestro::tool::types::{
    Call, LoginRequest, Outcome, Park, Resume, SubtaskResult, SubtaskStatus, Terminal, ToolError,
    ToolRequest, ToolSpec,
};
#[cfg(feature = "http")]
pub use maestro_guest_core::http;
pub use maestro_guest_core::{serde, serde_json};

maestro_guest_core::helpers!();

/// The name of a resume kind as written in the WIT (`"answered"`,
/// `"approved"`, `"denied"`, `"logged-in"`, `"subtasks-done"`, `"expired"`).
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
