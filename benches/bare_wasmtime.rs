//! The floor under `call/fresh_instance`: the same `echo` call on bare wasmtime, with the
//! engine maestro's runtime built (so the same pooling allocator, epoch interruption and
//! copy-on-write memory images), and nothing of maestro's sandbox: no schema check, no
//! limits, no capabilities, no console, no timer. Each call is a new `Store`, an instance
//! from a shared `InstancePre` (with its export indices found once), the call, and the drop.
//!
//! Two shapes: a component that imports nothing (linked against an empty linker), and the
//! Rust `echo` plugin linked as maestro links it, WASI 0.2 included (its `maestro:tool/host`
//! imports do nothing: `echo` never calls them).

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

wasmtime::component::bindgen!({
    path: "../wit/since_v0.1.0",
    world: "plugin",
    exports: { default: async },
});

use self::maestro::tool::types::{Call, Outcome};

/// What a store needs to run a WASI component: a context with nothing granted, and a table.
pub struct BareWasi {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl self::maestro::tool::host::Host for BareWasi {
    fn log(&mut self, _level: self::maestro::tool::host::LogLevel, _message: String) {}

    fn spawn_subtask(&mut self, _piece: String, _input: String) -> Result<String, String> {
        Err("no subtasks here".into())
    }
}

impl self::maestro::tool::types::Host for BareWasi {}

impl WasiView for BareWasi {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// A component ready to be instantiated fresh for each call.
pub struct BarePlugin<T: 'static> {
    engine: Engine,
    pre: PluginPre<T>,
    data: fn() -> T,
}

/// The component at `path` linked with no imports at all.
pub fn without_imports(engine: &Engine, path: &str) -> BarePlugin<()> {
    let component = Component::from_file(engine, path).expect("component compiles");
    let linker = Linker::<()>::new(engine);
    let pre = linker.instantiate_pre(&component).expect("imports nothing");
    BarePlugin {
        engine: engine.clone(),
        pre: PluginPre::new(pre).expect("exports the plugin world"),
        data: || (),
    }
}

/// The component at `path` linked with WASI 0.2, as maestro links a plugin granted no HTTP.
pub fn with_wasi(engine: &Engine, path: &str) -> BarePlugin<BareWasi> {
    let component = Component::from_file(engine, path).expect("component compiles");
    let mut linker = Linker::<BareWasi>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI links");
    Plugin::add_to_linker::<BareWasi, HasSelf<BareWasi>>(&mut linker, |state| state)
        .expect("the host interface links");
    let pre = linker.instantiate_pre(&component).expect("links");
    BarePlugin {
        engine: engine.clone(),
        pre: PluginPre::new(pre).expect("exports the plugin world"),
        data: || BareWasi {
            ctx: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    }
}

impl<T: Send + 'static> BarePlugin<T> {
    /// One call of `tool` with `arguments` on a fresh instance: its output text.
    pub async fn invoke(&self, tool: &str, arguments: &str) -> String {
        let mut store = Store::new(&self.engine, (self.data)());
        store.set_epoch_deadline(1);
        let plugin = self
            .pre
            .instantiate_async(&mut store)
            .await
            .expect("instantiates");
        let call = Call {
            call_id: String::new(),
            job_id: String::new(),
            movement: String::new(),
            tool: tool.to_owned(),
            arguments: arguments.to_owned(),
            resume: None,
        };
        match plugin
            .maestro_tool_tool()
            .call_invoke(&mut store, &call)
            .await
            .expect("the call runs")
        {
            Ok(Outcome::Output(text)) => text,
            _ => panic!("echo answers with an output"),
        }
    }
}
