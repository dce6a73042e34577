//! Park → resume cycles per second through one embedded SQLite store, with 1 and 2 runners
//! working side by side (what `maestro work --runners N` does): each cycle runs a claimed job
//! until `complete` parks on a question (the real component), saves it with its events, records
//! the answer, claims the job again, resumes it (the parked call is re-invoked, the model takes its
//! turn), runs it to the end and saves it with its events. Creating and first claiming the jobs is
//! set-up, outside the timed span.
//!
//! `cargo bench -p maestro-benches --bench cycle_throughput`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use maestro::engine::{CancelFlag, Engine, JobEvent, JobStatus, Observer};
use maestro::plugin::Resume;
use maestro::store::{ClaimedJob, JobStore, SqliteStore};

const SCRIPT: &str = r#"
turns:
  - tool_calls: [{ name: complete, arguments: { status: needs_user_input, question: "Which city?" } }]
  - tool_calls: [{ name: complete, arguments: { status: done, summary: "done" } }]
"#;

const CYCLES_PER_RUNNER: usize = 4_000;

/// The events of the run in progress, saved with the job as a runner does.
#[derive(Default)]
struct Events(Mutex<Vec<JobEvent>>);

impl Events {
    fn take(&self) -> Vec<JobEvent> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl Observer for Events {
    fn on_event(&self, _job_id: &str, event: &JobEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (engine, _cache) = maestro_benches::chat_engine(&rt, SCRIPT);
    let engine = Arc::new(engine);
    println!("| runners | cycles | cycles/s | per cycle, per runner | of which in the store |");
    println!("|---:|---:|---:|---:|---:|");
    for runners in [1, 2] {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(SqliteStore::open(dir.path().join("jobs.db")).expect("store opens"));
        // Creating and first claiming each job is set-up; the cycles are the timed work.
        let batches: Vec<(String, Vec<ClaimedJob>)> = (0..runners)
            .map(|runner| {
                let owner = format!("r{runner}");
                let claimed = (0..CYCLES_PER_RUNNER)
                    .map(|n| {
                        let id = format!("job-{runner}-{n:06}");
                        let job = engine.new_job(id.clone(), "chat", "hello".into()).unwrap();
                        store.create(&job).unwrap();
                        store.claim(&id, &owner, 600_000).unwrap().unwrap()
                    })
                    .collect();
                (owner, claimed)
            })
            .collect();
        let started = Instant::now();
        let threads: Vec<_> = batches
            .into_iter()
            .map(|(owner, claimed)| {
                let (engine, store) = (engine.clone(), store.clone());
                std::thread::spawn(move || run_cycles(&engine, &*store, &owner, claimed))
            })
            .collect();
        let in_store: Duration = threads
            .into_iter()
            .map(|thread| thread.join().expect("runner"))
            .sum();
        let elapsed = started.elapsed();
        let cycles = runners * CYCLES_PER_RUNNER;
        println!(
            "| {runners} | {cycles} | {:.0} | {:.0} µs | {:.0} µs |",
            cycles as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 * runners as f64 / cycles as f64,
            in_store.as_secs_f64() * 1e6 / cycles as f64
        );
    }
}

/// Runs the cycles; returns the time spent in the store.
fn run_cycles(
    engine: &Engine,
    store: &dyn JobStore,
    owner: &str,
    claimed: Vec<ClaimedJob>,
) -> Duration {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cancel = CancelFlag::default();
    let events = Events::default();
    let mut in_store = Duration::ZERO;
    let mut timed = |work: &mut dyn FnMut()| {
        let started = Instant::now();
        work();
        in_store += started.elapsed();
    };
    for mut job in claimed {
        rt.block_on(engine.run(&mut job.state, None, &events, &cancel))
            .unwrap();
        assert_eq!(job.state.status, JobStatus::WaitingHuman);
        let id = job.state.id.clone();
        let mut resumed = None;
        timed(&mut || {
            store.save(&job.state, &events.take(), owner).unwrap();
            store
                .answer(&id, &Resume::Answered("Oslo".into()), None)
                .unwrap();
            resumed = store.claim(&id, owner, 60_000).unwrap();
        });
        let mut resumed = resumed.unwrap();
        rt.block_on(engine.run(&mut resumed.state, resumed.resume, &events, &cancel))
            .unwrap();
        assert_eq!(resumed.state.status, JobStatus::Completed);
        timed(&mut || store.save(&resumed.state, &events.take(), owner).unwrap());
    }
    in_store
}
