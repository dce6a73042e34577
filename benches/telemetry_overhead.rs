//! What metrics and traces cost: tool calls and park → resume cycles with both off, with the
//! metrics recorded (as `maestro serve` records them), and with the traces exported as well.
//!
//! A recorder and a tracing subscriber stay for the life of the process that installs them, so
//! each measurement runs in a child process of this bench (`TELEMETRY=off|metrics|traces`),
//! the three in turn, round after round, so that drift in the machine's speed falls on all
//! three alike. The traces go over OTLP/HTTP to a collector on loopback that this process runs
//! and that throws them away.
//!
//! `cargo bench -p maestro-benches --bench telemetry_overhead`

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use maestro::plugin::{CallRequest, Outcome, PluginPolicy};
use maestro::telemetry::{Exporter, Traces};
use maestro_benches::{CycleRound, median};
use serde_json::json;
use tracing_subscriber::prelude::*;

maestro_benches::allocate_like_maestro!();

const MODES: [&str; 3] = ["off", "metrics", "traces"];
const ROUNDS: usize = 5;
const CALLS: u32 = 50_000;
const JOBS: u32 = 4_000;
const RUNNERS: usize = 4;

fn main() {
    match std::env::var("TELEMETRY") {
        Ok(mode) => measure(&mode),
        Err(_) => compare(),
    }
}

/// Runs the rounds in child processes and prints the table.
fn compare() {
    let collector = discarding_collector();
    let mut calls: Vec<Vec<Duration>> = vec![Vec::new(); MODES.len()];
    let mut cycles: Vec<Vec<Duration>> = vec![Vec::new(); MODES.len()];
    for _ in 0..ROUNDS {
        for (n, mode) in MODES.iter().enumerate() {
            let output = Command::new(std::env::current_exe().unwrap())
                .env("TELEMETRY", mode)
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
                .output()
                .expect("the bench runs itself");
            let said = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "{mode}: {said}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let mut numbers = said.split_whitespace().map(|n| n.parse::<u64>().unwrap());
            calls[n].push(Duration::from_nanos(numbers.next().unwrap()));
            cycles[n].push(Duration::from_nanos(numbers.next().unwrap()));
        }
    }
    println!(
        "{CALLS} `echo` calls on a fresh instance and {JOBS} cycles ({RUNNERS} runners) per \
         round, {ROUNDS} rounds, medians"
    );
    println!("| telemetry | tool call | vs off | cycles/s | vs off |");
    println!("|---|---:|---:|---:|---:|");
    let call_off = median(&mut calls[0].clone());
    let cycle_off = median(&mut cycles[0].clone());
    for (n, mode) in MODES.iter().enumerate() {
        let call = median(&mut calls[n]);
        let cycle = median(&mut cycles[n]);
        println!(
            "| {mode} | {:.2} µs | {:+.1} % | {:.0} | {:+.1} % |",
            call.as_secs_f64() * 1e6,
            (call.as_secs_f64() / call_off.as_secs_f64() - 1.0) * 100.0,
            1.0 / cycle.as_secs_f64(),
            (cycle_off.as_secs_f64() / cycle.as_secs_f64() - 1.0) * 100.0,
        );
    }
}

/// One round in `mode`: prints the time per tool call and per cycle, in nanoseconds.
fn measure(mode: &str) {
    let (rt, engine, _cache) = maestro_benches::threaded_chat_engine();
    if mode != "off" {
        Exporter::install().unwrap();
    }
    let traces = match mode {
        "traces" => {
            let (traces, layer) = Traces::from_env(rt.handle().clone())
                .unwrap()
                .expect("an OTLP endpoint");
            let ours = tracing_subscriber::filter::Targets::new()
                .with_target("maestro", tracing::Level::INFO);
            tracing_subscriber::registry()
                .with(layer.with_filter(ours))
                .init();
            Some(traces)
        }
        _ => None,
    };

    // Loaded after the recorder, as the commands that export load their plugins.
    let cache = tempfile::tempdir().unwrap();
    let runtime = maestro::plugin::Runtime::new(maestro::plugin::RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let plugin = rt
        .block_on(runtime.load_file(Path::new(maestro_plugins::ECHO), PluginPolicy::default()))
        .unwrap();
    let request = CallRequest::new("echo", json!({"text": "hi"}));
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..CALLS {
            let outcome = plugin.invoke(request.clone()).await.unwrap();
            assert!(matches!(outcome, Outcome::Output(_)));
        }
    });
    let per_call = started.elapsed() / CALLS;

    let round = CycleRound::new(&engine, RUNNERS, JOBS as usize);
    let started = Instant::now();
    round.run(&rt);
    let per_cycle = started.elapsed() / JOBS;
    round.finish();
    if let Some(traces) = traces {
        traces.shutdown();
    }
    println!("{} {}", per_call.as_nanos(), per_cycle.as_nanos());
}

/// An OTLP/HTTP endpoint on loopback that accepts every export and keeps nothing.
fn discarding_collector() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(|_body: axum::body::Bytes| async {
                    [("content-type", "application/x-protobuf")]
                }),
            );
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}
