//! Hot loading: the time from a plugin file landing in a watched plugin folder (by rename, as
//! an operator's deploy or `PUT /v1/plugins` does) to its first successful call, through the
//! server's own watcher and plugin host. Cached: the compile cache already holds the component
//! (a restart, a re-deploy of a known version); uncached: a version never seen before.
//!
//! `cargo bench -p maestro-benches --bench hot_load` prints one row per plugin and case, with
//! the folder watcher's debounce at the server's default (10 ms), which every row includes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use maestro::plugin::{CallRequest, Policy, Runtime, RuntimeConfig};
use maestro::serve::{PluginHost, ServingState, watch_folder};
use maestro_benches::{human_size, human_time, median};
use serde_json::{Value, json};

maestro_benches::allocate_like_maestro!();

const DEBOUNCE: Duration = Duration::from_millis(10);

fn main() {
    let plugins: [(&str, &str, &str, Value, usize); 2] = [
        (
            "Rust (echo)",
            maestro_plugins::ECHO,
            "echo",
            json!({"text": "hi"}),
            15,
        ),
        (
            "Python (ConvertUnits)",
            maestro_examples::CONVERT_UNITS,
            "ConvertUnits",
            json!({"value": 5, "from": "km", "to": "mi"}),
            3,
        ),
    ];
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    println!("debounce {} ms", DEBOUNCE.as_millis());
    println!("| plugin | size | uncached: landing → first call | cached: landing → first call |");
    println!("|---|---:|---:|---:|");
    for (label, path, tool, arguments, uncached_runs) in plugins {
        let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("{path}: {err}"));
        let warm_cache = tempfile::tempdir().expect("temp dir");
        let mut uncached: Vec<Duration> = (0..uncached_runs)
            .map(|_| {
                let fresh = tempfile::tempdir().expect("temp dir");
                rt.block_on(land_and_call(&bytes, fresh.path(), tool, &arguments))
            })
            .collect();
        // Fills the warm cache; not counted.
        rt.block_on(land_and_call(&bytes, warm_cache.path(), tool, &arguments));
        let mut cached: Vec<Duration> = (0..15)
            .map(|_| rt.block_on(land_and_call(&bytes, warm_cache.path(), tool, &arguments)))
            .collect();
        let (fastest, slowest) = (
            *cached.iter().min().expect("runs"),
            *cached.iter().max().expect("runs"),
        );
        println!(
            "| {label} | {} | {} (median of {uncached_runs}) | {} (median of 15; {}–{}) |",
            human_size(bytes.len() as u64),
            human_time(median(&mut uncached)),
            human_time(median(&mut cached)),
            human_time(fastest),
            human_time(slowest),
        );
    }
}

/// A fresh, watched, empty plugin folder; the component renamed into it; the time until a
/// call to `tool` on the version now serving succeeds.
async fn land_and_call(bytes: &[u8], cache: &Path, tool: &str, arguments: &Value) -> Duration {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let folder = tempfile::tempdir().expect("temp dir");
    let plugin_dir = folder.path().join("plugins");
    std::fs::create_dir(&plugin_dir).expect("plugin folder");
    let host = Arc::new(PluginHost::new(
        runtime,
        plugin_dir.clone(),
        folder.path().join("versions"),
        Policy::default(),
    ));
    let (serving_tx, mut serving) = tokio::sync::mpsc::unbounded_channel();
    host.on_change(move |status| {
        if status.status == ServingState::Serving {
            let _ = serving_tx.send(());
        }
    });
    let _watch = watch_folder(host.clone(), DEBOUNCE).expect("watcher starts");
    let staged = folder.path().join("staged.wasm");
    std::fs::write(&staged, bytes).expect("stage the component");
    // Lets the watcher settle on the empty folder.
    tokio::time::sleep(Duration::from_millis(50)).await;

    let landed = Instant::now();
    std::fs::rename(&staged, plugin_dir.join("tool.wasm")).expect("land the component");
    tokio::time::timeout(Duration::from_secs(120), serving.recv())
        .await
        .expect("the plugin serves within 2 minutes")
        .expect("the host reports");
    let plugin = host
        .slot()
        .current()
        .plugin_for(tool)
        .cloned()
        .unwrap_or_else(|| panic!("no plugin answers {tool}"));
    plugin
        .invoke(CallRequest::new(tool, arguments.clone()))
        .await
        .unwrap_or_else(|err| panic!("{tool}: {err}"));
    landed.elapsed()
}
