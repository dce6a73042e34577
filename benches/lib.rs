//! Benchmarks of maestro: the plugin runtime (`runtime.rs`), jobs through the store
//! (`jobs.rs`) and the memory of parked jobs (`parked_memory.rs`). Run them with
//! `cargo bench -p maestro-benches`.
