//! Park → resume cycles per second through a real worker on one embedded SQLite store.
//!
//! Each job of a batch is one cycle: a runner claims it, runs it until `complete` parks on a
//! question (the real component) and saves it with its events; an answerer thread records the
//! answer as soon as the job is durable (what `POST /v1/jobs/{id}/answer` or `maestro jobs
//! answer` does); a runner claims it again, re-invokes the parked call, lets the model take its
//! turn, runs it to the end and saves it. Creating the jobs is set-up, outside the timed span;
//! the span ends when the last job has been saved as completed.
//!
//! The worker's runners share the store's one writer, which commits whatever changes are queued
//! in one transaction, so throughput grows with the runners in flight. Also measured: the
//! processor time of the whole process per cycle (two cores' worth is the ceiling here), the share
//! of it spent by the store's writer thread (one core's worth is its ceiling: every change passes
//! through it), and the bytes written per cycle (WAL frames and checkpoints, the last one when
//! the store closes after the round), all from `/proc/self`.
//!
//! `cargo bench -p maestro-benches --bench cycle_throughput`; `CYCLE_RUNNERS=16` measures one
//! worker size only (for a profiler); `CYCLE_THREADS=1` also prints each round's processor time
//! per cycle by thread name.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use maestro::engine::Engine;
use maestro_benches::{CycleRound, cpu_time, median, rate_with_range, stat_cpu_time};

maestro_benches::allocate_like_maestro!();

const JOBS: usize = 10_000;
/// Each worker size is measured this many times, on a fresh store each time.
const ROUNDS: usize = 3;

/// One measured batch of cycles.
struct Round {
    elapsed: Duration,
    /// Processor time of the whole process (every thread, user and system) per cycle.
    cpu_per_cycle: Duration,
    /// The part of `cpu_per_cycle` spent on the store's writer thread.
    writer_per_cycle: Duration,
    written_per_cycle: u64,
}

/// The store's writer thread, as `/proc` names it (15 bytes at most).
const WRITER_THREAD: &str = "maestro-store-w";

fn main() {
    let (rt, engine, _cache) = maestro_benches::threaded_chat_engine();
    let sizes = maestro_benches::sizes_from_env("CYCLE_RUNNERS", &[1, 4, 16, 64]);
    println!("{JOBS} cycles per round, {ROUNDS} rounds per size: medians, with the rounds' range");
    println!(
        "| runners | cycles/s | per cycle | processor time per cycle | of which the store's writer \
         | written per cycle |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for runners in sizes {
        let rounds: Vec<Round> = (0..ROUNDS)
            .map(|_| measure(&rt, &engine, runners))
            .collect();
        let mut per_cycle: Vec<Duration> = rounds.iter().map(|r| r.elapsed / JOBS as u32).collect();
        let mut cpu: Vec<Duration> = rounds.iter().map(|r| r.cpu_per_cycle).collect();
        let mut writer: Vec<Duration> = rounds.iter().map(|r| r.writer_per_cycle).collect();
        let mut written: Vec<u64> = rounds.iter().map(|r| r.written_per_cycle).collect();
        written.sort();
        println!(
            "| {runners} | {} | {:.0} µs | {:.0} µs | {:.0} µs | {:.1} KB |",
            rate_with_range(JOBS, rounds.iter().map(|r| r.elapsed)),
            median(&mut per_cycle).as_secs_f64() * 1e6,
            median(&mut cpu).as_secs_f64() * 1e6,
            median(&mut writer).as_secs_f64() * 1e6,
            written[ROUNDS / 2] as f64 / 1024.0,
        );
    }
}

/// Creates `JOBS` jobs, then runs a worker of `runners` until each has parked, been answered
/// and completed.
fn measure(rt: &tokio::runtime::Runtime, engine: &Arc<Engine>, runners: usize) -> Round {
    let round = CycleRound::new(engine, runners, JOBS);
    let written_before = bytes_written();
    let threads_before = cpu_by_thread();
    let cpu_before = cpu_time();
    let started = Instant::now();
    round.run(rt);
    let elapsed = started.elapsed();
    let cpu = cpu_time() - cpu_before;
    // Threads of this round only: the store's threads start and end with it.
    let mut by_name = BTreeMap::<String, Duration>::new();
    for (tid, (name, used)) in cpu_by_thread() {
        let before = threads_before
            .get(&tid)
            .map_or(Duration::ZERO, |(_, used)| *used);
        *by_name.entry(name).or_default() += used - before;
    }
    if std::env::var_os("CYCLE_THREADS").is_some() {
        let shares: Vec<String> = by_name
            .iter()
            .map(|(name, used)| {
                format!("{name} {:.0} µs", (*used / JOBS as u32).as_secs_f64() * 1e6)
            })
            .collect();
        eprintln!(
            "{runners} runners, processor time per cycle: {}",
            shares.join(", ")
        );
    }
    // What the round left in the write-ahead log is copied into the database file when the
    // store closes, at the end of `finish`: those copies are the round's too.
    round.finish();
    let written = bytes_written() - written_before;
    Round {
        elapsed,
        cpu_per_cycle: cpu / JOBS as u32,
        writer_per_cycle: by_name.get(WRITER_THREAD).copied().unwrap_or_default() / JOBS as u32,
        written_per_cycle: written / JOBS as u64,
    }
}

/// Processor time used so far by each live thread of this process, by thread id, with the
/// thread's name.
fn cpu_by_thread() -> HashMap<String, (String, Duration)> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(|task| {
            let task = task.ok()?;
            // A thread that ended meanwhile has no stat to read.
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let name = &stat[stat.find('(')? + 1..stat.rfind(')')?];
            let id = task.file_name().to_string_lossy().into_owned();
            Some((id, (name.to_owned(), stat_cpu_time(&stat))))
        })
        .collect()
}

/// Bytes this process has written so far (to the WAL and, by checkpoints, to the database).
fn bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))
        .and_then(|bytes| bytes.trim().parse().ok())
        .expect("wchar in /proc/self/io")
}
