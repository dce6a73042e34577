//! Benchmarks of maestro: the plugin runtime beside bare wasmtime (`runtime.rs`,
//! `bare_wasmtime.rs`), tool loads by language (`example_load.rs`), hot loading
//! (`hot_load.rs`), the engine's own cost per agent-loop step (`engine_steps.rs`), jobs through
//! the store (`jobs.rs`), park → resume throughput of a worker (`cycle_throughput.rs`) and of
//! nodes on PostgreSQL (`cluster_throughput.rs`), the memory of parked jobs
//! (`parked_memory.rs`), cycles through the HTTP API (`api_cycles.rs`), what metrics and
//! traces cost (`telemetry_overhead.rs`) and what maestro adds to an MCP tool call over stdio
//! (`mcp_stdio.rs`). Run them with `cargo bench -p maestro-benches`.
//!
//! This library holds the set-up and the measurements the job benchmarks share. Each bench
//! allocates through mimalloc, as the `maestro` binary does ([`allocate_like_maestro!`]).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro::engine::{
    CancelFlag, Engine, EngineLimits, JobEvent, JobStatus, Observer, ToolCatalog,
};
use maestro::llm::ScriptedModel;
use maestro::piece::parse_piece;
use maestro::plugin::Resume;
use maestro::plugin::{PluginPolicy, Runtime, RuntimeConfig};
use maestro::store::{JobStore, SqliteStore};
use maestro::worker::{Worker, WorkerConfig};
use tokio::sync::Notify;

pub use mimalloc::MiMalloc;

/// Makes the calling bench binary allocate through mimalloc, as the `maestro` binary does (the
/// library itself sets no global allocator).
#[macro_export]
macro_rules! allocate_like_maestro {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::MiMalloc = $crate::MiMalloc;
    };
}

/// A one-movement piece whose only tool is `complete`.
const CHAT_PIECE: &str = "name: chat\ninitial_movement: chat\nmax_movements: 1\nmovements:\n  - name: chat\n    instructions: Ask, then finish.\n    tools: [complete]\n";

/// A model script for the piece `chat`: ask a question (the job parks), then finish.
pub const ASK_THEN_FINISH: &str = r#"
turns:
  - tool_calls: [{ name: complete, arguments: { status: needs_user_input, question: "Which city?" } }]
  - tool_calls: [{ name: complete, arguments: { status: done, summary: "done" } }]
"#;

/// An engine running the piece `chat` on the real `complete` component, with a scripted model
/// playing `script`. The returned folder holds the compiled-component cache; keep it alive.
pub fn chat_engine(rt: &tokio::runtime::Runtime, script: &str) -> (Engine, tempfile::TempDir) {
    let cache = tempfile::tempdir().expect("temp dir");
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let complete = rt
        .block_on(runtime.load_file(
            Path::new(maestro_plugins::COMPLETE),
            PluginPolicy::default(),
        ))
        .expect("complete loads");
    let catalog = Arc::new(ToolCatalog::new([Arc::new(complete)]).expect("one plugin"));
    let model = Arc::new(ScriptedModel::parse(script, "bench-script.yaml").expect("script parses"));
    let piece = parse_piece(CHAT_PIECE, "bench-piece.yaml").expect("piece parses");
    let engine =
        Engine::new(model, catalog, [piece], EngineLimits::default()).expect("piece lints");
    (engine, cache)
}

/// A tokio runtime on every core and [`chat_engine`] playing [`ASK_THEN_FINISH`] on it, shared
/// by the rounds of a throughput bench. Keep the folder alive.
pub fn threaded_chat_engine() -> (tokio::runtime::Runtime, Arc<Engine>, tempfile::TempDir) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (engine, cache) = chat_engine(&rt, ASK_THEN_FINISH);
    (rt, Arc::new(engine), cache)
}

/// Operations per second over rounds of `count` each: the median, with the rounds' range
/// (`1613 (1457–1632)`).
pub fn rate_with_range(count: usize, elapsed: impl IntoIterator<Item = Duration>) -> String {
    let mut rates: Vec<f64> = elapsed
        .into_iter()
        .map(|elapsed| count as f64 / elapsed.as_secs_f64())
        .collect();
    rates.sort_by(f64::total_cmp);
    format!(
        "{:.0} ({:.0}–{:.0})",
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1]
    )
}

/// The middle sample (sorts them).
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// `4 KB`, `18.2 MB`.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.0} KB", b as f64 / (1 << 10) as f64),
        b => format!("{b} B"),
    }
}

