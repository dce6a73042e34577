//! maestro: a host for agent engines whose tools are sandboxed WebAssembly
//! components. `plugin` is the component runtime and its sandbox; `piece`
//! loads and lints YAML workflows; `phase` is the pure phase machine of
//! sessions; `conformance` is the tool authors' check kit; `store` and `worker` keep and run
//! jobs; `serve` is the HTTP server; `cli` is the `maestro` command. `telemetry`, below them
//! all, names the metrics every layer records and exports them, and exports jobs' traces.

pub mod cli;
pub mod conformance;
pub mod engine;
pub mod llm;
pub mod mcp;
pub mod phase;
pub mod piece;
pub mod plugin;
pub mod serve;
pub mod store;
pub mod telemetry;
pub mod worker;
