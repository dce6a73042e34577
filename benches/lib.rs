//! Benchmarks of maestro's plugin runtime; see `runtime.rs`. Run them with
//! `cargo bench -p maestro-benches`.
