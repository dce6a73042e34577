//! The plugin runtime: tools are WebAssembly components that target the WIT
//! world `maestro:tool/plugin` (any version the host binds), run sandboxed
//! under an operator policy.
//!
//! Invariant: a call either returns the tool's `Outcome` or a `CallError`
//! naming what went wrong (bad arguments, a limit, a trap, the tool's own
//! error); nothing a guest does takes the host down or leaks into the next
//! call.

mod budget;
mod cache;
mod capabilities;
mod checks;
mod error;
mod http;
mod http_send;
mod instances;
mod loaded;
mod policy;
mod runtime;
mod sandbox;
mod spare_maker;
mod types;
pub mod wit;
mod without_http;

pub use budget::{
    MAX_COMPONENT_BYTES, MAX_COMPONENT_WEIGHT, MAX_FUNCTION_OPERATORS, MAX_FUNCTION_WEIGHT,
    read_component,
};
pub use cache::{CompiledFrom, content_hash};
pub use capabilities::{MAX_SPAWNS_PER_CALL, SpawnContext, SubtaskSpawner};
pub use error::{CallError, Limit, LoadError};
pub use http::{HostPattern, HttpPolicy, OwnAddresses};
pub use loaded::{LoadReport, Plugin, WarmInstance};
pub use policy::{DirGrant, MAX_MEMORY_MIB, PluginPolicy, Policy, PolicyError, STORE};
pub(crate) use policy::{key_at, locate};
pub use runtime::{Runtime, RuntimeConfig, TICK, default_cache_dir};
pub use types::{
    ArtifactDraft, CallRequest, Fact, LIST_ELEMENT_BYTES, LoginRequest, MAX_ARTIFACT_LABEL,
    MAX_AWAITED_SUBTASKS, Outcome, Park, Resume, Review, SubtaskResult, SubtaskStatus, Terminal,
    ToolRequest, ToolSpec, Verdict, WorkerRequest,
};
pub use wit::WitVersion;
