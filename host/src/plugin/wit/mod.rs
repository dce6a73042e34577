//! Host bindings of the WIT contract, one module per frozen version
//! (`wit/since_v*/`): each binds its version with `bindgen!`, serves its
//! `host` interface from the version-independent capabilities, and converts
//! its generated types from and to those of `types.rs`. A new version gets a
//! new module beside the old ones, so components built against 0.1.0 keep
//! loading after 0.2.0 ships.
//!
//! Invariant: nothing outside this module names a generated type; the rest of
//! the host speaks the version-independent types of `types.rs`, and which
//! version a component targets is decided once, at load, by what it exports.

/// What every version module has alike, written for its own generated types: linking its
/// `host` interface, serving it from the capabilities, checking the export signatures, calling
/// `describe`, and the subtask status. Used inside a version module, after its `bindgen!`.
macro_rules! shared_bindings {
    () => {
        pub(super) fn add_to_linker(
            linker: &mut wasmtime::component::Linker<CallState>,
        ) -> wasmtime::Result<()> {
            Plugin::add_to_linker::<CallState, wasmtime::component::HasSelf<CallState>>(
                linker,
                |state| state,
            )
        }

        impl self::maestro::tool::host::Host for CallState {
            fn log(&mut self, level: self::maestro::tool::host::LogLevel, message: String) {
                use self::maestro::tool::host::LogLevel as Wit;
                use crate::plugin::capabilities::LogLevel;
                let level = match level {
                    Wit::Trace => LogLevel::Trace,
                    Wit::Debug => LogLevel::Debug,
                    Wit::Info => LogLevel::Info,
                    Wit::Warn => LogLevel::Warn,
                    Wit::Error => LogLevel::Error,
                };
                self.capabilities.log(level, message);
            }

            fn spawn_subtask(
                &mut self,
                piece: String,
                input: String,
            ) -> impl Future<Output = Result<String, String>> + Send {
                self.capabilities.spawn_subtask(piece, input)
            }
        }

        impl self::maestro::tool::types::Host for CallState {}

        /// Checks that `describe` and `invoke` have this version's signatures.
        pub(super) fn check_exports(
            instance: wasmtime::component::Instance,
            store: &mut Store<CallState>,
        ) -> Result<(), String> {
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
                    format!(
                        "`{TOOL_INTERFACE}#describe` must be `func() -> list<tool-spec>`: {err}"
                    )
                })?;
            let invoke = index(store, "invoke")?;
            instance
                .get_typed_func::<(&wit::Call,), (Result<wit::Outcome, wit::ToolError>,)>(
                    &mut *store,
                    invoke,
                )
                .map_err(|err| {
                    format!(
                        "`{TOOL_INTERFACE}#invoke` must be `func(call: call) -> \
                         result<outcome, tool-error>`: {err}"
                    )
                })?;
            Ok(())
        }

        pub(super) async fn describe(
            instance: &Plugin,
            store: &mut Store<CallState>,
        ) -> wasmtime::Result<Vec<super::DescribedTool>> {
            let specs = instance.maestro_tool_tool().call_describe(store).await?;
            Ok(specs
                .into_iter()
                .map(|spec| super::DescribedTool {
                    name: spec.name,
                    description: spec.description,
                    parameters: spec.parameters,
                })
                .collect())
        }

        fn status(status: crate::plugin::types::SubtaskStatus) -> wit::SubtaskStatus {
            use crate::plugin::types::SubtaskStatus;
            match status {
                SubtaskStatus::Completed => wit::SubtaskStatus::Completed,
                SubtaskStatus::Aborted => wit::SubtaskStatus::Aborted,
                SubtaskStatus::Cancelled => wit::SubtaskStatus::Cancelled,
                SubtaskStatus::Failed => wit::SubtaskStatus::Failed,
            }
        }
    };
}

pub mod since_v0_1_0;
pub mod since_v0_2_0;

use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::{Component, InstancePre, Linker};

use super::sandbox::CallState;
use super::types::{Outcome, Resume};

/// The newest version: what a freshly written tool targets.
pub use since_v0_2_0 as latest;

/// The WIT package of the newest version, as tool authors name it.
pub const WIT_PACKAGE: &str = "maestro:tool@0.2.0";

/// The exported interface name of the newest version, for error messages.
pub const TOOL_INTERFACE: &str = "maestro:tool/tool@0.2.0";

/// A version of the contract this host binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum WitVersion {
    #[serde(rename = "0.1.0")]
    V0_1_0,
    #[serde(rename = "0.2.0")]
    V0_2_0,
}

impl WitVersion {
    /// Every version the host binds, newest first: the order a component's exports are
    /// matched in.
    pub const ALL: [WitVersion; 2] = [WitVersion::V0_2_0, WitVersion::V0_1_0];

    pub fn package(self) -> &'static str {
        match self {
            WitVersion::V0_1_0 => "maestro:tool@0.1.0",
            WitVersion::V0_2_0 => WIT_PACKAGE,
        }
    }

    pub fn tool_interface(self) -> &'static str {
        match self {
            WitVersion::V0_1_0 => since_v0_1_0::TOOL_INTERFACE,
            WitVersion::V0_2_0 => since_v0_2_0::TOOL_INTERFACE,
        }
    }

    /// The version whose `tool` interface `component` exports, if any.
    pub fn exported_by(component: &Component, engine: &wasmtime::Engine) -> Option<WitVersion> {
        let exports: Vec<String> = component
            .component_type()
            .exports(engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        Self::ALL
            .into_iter()
            .find(|version| exports.iter().any(|name| name == version.tool_interface()))
    }
}

