//! maestro's plugins, ready to load: absolute paths to the WebAssembly
//! components that `build.rs` builds from `plugins/guests` (Rust, for
//! `wasm32-wasip2`) and assembles from `plugins/fixtures` (hand-written WAT).
//!
//! The first-party control-flow tools [`COMPLETE`], [`BROWSE_WEB`],
//! [`REQUEST_TOOL`], [`WAIT_SUBTASK`], [`SPAWN_SUBTASK`], [`HAND_IN`] and
//! [`RUN_WORKER`] (together [`FIRST_PARTY`]) live alone in [`DIR`]
//! (`<cargo target dir>/plugins`), a folder `maestro run --plugins` can use
//! as is. In [`TEST_DIR`]: [`ECHO`] and [`HOSTILE`], for tests and
//! benchmarks, and [`NOT_A_COMPONENT`], [`WRONG_WORLD`], [`WRONG_TYPES`] and
//! [`UNKNOWN_IMPORT`], malformed on purpose, for the host's loading errors.

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
