//! Park → resume cycles per second through the HTTP API of a real in-process server, the way
//! a UI or another service drives maestro.
//!
//! Each client repeats one cycle: `POST /v1/jobs` starts a job of the piece `chat`; the client
//! follows `GET /v1/jobs/{id}/events` (server-sent events) until the job parks on a question
//! (the real `complete` component), answers it with `POST /v1/jobs/{id}/answer`, and follows the
//! same stream to its `end`. Clients and server share this machine's processors, as they do when
//! a UI runs beside the server; the HTTP client is reqwest over loopback.
//!
//! Measured: cycles per second, processor time per cycle (the whole process, clients
//! included), and the round-trip time of the answer request (p50 and p99): what an operator's
//! click waits for, and where a handler that held a runtime thread while the store committed
//! would show.
//!
//! `cargo bench -p maestro-benches --bench api_cycles`; `API_RUNNERS=4,16` and
//! `API_CLIENTS=32` choose the worker sizes and the number of clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use maestro::engine::Engine;
use maestro::plugin::{Policy, Runtime, RuntimeConfig};
use maestro::serve::{Auth, PluginHost, ServeSettings};
use maestro::store::{JobStore, SqliteStore};
use maestro::worker::WorkerConfig;
use maestro_benches::{cpu_time, median, rate_with_range};
use serde_json::{Value, json};
use tokio::sync::Notify;

maestro_benches::allocate_like_maestro!();

/// Cycles per round, shared by the clients.
const CYCLES: usize = 3_000;
/// Each worker size is measured this many times, on a fresh server and store each time.
const ROUNDS: usize = 3;

struct Round {
    elapsed: Duration,
    cpu_per_cycle: Duration,
    /// Round trips of every answer request, sorted.
    answers: Vec<Duration>,
}

fn main() {
    let (rt, engine, _cache) = maestro_benches::threaded_chat_engine();
    let runner_sizes = maestro_benches::sizes_from_env("API_RUNNERS", &[4, 16]);
    let clients = maestro_benches::sizes_from_env("API_CLIENTS", &[32])[0];
    println!(
        "{CYCLES} cycles per round by {clients} HTTP clients, {ROUNDS} rounds per size: medians, \
         with the rounds' range"
    );
    println!("| runners | cycles/s | processor time per cycle | answer round trip p50 | p99 |");
    println!("|---:|---:|---:|---:|---:|");
    for runners in runner_sizes {
        let rounds: Vec<Round> = (0..ROUNDS)
            .map(|_| rt.block_on(measure(&engine, runners, clients)))
            .collect();
        let mut cpu: Vec<Duration> = rounds.iter().map(|r| r.cpu_per_cycle).collect();
        let mut p50: Vec<Duration> = rounds.iter().map(|r| quantile(&r.answers, 0.5)).collect();
        let mut p99: Vec<Duration> = rounds.iter().map(|r| quantile(&r.answers, 0.99)).collect();
        println!(
            "| {runners} | {} | {:.0} µs | {:.2} ms | {:.2} ms |",
            rate_with_range(CYCLES, rounds.iter().map(|r| r.elapsed)),
            median(&mut cpu).as_secs_f64() * 1e6,
            median(&mut p50).as_secs_f64() * 1e3,
            median(&mut p99).as_secs_f64() * 1e3,
        );
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Starts a server with `runners` on a fresh store and has `clients` run [`CYCLES`] cycles.
async fn measure(engine: &Arc<Engine>, runners: usize, clients: usize) -> Round {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin_dir = dir.path().join("plugins");
    std::fs::create_dir(&plugin_dir).expect("plugin folder");
    let store = Arc::new(SqliteStore::open(dir.path().join("jobs.db")).expect("store opens"));
    let plugins = Arc::new(PluginHost::new(
        Runtime::new(RuntimeConfig::default()).expect("runtime starts"),
        plugin_dir,
        dir.path().join("versions"),
        Policy::default(),
    ));
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let settings = ServeSettings {
        listen,
        auth: Auth::new(Vec::new(), listen).expect("open on loopback"),
        worker: WorkerConfig {
            runners,
            name: "bench".into(),
            ..WorkerConfig::default()
        },
        debounce: Duration::from_millis(10),
        max_upload_bytes: 1 << 20,
        retain_finished: None,
        max_event_streams: maestro::serve::DEFAULT_EVENT_STREAMS,
        public_url: None,
    };
    let server = maestro::serve::start(
        store.clone() as Arc<dyn JobStore>,
        engine.clone(),
        plugins,
        Arc::new(Notify::new()),
        settings,
    )
    .await
    .expect("server starts");
    let base = format!("http://{}/v1", server.addr);
    let http = reqwest::Client::new();
    // One cycle first, so connections and caches are warm before the clock starts.
    cycle(&http, &base).await;

    let remaining = Arc::new(AtomicUsize::new(CYCLES));
    let cpu_before = cpu_time();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, base, remaining) = (http.clone(), base.clone(), remaining.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                while remaining
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok()
                {
                    answers.push(cycle(&http, &base).await);
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(CYCLES);
    for task in tasks {
        answers.extend(task.await.expect("a client"));
    }
    let elapsed = started.elapsed();
    let cpu = cpu_time() - cpu_before;
    server.stop(Duration::from_millis(100)).await;
    answers.sort();
    Round {
        elapsed,
        cpu_per_cycle: cpu / CYCLES as u32,
        answers,
    }
}

/// Starts a job, answers its question once it parks and follows it to its end; returns the
/// answer request's round trip.
async fn cycle(http: &reqwest::Client, base: &str) -> Duration {
    let started: Value = http
        .post(format!("{base}/jobs"))
        .json(&json!({ "piece": "chat", "input": "hello" }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("POST /v1/jobs")
        .json()
        .await
        .expect("a job");
    let id = started["id"].as_str().expect("the job's id").to_owned();
    let mut events = http
        .get(format!("{base}/jobs/{id}/events"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("GET /v1/jobs/{id}/events")
        .bytes_stream()
        .eventsource();
    let mut answered = None;
    while let Some(event) = events.next().await {
        let event = event.expect("an event");
        match event.event.as_str() {
            "parked" if answered.is_none() => {
                let sent = Instant::now();
                http.post(format!("{base}/jobs/{id}/answer"))
                    .json(&json!({ "text": "Oslo" }))
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .expect("POST /v1/jobs/{id}/answer");
                answered = Some(sent.elapsed());
            }
            "end" => {
                let end: Value = serde_json::from_str(&event.data).expect("end data");
                assert_eq!(end["status"], "completed", "job {id}");
                return answered.expect("the job parked before it ended");
            }
            "error" => panic!("job {id}: {}", event.data),
            _ => {}
        }
    }
    panic!("the event stream of {id} closed before the job ended")
}