impl std::fmt::Display for WitVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.package())
    }
}

/// Links the `host` interface of every version, so a component may import any of them.
pub(super) fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    since_v0_1_0::add_to_linker(linker)?;
    since_v0_2_0::add_to_linker(linker)
}

/// One tool as `describe` returned it, before the host checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedTool {
    pub name: String,
    pub description: String,
    pub parameters: String,
}

/// One call as the guest gets it: its arguments already checked and written as JSON text.
#[derive(Debug, Clone)]
pub struct GuestCall {
    pub call_id: String,
    pub job_id: String,
    pub movement: String,
    pub tool: String,
    pub arguments: String,
    pub resume: Option<Resume>,
}

/// A tool's own error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestError {
    pub message: String,
    pub retryable: bool,
}

/// A resume that an older version cannot carry: only a park of a later version produces it.
#[derive(Debug, thiserror::Error)]
#[error(
    "a {version} component cannot be resumed with `{resume}`: that park came with a later version"
)]
pub struct ResumeTooNew {
    pub version: WitVersion,
    pub resume: &'static str,
}

/// A component linked against the host, bound to the version it exports.
pub(crate) enum ToolPre {
    V0_1_0(since_v0_1_0::PluginPre<CallState>),
    V0_2_0(since_v0_2_0::PluginPre<CallState>),
}

impl ToolPre {
    /// Binds `pre` to the version its component exports; `Err` says what is missing.
    pub fn new(pre: InstancePre<CallState>, engine: &wasmtime::Engine) -> Result<Self, String> {
        let Some(version) = WitVersion::exported_by(pre.component(), engine) else {
            let wanted: Vec<String> = WitVersion::ALL
                .iter()
                .map(|version| format!("`{}`", version.tool_interface()))
                .collect();
            return Err(format!(
                "the component exports none of {} (the `tool` interface of a version this \
                 host supports)",
                wanted.join(", ")
            ));
        };
        let shape = |err: wasmtime::Error| {
            format!(
                "the export `{}` has the wrong shape: {err:#}",
                version.tool_interface()
            )
        };
        Ok(match version {
            WitVersion::V0_1_0 => {
                ToolPre::V0_1_0(since_v0_1_0::PluginPre::new(pre).map_err(shape)?)
            }
            WitVersion::V0_2_0 => {
                ToolPre::V0_2_0(since_v0_2_0::PluginPre::new(pre).map_err(shape)?)
            }
        })
    }

    pub fn version(&self) -> WitVersion {
        match self {
            ToolPre::V0_1_0(_) => WitVersion::V0_1_0,
            ToolPre::V0_2_0(_) => WitVersion::V0_2_0,
        }
    }

    pub fn instance_pre(&self) -> &InstancePre<CallState> {
        match self {
            ToolPre::V0_1_0(pre) => pre.instance_pre(),
            ToolPre::V0_2_0(pre) => pre.instance_pre(),
        }
    }

    /// A fresh instance in `store`. With `check_shape`, the export signatures are checked
    /// first, so that a wrong one is named (the bindings only say "type mismatch").
    pub async fn instantiate(
        &self,
        store: &mut Store<CallState>,
        check_shape: bool,
    ) -> wasmtime::Result<ToolInstance> {
        let raw = self.instance_pre().instantiate_async(&mut *store).await?;
        let checked = |result: Result<(), String>| {
            result.map_err(|detail| wasmtime::Error::new(super::checks::WrongShape(detail)))
        };
        Ok(match self {
            ToolPre::V0_1_0(_) => {
                if check_shape {
                    checked(since_v0_1_0::check_exports(raw, store))?;
                }
                ToolInstance::V0_1_0(since_v0_1_0::Plugin::new(&mut *store, &raw)?)
            }
            ToolPre::V0_2_0(_) => {
                if check_shape {
                    checked(since_v0_2_0::check_exports(raw, store))?;
                }
                ToolInstance::V0_2_0(since_v0_2_0::Plugin::new(&mut *store, &raw)?)
            }
        })
    }
}

/// An instance of a component, bound to its version.
pub(crate) enum ToolInstance {
    V0_1_0(since_v0_1_0::Plugin),
    V0_2_0(since_v0_2_0::Plugin),
}

impl ToolInstance {
    pub async fn describe(
        &self,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<Vec<DescribedTool>> {
        match self {
            ToolInstance::V0_1_0(instance) => since_v0_1_0::describe(instance, store).await,
            ToolInstance::V0_2_0(instance) => since_v0_2_0::describe(instance, store).await,
        }
    }

    pub async fn invoke(
        &self,
        store: &mut Store<CallState>,
        call: GuestCall,
    ) -> wasmtime::Result<Result<Outcome, GuestError>> {
        match self {
            ToolInstance::V0_1_0(instance) => since_v0_1_0::invoke(instance, store, call).await,
            ToolInstance::V0_2_0(instance) => since_v0_2_0::invoke(instance, store, call).await,
        }
    }
}