/// `0.26 ms`, `63 ms`, `7.2 s`.
pub fn human_time(duration: Duration) -> String {
    let ms = duration.as_secs_f64() * 1000.0;
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

/// Processor time this process has used so far, from `/proc/self/stat` (in clock ticks of
/// 10 ms: a round uses thousands).
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    stat_cpu_time(&stat)
}

/// User plus system time from a `/proc/…/stat` line.
pub fn stat_cpu_time(stat: &str) -> Duration {
    let fields = stat_fields(stat);
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// The fields of a `/proc/…/stat` line after the command name, which is in parentheses and may
/// hold spaces: the process's state first, its utime, stime, cutime and cstime at 11 to 14.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat[stat.rfind(')').expect("stat") + 2..]
        .split(' ')
        .collect()
}

/// What else the machine did while a bench ran: the share of all processors' time that went
/// neither to this process (with the children it waited for) nor to idling, and the share the
/// hypervisor took from the machine (steal). A latency bench prints it, so that a run on a busy
/// machine is told from a slower build: a busy neighbour slows maestro's calls more than the
/// near-zero server's.
pub struct MachineLoad {
    start: LoadSample,
}

#[derive(Clone, Copy)]
struct LoadSample {
    /// Clock ticks of all processors: not idle, taken by the hypervisor, and in all.
    busy: u64,
    steal: u64,
    total: u64,
    /// Clock ticks of this process and of its children it waited for.
    own: u64,
}

impl LoadSample {
    fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
        let own = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        Self::read(&stat, &own)
    }

    fn read(stat: &str, own: &str) -> Self {
        // `cpu  user nice system idle iowait irq softirq steal guest guest_nice`: guest time is
        // already in user.
        let cpu: Vec<u64> = stat
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("cpu "))
            .expect("the first line of /proc/stat sums the processors")
            .split_whitespace()
            .take(8)
            .map(|ticks| ticks.parse().expect("clock ticks"))
            .collect();
        let [user, nice, system, idle, iowait, irq, softirq, steal] = cpu[..] else {
            panic!("/proc/stat: fewer than 8 fields on its cpu line");
        };
        let fields: Vec<u64> = stat_fields(own)[11..15]
            .iter()
            .map(|ticks| ticks.parse().expect("clock ticks"))
            .collect();
        Self {
            busy: user + nice + system + irq + softirq,
            steal,
            total: user + nice + system + idle + iowait + irq + softirq + steal,
            own: fields.iter().sum(),
        }
    }
}

impl MachineLoad {
    pub fn start() -> Self {
        Self {
            start: LoadSample::now(),
        }
    }

    /// The shares of the processors' time since [`Self::start`] that went to others and to
    /// the hypervisor, as fractions (the children must have been waited for).
    pub fn shares(&self) -> (f64, f64) {
        Self::shares_between(self.start, LoadSample::now())
    }

    fn shares_between(start: LoadSample, end: LoadSample) -> (f64, f64) {
        let total = end.total.saturating_sub(start.total).max(1) as f64;
        let busy = end.busy.saturating_sub(start.busy);
        let own = end.own.saturating_sub(start.own);
        let steal = end.steal.saturating_sub(start.steal);
        (
            busy.saturating_sub(own) as f64 / total,
            steal as f64 / total,
        )
    }

    /// One sentence on the shares since [`Self::start`], with a warning past 5%.
    pub fn report(&self) -> String {
        let (others, steal) = self.shares();
        let mut said = format!(
            "Beside the bench, the machine spent {:.1}% of its processors' time on other work \
             and lost {:.1}% to the hypervisor.",
            others * 100.0,
            steal * 100.0
        );
        if others + steal > 0.05 {
            said.push_str(
                " Warning: the machine was not idle; these figures are not comparable with an \
                 idle run's.",
            );
        }
        said
    }
}

