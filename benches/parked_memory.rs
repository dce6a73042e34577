//! What parked jobs cost a worker (`cargo bench -p maestro-benches --bench parked_memory`):
//! parks 100,000 jobs in a store, then runs a worker over that store, and prints the worker's
//! resident memory after 10,000 and after 100,000 parked jobs, and what the store file holds.
//! A parked job is a row: what the worker's memory grows by is SQLite's page caches (the
//! store's writer and reader connections, 2 and 16 MiB at most), not the number of parked jobs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use maestro::engine::{CancelFlag, JobStatus};
use maestro::store::{JobStore, SqliteStore};
use maestro::worker::{Worker, WorkerConfig};

maestro_benches::allocate_like_maestro!();

const JOBS: usize = 100_000;
const SCRIPT: &str = "turns:\n  - tool_calls: [{ name: complete, arguments: { status: needs_user_input, question: \"Which city?\" } }]\n";

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names another bench skips this one.
    if std::env::args()
        .skip(1)
        .any(|arg| !arg.starts_with('-') && !"parked_memory".contains(&arg))
    {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (engine, _cache) = maestro_benches::chat_engine(&rt, SCRIPT);
    let engine = Arc::new(engine);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("jobs.db")).unwrap());

    let idle = resident_kib();
    let worker = Arc::new(Worker::new(
        store.clone(),
        engine.clone(),
        WorkerConfig {
            runners: 2,
            idle_poll: Duration::from_millis(5),
            ..WorkerConfig::default()
        },
        Arc::new(tokio::sync::Notify::new()),
    ));
    // Park the jobs through a real worker, in two rounds: if parked jobs cost the worker
    // memory, resident memory grows tenfold from the first round to the second.
    let mut created = Duration::ZERO;
    let mut parked_in = Duration::ZERO;
    let mut runs = 0;
    let mut after_first = 0;
    for (from, to) in [(0, JOBS / 10), (JOBS / 10, JOBS)] {
        let started = Instant::now();
        for n in from..to {
            let job = engine
                .new_job(format!("job-{n:08}"), Some("chat"), "hello".into())
                .unwrap();
            store.create(&job).unwrap();
        }
        created += started.elapsed();
        let parking = Instant::now();
        runs = rt.block_on(worker.run(CancelFlag::default(), true)).runs;
        parked_in += parking.elapsed();
        if from == 0 {
            after_first = resident_kib();
        }
    }
    let stats = worker.stats();
    assert_eq!(stats.runs, runs);
    let after = resident_kib();
    // A worker over the full store, idle: what it holds while 100,000 jobs wait.
    let idle_worker = Arc::new(Worker::new(
        store.clone(),
        engine.clone(),
        WorkerConfig::default(),
        Arc::new(tokio::sync::Notify::new()),
    ));
    let stop = CancelFlag::default();
    let stopper = stop.clone();
    rt.spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stopper.cancel();
    });
    rt.block_on(idle_worker.run(stop, false));
    let idle_after = resident_kib();

    // Checked after the memory: listing 100,000 rows would itself raise resident memory.
    let waiting = store
        .list(Some(JobStatus::WaitingHuman), JOBS + 1)
        .unwrap()
        .len();
    assert_eq!(waiting, JOBS);
    // Closing the store copies the WAL into the database file and removes it.
    drop((worker, idle_worker, store));
    let file = std::fs::metadata(dir.path().join("jobs.db")).map_or(0, |m| m.len());
    println!(
        "parked_memory: {JOBS} jobs created in {created:.2?}, parked by 2 runners in {parked_in:.2?} ({} runs, {:.0} jobs/s)",
        stats.runs,
        JOBS as f64 / parked_in.as_secs_f64()
    );
    println!(
        "parked_memory: resident before {} MiB, with {} parked {} MiB, with {JOBS} parked {} MiB, idle worker over the full store {} MiB",
        idle / 1024,
        JOBS / 10,
        after_first / 1024,
        after / 1024,
        idle_after / 1024
    );
    println!(
        "parked_memory: the store file holds them in {} MiB ({} bytes per parked job)",
        file / (1 << 20),
        file / JOBS as u64
    );
}
