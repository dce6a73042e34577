//! maestro's plugins, ready to load: absolute paths to the WebAssembly
//! components that `build.rs` builds from `plugins/guests` (Rust, for
//! `wasm32-wasip2`) and assembles from `plugins/fixtures` (hand-written WAT).
//!
//! Everything lives in [`DIR`] (`<cargo target dir>/plugins`). The first-party
//! control-flow tools are [`COMPLETE`], [`BROWSE_WEB`], [`REQUEST_TOOL`] and
//! [`WAIT_SUBTASK`] (together [`FIRST_PARTY`]); [`ECHO`] and [`HOSTILE`] exist
//! for tests and benchmarks; [`NOT_A_COMPONENT`], [`WRONG_WORLD`],
//! [`WRONG_TYPES`] and [`UNKNOWN_IMPORT`] are malformed on purpose, for the
//! host's loading errors.

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