/// The sizes to measure: comma-separated numbers in the environment variable `variable`
/// (`4,16`), or `default`.
pub fn sizes_from_env(variable: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(variable) {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{variable}: numbers, like 4,16"))
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

/// The observer of a park → resume cycle bench: hands each parked job to the answerers and
/// stops the workers once `jobs` jobs have completed.
pub struct Cycles {
    /// Taken away after the run, which ends the answerers.
    pub parked: Mutex<Option<Sender<String>>>,
    completed: AtomicUsize,
    jobs: usize,
    stop: CancelFlag,
}

impl Cycles {
    pub fn new(jobs: usize, parked: Sender<String>, stop: CancelFlag) -> Self {
        Self {
            parked: Mutex::new(Some(parked)),
            completed: AtomicUsize::new(0),
            jobs,
            stop,
        }
    }
}

impl Observer for Cycles {
    fn on_event(&self, _job_id: &str, _event: &JobEvent) {}

    fn on_saved(&self, job_id: &str, status: JobStatus) {
        match status {
            JobStatus::WaitingHuman => {
                if let Some(parked) = &*self.parked.lock().unwrap() {
                    parked.send(job_id.to_owned()).expect("answerers");
                }
            }
            JobStatus::Completed => {
                if self.completed.fetch_add(1, Ordering::SeqCst) + 1 == self.jobs {
                    self.stop.cancel();
                }
            }
            other => panic!("job {job_id} saved as {other}"),
        }
    }
}

/// Answers parked jobs (as the API or `maestro jobs answer` would) until the workers are gone.
pub fn answer_parked(store: &dyn JobStore, to_answer: &Mutex<Receiver<String>>, wake: &Notify) {
    loop {
        let next = to_answer.lock().unwrap().recv();
        let Ok(id) = next else { return };
        store
            .answer(&id, &Resume::Answered("Oslo".into()).into(), None)
            .unwrap();
        wake.notify_one();
    }
}

/// One round of a park → resume cycle bench: `jobs` new chat jobs in a fresh SQLite store, a
/// worker of `runners` and the answerers that answer each job once it parked.
pub struct CycleRound {
    pub store: Arc<SqliteStore>,
    worker: Arc<Worker>,
    cycles: Arc<Cycles>,
    stop: CancelFlag,
    answerers: Vec<std::thread::JoinHandle<()>>,
    jobs: usize,
    _dir: tempfile::TempDir,
}

/// Answers recorded at once, like that many API clients or shells answering.
pub const ANSWERERS: usize = 4;

impl CycleRound {
    /// Creates the jobs (set-up, outside any timed span) and the worker that will run them.
    pub fn new(engine: &Arc<Engine>, runners: usize, jobs: usize) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(SqliteStore::open(dir.path().join("jobs.db")).expect("store opens"));
        for n in 0..jobs {
            let job = engine
                .new_job(format!("job-{n:06}"), Some("chat"), "hello".into())
                .unwrap();
            store.create(&job).unwrap();
        }
        let (parked, to_answer) = std::sync::mpsc::channel();
        let stop = CancelFlag::default();
        let cycles = Arc::new(Cycles::new(jobs, parked, stop.clone()));
        let wake = Arc::new(Notify::new());
        let worker = Arc::new(
            Worker::new(
                store.clone(),
                engine.clone(),
                WorkerConfig {
                    runners,
                    idle_poll: Duration::from_millis(5),
                    name: "bench".into(),
                    ..WorkerConfig::default()
                },
                wake.clone(),
            )
            .with_observer(cycles.clone()),
        );
        let to_answer = Arc::new(Mutex::new(to_answer));
        let answerers = (0..ANSWERERS)
            .map(|_| {
                let (store, to_answer, wake) = (store.clone(), to_answer.clone(), wake.clone());
                std::thread::spawn(move || answer_parked(&*store, &to_answer, &wake))
            })
            .collect();
        Self {
            store,
            worker,
            cycles,
            stop,
            answerers,
            jobs,
            _dir: dir,
        }
    }

    /// Runs every job through its cycle: the span to time.
    pub fn run(&self, rt: &tokio::runtime::Runtime) {
        rt.block_on(self.worker.run(self.stop.clone(), false));
    }

    /// Ends the answerers, checks that every job completed, and closes the store.
    pub fn finish(self) {
        drop(self.worker);
        drop(self.cycles.parked.lock().unwrap().take());
        for answerer in self.answerers {
            answerer.join().expect("answerer");
        }
        let completed = self
            .store
            .list(Some(JobStatus::Completed), self.jobs + 1)
            .unwrap();
        assert_eq!(completed.len(), self.jobs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_load_is_the_busy_time_neither_this_process_nor_its_children_took() {
        let sample = |user: u64, idle: u64, steal: u64, own: u64| {
            let stat =
                format!("cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n");
            // utime, stime, cutime and cstime split `own` between them.
            let own = format!(
                "42 (a (bench)) S 1 1 1 0 -1 0 0 0 0 0 {} {} {} {} 20 0 1 0",
                own / 4,
                own / 4,
                own / 4,
                own - 3 * (own / 4)
            );
            LoadSample::read(&stat, &own)
        };
        let (others, steal) =
            MachineLoad::shares_between(sample(100, 100, 0, 10), sample(300, 250, 50, 110));
        assert_eq!((others, steal), (0.25, 0.125));
        // All of it the bench's own: nobody else.
        let (others, _) =
            MachineLoad::shares_between(sample(100, 100, 0, 10), sample(300, 300, 0, 210));
        assert_eq!(others, 0.0);
    }
}
