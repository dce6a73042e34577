//! What a tool costs by language: component size, cold compile, load from the compile cache, and
//! a first call on a fresh instance, for the examples in `plugins/examples` (WAT, C, Python,
//! JavaScript) and the Rust `echo`.
//!
//! `cargo bench -p maestro-benches --bench example_load` prints one row per component (medians
//! over `CACHED_RUNS` cached loads and calls; one cold compile each, in a fresh cache).

use std::path::Path;
use std::time::Instant;

use maestro::plugin::{CallRequest, CompiledFrom, PluginPolicy, Runtime, RuntimeConfig};
use maestro_benches::{human_size, human_time, median};
use serde_json::json;

maestro_benches::allocate_like_maestro!();

const CACHED_RUNS: usize = 15;

fn main() {
    let components = [
        ("WAT", maestro_examples::CONFIRM, "Confirm", json!({})),
        (
            "C",
            maestro_examples::TEXT_STATS,
            "TextStats",
            json!({"text": "one two"}),
        ),
        (
            "Rust",
            maestro_plugins::ECHO,
            "echo",
            json!({"text": "one two"}),
        ),
        (
            "Python",
            maestro_examples::CONVERT_UNITS,
            "ConvertUnits",
            json!({"value": 5, "from": "km", "to": "mi"}),
        ),
        (
            "JavaScript",
            maestro_examples::RENDER_TABLE,
            "RenderTable",
            json!({"rows": [{"a": 1}]}),
        ),
    ];
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    println!(
        "| language | component | size | cold compile | cached load | first call (fresh instance) |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for (language, path, tool, arguments) in components {
        let cache = tempfile::tempdir().expect("temp dir");
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            ..RuntimeConfig::default()
        })
        .expect("runtime starts");
        let load = || async {
            let plugin = runtime
                .load_file(Path::new(path), PluginPolicy::default())
                .await
                .unwrap_or_else(|err| panic!("{path}: {err}"));
            let report = plugin.load_report().clone();
            (plugin, report)
        };
        let (_, cold) = rt.block_on(load());
        assert_eq!(cold.compiled_from, CompiledFrom::Compiler);
        let mut loads = Vec::new();
        let mut calls = Vec::new();
        for _ in 0..CACHED_RUNS {
            let (plugin, report) = rt.block_on(load());
            assert_eq!(report.compiled_from, CompiledFrom::Cache);
            loads.push(report.total);
            let started = Instant::now();
            rt.block_on(plugin.invoke(CallRequest::new(tool, arguments.clone())))
                .unwrap_or_else(|err| panic!("{tool}: {err}"));
            calls.push(started.elapsed());
        }
        let size = std::fs::metadata(path).expect("component exists").len();
        println!(
            "| {language} | {} | {} | {} | {} | {} |",
            Path::new(path).file_name().unwrap().to_string_lossy(),
            human_size(size),
            human_time(cold.total),
            human_time(median(&mut loads)),
            human_time(median(&mut calls)),
        );
    }
}
