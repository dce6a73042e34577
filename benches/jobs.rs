//! Job benchmarks (`cargo bench -p maestro-benches --bench jobs`), on the embedded SQLite store
//! in a temp file:
//!
//! - `jobs/park_resume_cycle`: a claimed job through one park → resume cycle as a worker does
//!   it: run until `complete` parks on a question (the real component), save; record the answer;
//!   claim, resume (the parked call is re-invoked, the model takes its turn), run to the end,
//!   save. Cycles per second is 1 / this time. Creating and first claiming the job are set-up,
//!   outside the measured span.
//! - `jobs/resume_to_running`: from recording an answer to the job being claimed again with that
//!   answer in hand (what an idle runner does when woken), on a store of parked jobs.
//!
//! The memory cost of parked jobs is measured by the `parked_memory` bench.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use maestro::engine::{CancelFlag, JobStatus, NoObserver};
use maestro::plugin::Resume;
use maestro::store::{JobStore, SqliteStore};

maestro_benches::allocate_like_maestro!();

fn jobs(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (engine, _cache) = maestro_benches::chat_engine(&rt, maestro_benches::ASK_THEN_FINISH);
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("jobs.db")).unwrap();
    let cancel = CancelFlag::default();
    let mut next_id = 0u64;
    let mut new_id = move || {
        next_id += 1;
        format!("job-{next_id:012}")
    };

    let mut group = c.benchmark_group("jobs");
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("park_resume_cycle", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let id = new_id();
                let job = engine
                    .new_job(id.clone(), Some("chat"), "hello".into())
                    .unwrap();
                store.create(&job).unwrap();
                let mut claimed = store.claim(&id, "bench", 60_000).unwrap().unwrap();
                let started = std::time::Instant::now();
                rt.block_on(engine.run(&mut claimed.state, None, &NoObserver, &cancel))
                    .unwrap();
                assert_eq!(claimed.state.status, JobStatus::WaitingHuman);
                store.save(&claimed.state, &[], "bench").unwrap();
                store
                    .answer(&id, &Resume::Answered("Oslo".into()).into(), None)
                    .unwrap();
                let mut resumed = store.claim(&id, "bench", 60_000).unwrap().unwrap();
                rt.block_on(engine.run(&mut resumed.state, resumed.resume, &NoObserver, &cancel))
                    .unwrap();
                assert_eq!(resumed.state.status, JobStatus::Completed);
                store.save(&resumed.state, &[], "bench").unwrap();
                total += started.elapsed();
            }
            total
        })
    });

    // A store with 10,000 parked jobs; each iteration answers one and claims it.
    let parked: Vec<String> = (0..10_000)
        .map(|_| {
            let id = new_id();
            let job = engine
                .new_job(id.clone(), Some("chat"), "hello".into())
                .unwrap();
            store.create(&job).unwrap();
            let mut claimed = store.claim(&id, "bench", 60_000).unwrap().unwrap();
            rt.block_on(engine.run(&mut claimed.state, None, &NoObserver, &cancel))
                .unwrap();
            store.save(&claimed.state, &[], "bench").unwrap();
            id
        })
        .collect();
    let mut waiting = parked.iter().cycle();
    group.bench_function("resume_to_running", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let id = waiting.next().unwrap();
                let (mut state, _) = store.load(id).unwrap();
                if state.status != JobStatus::WaitingHuman {
                    // Put it back to waiting outside the measured span.
                    let claimed = store.claim(id, "bench", 60_000).unwrap().unwrap();
                    state = claimed.state;
                    state.status = JobStatus::WaitingHuman;
                    store.save(&state, &[], "bench").unwrap();
                }
                let started = std::time::Instant::now();
                store
                    .answer(id, &Resume::Answered("Oslo".into()).into(), None)
                    .unwrap();
                let claimed = store.claim_next("bench", 60_000).unwrap().unwrap();
                total += started.elapsed();
                assert_eq!(&claimed.state.id, id);
                // Back to waiting for the next round (not measured).
                store.save(&claimed.state, &[], "bench").unwrap();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, jobs);
criterion_main!(benches);
