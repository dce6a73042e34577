//! Host bindings of the WIT contract, one module per frozen version
//! (`wit/since_v*/`). A new version gets a new module beside the old ones, so
//! components built against 0.1.0 keep loading after 0.2.0 ships.
//!
//! Invariant: nothing outside this module and `types.rs` names a generated
//! type; the rest of the host speaks the version-independent types of
//! `types.rs`.

/// `maestro:tool@0.1.0`.
pub mod since_v0_1_0 {
    wasmtime::component::bindgen!({
        path: "../wit/since_v0.1.0",
        world: "plugin",
        imports: { "maestro:tool/host.spawn-subtask": async },
        exports: { default: async },
    });
}

/// The newest version: what a freshly written tool targets.
pub use since_v0_1_0 as latest;

/// The WIT package of the newest version, as tool authors name it.
pub const WIT_PACKAGE: &str = "maestro:tool@0.1.0";

/// The exported interface name a component must provide, for error messages.
pub const TOOL_INTERFACE: &str = "maestro:tool/tool@0.1.0";
