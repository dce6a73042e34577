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

        /// Where `describe` and `invoke` are among a component's exports: found once per
        /// component, so a call looks its functions up by index.
        #[derive(Debug, Clone, Copy)]
        pub(super) struct Exports {
            describe: wasmtime::component::ComponentExportIndex,
            invoke: wasmtime::component::ComponentExportIndex,
        }

        type DescribeFunc = wasmtime::component::TypedFunc<(), (Vec<wit::ToolSpec>,)>;
        type InvokeFunc<'a> = wasmtime::component::TypedFunc<
            (&'a wit::Call,),
            (Result<wit::Outcome, wit::ToolError>,),
        >;

        impl Exports {
            /// The indices of this version's functions in `component`; `Err` names what is
            /// missing.
            pub(super) fn find(component: &wasmtime::component::Component) -> Result<Self, String> {
                let interface = component
                    .get_export_index(None, TOOL_INTERFACE)
                    .ok_or_else(|| format!("`{TOOL_INTERFACE}` is not exported"))?;
                let index = |name: &str| {
                    component
                        .get_export_index(Some(&interface), name)
                        .ok_or_else(|| format!("`{TOOL_INTERFACE}` has no function `{name}`"))
                };
                Ok(Self {
                    describe: index("describe")?,
                    invoke: index("invoke")?,
                })
            }

            /// Checks on `instance`, an instance of the component the indices were found in,
            /// that `describe` and `invoke` have this version's signatures, naming the one that
            /// does not (the bindings would only say "type mismatch").
            pub(super) fn check(
                &self,
                instance: wasmtime::component::Instance,
                store: &mut Store<CallState>,
            ) -> Result<(), String> {
                let describe = self
                    .func(instance, store, &self.describe)
                    .map_err(|e| e.to_string())?;
                // The same types the unchecked calls use: what this check vouches for.
                let _: DescribeFunc = describe.typed(&*store).map_err(|err| {
                    format!(
                        "`{TOOL_INTERFACE}#describe` must be `func() -> list<tool-spec>`: {err}"
                    )
                })?;
                let invoke = self
                    .func(instance, store, &self.invoke)
                    .map_err(|e| e.to_string())?;
                let _: InvokeFunc<'_> = invoke.typed(&*store).map_err(|err| {
                    format!(
                        "`{TOOL_INTERFACE}#invoke` must be `func(call: call) -> \
                             result<outcome, tool-error>`: {err}"
                    )
                })?;
                Ok(())
            }

            fn func(
                &self,
                instance: wasmtime::component::Instance,
                store: &mut Store<CallState>,
                index: &wasmtime::component::ComponentExportIndex,
            ) -> wasmtime::Result<wasmtime::component::Func> {
                instance.get_func(&mut *store, index).ok_or_else(|| {
                    wasmtime::Error::msg(format!("`{TOOL_INTERFACE}` lost a function"))
                })
            }
        }

        /// Calls `describe`.
        ///
        /// # Safety
        ///
        /// `exports.check` accepted an instance of the component `instance` is an instance of.
        pub(super) async unsafe fn describe(
            exports: &Exports,
            instance: wasmtime::component::Instance,
            store: &mut Store<CallState>,
        ) -> wasmtime::Result<Vec<super::DescribedTool>> {
            let func = exports.func(instance, store, &exports.describe)?;
            // SAFETY: the caller's contract: the signature was checked for this component.
            let func: DescribeFunc = unsafe { wasmtime::component::TypedFunc::new_unchecked(func) };
            let (specs,) = func.call_async(&mut *store, ()).await?;
            Ok(specs
                .into_iter()
                .map(|spec| super::DescribedTool {
                    name: spec.name,
                    description: spec.description,
                    parameters: spec.parameters,
                })
                .collect())
        }

        /// Calls `invoke` with `call`.
        ///
        /// # Safety
        ///
        /// As for [`describe`].
        async unsafe fn call_invoke(
            exports: &Exports,
            instance: wasmtime::component::Instance,
            store: &mut Store<CallState>,
            call: &wit::Call,
        ) -> wasmtime::Result<Result<wit::Outcome, wit::ToolError>> {
            let func = exports.func(instance, store, &exports.invoke)?;
            // SAFETY: the caller's contract: the signature was checked for this component.
            let func: InvokeFunc<'_> =
                unsafe { wasmtime::component::TypedFunc::new_unchecked(func) };
            let (result,) = func.call_async(&mut *store, (call,)).await?;
            Ok(result)
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

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::{Component, Instance, InstancePre, Linker};

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

/// A component linked against the host, bound to the version it exports, with the indices of
/// that version's functions.
///
/// Invariant: a `ToolInstance` is handed out only once `describe` and `invoke` were checked to
/// have the version's signatures on an instance of this component (the first one made), so a
/// call neither checks them again nor looks them up by name: what the unsafe typed calls of the
/// version modules rely on.
pub(crate) struct ToolPre {
    pre: InstancePre<CallState>,
    exports: VersionExports,
    checked: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
enum VersionExports {
    V0_1_0(since_v0_1_0::Exports),
    V0_2_0(since_v0_2_0::Exports),
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
        let exports = match version {
            WitVersion::V0_1_0 => {
                VersionExports::V0_1_0(since_v0_1_0::Exports::find(pre.component())?)
            }
            WitVersion::V0_2_0 => {
                VersionExports::V0_2_0(since_v0_2_0::Exports::find(pre.component())?)
            }
        };
        Ok(Self {
            pre,
            exports,
            checked: AtomicBool::new(false),
        })
    }

    pub fn version(&self) -> WitVersion {
        match self.exports {
            VersionExports::V0_1_0(_) => WitVersion::V0_1_0,
            VersionExports::V0_2_0(_) => WitVersion::V0_2_0,
        }
    }

    pub fn instance_pre(&self) -> &InstancePre<CallState> {
        &self.pre
    }

    /// A fresh instance in `store`. The first one checks the export signatures, so that a
    /// wrong one is named ([`WrongShape`](super::checks::WrongShape)).
    pub async fn instantiate(
        &self,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<ToolInstance> {
        let instance = self.pre.instantiate_async(&mut *store).await?;
        if !self.checked.load(Ordering::Acquire) {
            let checked = match &self.exports {
                VersionExports::V0_1_0(exports) => exports.check(instance, store),
                VersionExports::V0_2_0(exports) => exports.check(instance, store),
            };
            checked.map_err(|detail| wasmtime::Error::new(super::checks::WrongShape(detail)))?;
            self.checked.store(true, Ordering::Release);
        }
        Ok(ToolInstance {
            instance,
            exports: self.exports,
        })
    }
}

/// An instance of a component whose export signatures were checked, bound to its version.
pub(crate) struct ToolInstance {
    instance: Instance,
    exports: VersionExports,
}

impl ToolInstance {
    pub async fn describe(
        &self,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<Vec<DescribedTool>> {
        // SAFETY: a `ToolInstance` exists only once its component's signatures were checked.
        unsafe {
            match &self.exports {
                VersionExports::V0_1_0(exports) => {
                    since_v0_1_0::describe(exports, self.instance, store).await
                }
                VersionExports::V0_2_0(exports) => {
                    since_v0_2_0::describe(exports, self.instance, store).await
                }
            }
        }
    }

    pub async fn invoke(
        &self,
        store: &mut Store<CallState>,
        call: GuestCall,
    ) -> wasmtime::Result<Result<Outcome, GuestError>> {
        // SAFETY: as in `describe`.
        unsafe {
            match &self.exports {
                VersionExports::V0_1_0(exports) => {
                    since_v0_1_0::invoke(exports, self.instance, store, call).await
                }
                VersionExports::V0_2_0(exports) => {
                    since_v0_2_0::invoke(exports, self.instance, store, call).await
                }
            }
        }
    }
}
