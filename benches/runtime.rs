//! Plugin runtime benchmarks (`cargo bench -p maestro-benches`):
//!
//! - `call/warm_instance`: the trivial `echo` tool on one kept instance
//!   (the floor: what the call itself costs);
//! - `call/fresh_instance`: `Plugin::invoke` with each instance made on the call's path
//!   (`spare_instances` off): schema check, a fresh `Store` from the `InstancePre`,
//!   instantiate, call, drop;
//! - `call/spare_instance`: `Plugin::invoke` as the engine uses it, on a call that finds its
//!   fresh instance made between calls: what a call that follows another waits for;
//!   `call/fresh_instance_no_keep_resident` the same with linear memories
//!   returned to the kernel after each call instead of reset in place;
//! - `call/fresh_instance_no_wasi`: the same on `bare_echo`, an `echo` component that
//!   imports nothing (no WASI);
//! - `call/bare_wasmtime_wasi` and `call/bare_wasmtime_no_wasi`: the floor, the same two
//!   components fresh per call on bare wasmtime with the same engine (`bare_wasmtime.rs`);
//! - `call/fresh_instance_metrics_recorded`: `call/fresh_instance` with the Prometheus
//!   recorder installed, as in `maestro serve` and `maestro work`;
//! - `load/cold_compile` and `load/cached`: loading a component with
//!   Cranelift versus from the compiled-code cache.
//!
//! The `call` group runs in one process, so its rows compare side by side.

mod bare_wasmtime;

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use maestro::plugin::{CallRequest, Outcome, PluginPolicy, Runtime, RuntimeConfig};
use serde_json::json;

maestro_benches::allocate_like_maestro!();

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn calls(c: &mut Criterion) {
    let rt = tokio();
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        spare_instances: false,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let plugin = rt
        .block_on(runtime.load_file(Path::new(maestro_plugins::ECHO), PluginPolicy::default()))
        .unwrap();
    let mut warm = rt.block_on(plugin.warm_instance()).unwrap();
    let request = CallRequest::new("echo", json!({"text": "hi"}));

    let mut group = c.benchmark_group("call");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("warm_instance", |b| {
        b.iter(|| {
            let outcome = rt
                .block_on(warm.invoke("echo", r#"{"text":"hi"}"#))
                .unwrap();
            assert!(matches!(outcome, Outcome::Output(_)));
        })
    });
    group.bench_function("fresh_instance", |b| {
        b.iter(|| {
            let outcome = rt.block_on(plugin.invoke(request.clone())).unwrap();
            assert!(matches!(outcome, Outcome::Output(_)));
        })
    });

    // The call as the engine makes it: its instance was made after the last call, off both
    // calls' paths, by the runtime's worker threads; only the call itself is timed.
    let workers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let with_spares = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let spared = workers
        .block_on(with_spares.load_file(Path::new(maestro_plugins::ECHO), PluginPolicy::default()))
        .unwrap();
    // `describe` at load leaves no spare: the first call does.
    workers.block_on(spared.invoke(request.clone())).unwrap();
    group.bench_function("spare_instance", |b| {
        b.iter_custom(|iterations| {
            let mut timed = Duration::ZERO;
            for _ in 0..iterations {
                let waited = std::time::Instant::now();
                while !spared.spare_waiting() {
                    assert!(
                        waited.elapsed() < Duration::from_secs(10),
                        "no spare was made"
                    );
                    std::thread::yield_now();
                }
                let started = std::time::Instant::now();
                let outcome = workers.block_on(spared.invoke(request.clone())).unwrap();
                timed += started.elapsed();
                assert!(matches!(outcome, Outcome::Output(_)));
            }
            timed
        })
    });

    // The same call without keeping memory resident between instances: what
    // the tuning of the pooling allocator buys.
    let untuned = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        keep_resident: 0,
        spare_instances: false,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let plain = rt
        .block_on(untuned.load_file(Path::new(maestro_plugins::ECHO), PluginPolicy::default()))
        .unwrap();
    group.bench_function("fresh_instance_no_keep_resident", |b| {
        b.iter(|| {
            let outcome = rt.block_on(plain.invoke(request.clone())).unwrap();
            assert!(matches!(outcome, Outcome::Output(_)));
        })
    });

    let no_wasi = rt
        .block_on(runtime.load_file(
            Path::new(maestro_examples::BARE_ECHO),
            PluginPolicy::default(),
        ))
        .unwrap();
    group.bench_function("fresh_instance_no_wasi", |b| {
        b.iter(|| {
            let outcome = rt.block_on(no_wasi.invoke(request.clone())).unwrap();
            assert!(matches!(outcome, Outcome::Output(_)));
        })
    });

    let bare_wasi = bare_wasmtime::with_wasi(runtime.engine(), maestro_plugins::ECHO);
    group.bench_function("bare_wasmtime_wasi", |b| {
        b.iter(|| {
            let text = rt.block_on(bare_wasi.invoke("echo", r#"{"text":"hi"}"#));
            assert_eq!(text, "hi");
        })
    });
    let bare = bare_wasmtime::without_imports(runtime.engine(), maestro_examples::BARE_ECHO);
    group.bench_function("bare_wasmtime_no_wasi", |b| {
        b.iter(|| {
            let text = rt.block_on(bare.invoke("echo", r#"{"text":"hi"}"#));
            assert_eq!(text, r#"{"text":"hi"}"#);
        })
    });

    // Last, since a recorder once installed stays for the process: the rows above ran with
    // the metrics facade a no-op, this one records every call as `maestro serve` does.
    // A plugin registers its call metrics at its first call, so this one loads after.
    let exporter = maestro::telemetry::Exporter::install().unwrap();
    let recorded = rt
        .block_on(runtime.load_file(Path::new(maestro_plugins::ECHO), PluginPolicy::default()))
        .unwrap();
    group.bench_function("fresh_instance_metrics_recorded", |b| {
        b.iter(|| {
            let outcome = rt.block_on(recorded.invoke(request.clone())).unwrap();
            assert!(matches!(outcome, Outcome::Output(_)));
        })
    });
    let scraped = exporter.render();
    assert!(
        scraped.contains(r#"maestro_tool_calls_total{plugin="echo",tool="echo""#),
        "the recorded row recorded nothing:\n{scraped}"
    );
    group.finish();
}

fn loads(c: &mut Criterion) {
    let rt = tokio();
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    for (name, path) in [
        ("echo", maestro_plugins::ECHO),
        ("browse_web", maestro_plugins::BROWSE_WEB),
    ] {
        let bytes = std::fs::read(path).unwrap();
        let uncached = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        group.bench_function(format!("cold_compile/{name}"), |b| {
            b.iter(|| {
                rt.block_on(uncached.load(name, &bytes, PluginPolicy::default()))
                    .unwrap()
            })
        });
        let cache = tempfile::tempdir().unwrap();
        let cached = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            ..RuntimeConfig::default()
        })
        .unwrap();
        rt.block_on(cached.load(name, &bytes, PluginPolicy::default()))
            .unwrap();
        group.bench_function(format!("cached/{name}"), |b| {
            b.iter(|| {
                rt.block_on(cached.load(name, &bytes, PluginPolicy::default()))
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, calls, loads);
criterion_main!(benches);
