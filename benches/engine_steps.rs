//! The engine's own cost per agent-loop step (`cargo bench -p maestro-benches --bench
//! engine_steps`): a job of one movement whose scripted model calls `echo` (the Rust test
//! plugin, on a fresh instance per call) a number of times, then `complete`; run by
//! `Engine::run` with no store. A step is a model turn, a tool call and its answer in the
//! conversation. Jobs of 5, 20 and 80 steps show whether a step costs more as the conversation
//! grows.
//!
//! The same run measures the bare `Plugin::invoke` of the same `echo` call, and reports the
//! engine's share: a step's time minus one call, and its allocations minus those of one call
//! (counted by this binary's global allocator). Medians over rounds; the range follows.

use std::alloc::{GlobalAlloc, Layout};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use maestro::engine::{CancelFlag, Engine, EngineLimits, JobStatus, NoObserver, ToolCatalog};
use maestro::llm::ScriptedModel;
use maestro::piece::parse_piece;
use maestro::plugin::{CallRequest, Outcome, PluginPolicy, Runtime, RuntimeConfig};
use maestro_benches::{MiMalloc, median};

/// mimalloc, as in the `maestro` binary, counting allocations (not frees): what a step asks of
/// the allocator.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Echo calls per job, one size per row.
const SIZES: [usize; 3] = [5, 20, 80];
/// Steps per round, whatever the size.
const STEPS_PER_ROUND: usize = 4_000;
const ROUNDS: usize = 7;

const PIECE: &str = "name: steps\ninitial_movement: work\nmax_movements: 1\nmovements:\n  - name: work\n    instructions: Echo, then complete.\n    tools: [echo, complete]\n";

fn script(steps: usize) -> String {
    let mut script = String::from("turns:\n");
    for step in 0..steps {
        script.push_str(&format!(
            "  - tool_calls: [{{ name: echo, arguments: {{ text: \"step {step}\" }} }}]\n"
        ));
    }
    script.push_str(
        "  - tool_calls: [{ name: complete, arguments: { status: done, summary: \"done\" } }]\n",
    );
    script
}

/// Time and allocations of `body`, per `per` units.
fn measure(per: usize, body: impl FnOnce()) -> (Duration, f64) {
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    let started = Instant::now();
    body();
    let elapsed = started.elapsed();
    let allocated = ALLOCATIONS.load(Ordering::Relaxed) - allocations;
    (elapsed / per as u32, allocated as f64 / per as f64)
}

/// Medians and ranges of one size's rounds.
struct Row {
    steps: usize,
    step: Duration,
    step_range: (Duration, Duration),
    step_allocations: f64,
    call: Duration,
    call_allocations: f64,
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let load = |path: &str| {
        Arc::new(
            rt.block_on(runtime.load_file(Path::new(path), PluginPolicy::default()))
                .unwrap(),
        )
    };
    let echo = load(maestro_plugins::ECHO);
    let catalog =
        Arc::new(ToolCatalog::new([echo.clone(), load(maestro_plugins::COMPLETE)]).unwrap());
    let request = CallRequest::new("echo", serde_json::json!({ "text": "step 0" }));
    let calls = |count: usize| {
        for _ in 0..count {
            let outcome = rt.block_on(echo.invoke(request.clone())).unwrap();
            assert!(matches!(outcome, Outcome::Output(_)));
        }
    };

    let mut rows = Vec::new();
    for steps in SIZES {
        let model = ScriptedModel::parse(&script(steps), "engine-steps.yaml").unwrap();
        // Room for every turn; the call that reaches `max_burst` would wait for a human.
        let limits = EngineLimits {
            max_iterations: steps as u32 + 2,
            max_burst: steps as u32 + 2,
            ..EngineLimits::default()
        };
        let piece = parse_piece(PIECE, "engine-steps.yaml").unwrap();
        let engine = Engine::new(Arc::new(model), catalog.clone(), [piece], limits).unwrap();
        let cancel = CancelFlag::default();
        let mut next_id = 0u64;
        let mut run_jobs = |count: usize| {
            for _ in 0..count {
                next_id += 1;
                let mut job = engine
                    .new_job(format!("job-{next_id}"), Some("steps"), "go".into())
                    .unwrap();
                rt.block_on(engine.run(&mut job, None, &NoObserver, &cancel))
                    .unwrap();
                assert_eq!(job.status, JobStatus::Completed);
            }
        };
        // A job also makes the `complete` call: steps + 1 steps.
        let jobs = STEPS_PER_ROUND / (steps + 1);
        let per_round = jobs * (steps + 1);
        run_jobs(jobs / 4);
        calls(per_round / 4);
        let (mut step_times, mut call_times) = (Vec::new(), Vec::new());
        let (mut step_allocations, mut call_allocations) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (time, allocations) = measure(per_round, || run_jobs(jobs));
            step_times.push(time);
            step_allocations.push(allocations);
            let (time, allocations) = measure(per_round, || calls(per_round));
            call_times.push(time);
            call_allocations.push(allocations);
        }
        step_allocations.sort_by(f64::total_cmp);
        call_allocations.sort_by(f64::total_cmp);
        let step = median(&mut step_times);
        rows.push(Row {
            steps,
            step,
            step_range: (step_times[0], step_times[ROUNDS - 1]),
            step_allocations: step_allocations[ROUNDS / 2],
            call: median(&mut call_times),
            call_allocations: call_allocations[ROUNDS / 2],
        });
    }

    println!(
        "agent-loop steps: jobs of N echo calls and complete, {STEPS_PER_ROUND} steps per round, \
         {ROUNDS} rounds (medians; range)"
    );
    println!(
        "| steps per job | per step | one echo call | engine's share | engine's allocations per step |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {:.1} µs ({:.1}–{:.1}) | {:.1} µs | {:.1} µs | {:.0} |",
            row.steps,
            micros(row.step),
            micros(row.step_range.0),
            micros(row.step_range.1),
            micros(row.call),
            micros(row.step.saturating_sub(row.call)),
            row.step_allocations - row.call_allocations,
        );
    }
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
