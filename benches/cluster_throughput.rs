//! Park → resume cycles per second with the jobs in PostgreSQL, run by 1, 2 and 3 nodes, beside
//! the same cycles on SQLite, and the ceiling: `pgbench` on the same cluster, in the same run,
//! with a script of the transactions and rows of one cycle.
//!
//! A cycle is what `cycle_throughput` measures: a runner claims a job, runs it until `complete`
//! parks on a question and saves it; an answerer records the answer; a runner claims it again,
//! resumes the parked call, runs it to the end and saves it. A PostgreSQL node is a process of
//! its own (this bench run again with `--node`): its store (a connection pool and a listening
//! connection) and a worker with 16 runners, woken by the database's notifications. This
//! process creates the jobs and answers each as its node says it parked, also from the
//! notifications. The nodes share the machine's two cores with the database server. The SQLite
//! node runs in this process, as `maestro serve` would. Each round has a new database.
//!
//! Written per cycle: for PostgreSQL, the write-ahead log the round added (`pg_current_wal_lsn`),
//! which every change goes through; for SQLite, what this process wrote (`/proc/self/io`).
//!
//! `.ci/postgres start` prints a cluster's URL; then
//! `MAESTRO_BENCH_POSTGRES=postgres://… cargo bench -p maestro-benches --bench cluster_throughput`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use maestro::engine::{CancelFlag, Engine, JobStatus};
use maestro::store::{JobChange, JobStore, PostgresStore, SqliteStore};
use maestro::worker::{Worker, WorkerConfig};
use maestro_benches::{Cycles, answer_parked, rate_with_range};
use tokio::sync::Notify;

maestro_benches::allocate_like_maestro!();

const JOBS: usize = 3_000;
const ROUNDS: usize = 3;
const RUNNERS_PER_NODE: usize = 16;
const ANSWERERS: usize = 4;

struct Round {
    elapsed: Duration,
    written_per_cycle: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, url, name] = args.as_slice()
        && flag == "--node"
    {
        return node(url, name);
    }
    let Some(admin) = std::env::var("MAESTRO_BENCH_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        eprintln!("set MAESTRO_BENCH_POSTGRES to a PostgreSQL URL (.ci/postgres start prints one)");
        return;
    };
    let (rt, engine, _cache) = maestro_benches::threaded_chat_engine();
    println!(
        "{JOBS} cycles per round, {ROUNDS} rounds each, {RUNNERS_PER_NODE} runners per node: \
         medians, with the rounds' range"
    );
    println!("| store | nodes | cycles/s | written per cycle |");
    println!("|---|---:|---:|---:|");
    let report = |store: &str, nodes: usize, rounds: &[Round]| {
        let mut written: Vec<u64> = rounds.iter().map(|r| r.written_per_cycle).collect();
        written.sort();
        println!(
            "| {store} | {nodes} | {} | {:.1} KB |",
            rate_with_range(JOBS, rounds.iter().map(|r| r.elapsed)),
            written[ROUNDS / 2] as f64 / 1024.0
        );
    };
    let sqlite: Vec<Round> = (0..ROUNDS)
        .map(|_| {
            let dir = tempfile::tempdir().expect("temp dir");
            let store: Arc<dyn JobStore> =
                Arc::new(SqliteStore::open(dir.path().join("jobs.db")).expect("store opens"));
            measure(&rt, &engine, store, &process_bytes_written)
        })
        .collect();
    report("SQLite", 1, &sqlite);
    let mut best = 0.0f64;
    for nodes in 1..=3 {
        let rounds: Vec<Round> = (0..ROUNDS)
            .map(|_| {
                let database = Database::new(&admin);
                measure_nodes(&rt, &engine, &database.url, nodes)
            })
            .collect();
        for round in &rounds {
            best = best.max(JOBS as f64 / round.elapsed.as_secs_f64());
        }
        report("PostgreSQL", nodes, &rounds);
    }
    let ceiling = pgbench_ceiling(&admin, &engine);
    println!(
        "\npgbench, the same transactions and rows per cycle on the same cluster, \
         {RUNNERS_PER_NODE} clients: {ceiling:.0} cycles/s; the best PostgreSQL round above \
         is {:.2} of it",
        best / ceiling
    );
}

/// Creates `JOBS` jobs, then runs a worker on `store` in this process until each job has
/// parked, been answered and completed; `written` reads the bytes written so far.
fn measure(
    rt: &tokio::runtime::Runtime,
    engine: &Arc<Engine>,
    store: Arc<dyn JobStore>,
    written: &dyn Fn() -> u64,
) -> Round {
    create_jobs(engine, &*store);
    let (parked, to_answer) = std::sync::mpsc::channel();
    let stop = CancelFlag::default();
    let bench = Arc::new(Cycles::new(JOBS, parked, stop.clone()));
    let wake = Arc::new(Notify::new());
    let worker = Arc::new(
        Worker::new(
            store.clone(),
            engine.clone(),
            node_config("node-0"),
            wake.clone(),
        )
        .with_observer(bench.clone()),
    );
    let answerers = answerers(&store, to_answer, &wake);
    let written_before = written();
    let started = Instant::now();
    rt.block_on(worker.run(stop, false));
    let elapsed = started.elapsed();
    drop(worker);
    drop(bench.parked.lock().unwrap().take());
    for answerer in answerers {
        answerer.join().expect("answerer");
    }
    check_completed(&*store);
    // What the round left in SQLite's write-ahead log is copied into the file when the store
    // closes: those copies are the round's too.
    drop(store);
    let written = written() - written_before;
    Round {
        elapsed,
        written_per_cycle: written / JOBS as u64,
    }
}

/// [`measure`] with `nodes` node processes on the database `url`: this process creates the
/// jobs, starts the nodes, and answers each job the database says parked, until it says every
/// job completed.
fn measure_nodes(
    rt: &tokio::runtime::Runtime,
    engine: &Arc<Engine>,
    url: &str,
    nodes: usize,
) -> Round {
    let store: Arc<dyn JobStore> = Arc::new(PostgresStore::open(url).expect("store opens"));
    let mut heard = store.changes().expect("PostgreSQL tells of changes");
    create_jobs(engine, &*store);
    let mut processes: Vec<Child> = (0..nodes)
        .map(|index| {
            Command::new(std::env::current_exe().expect("this bench"))
                .args(["--node", url, &format!("node-{index}")])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a node starts")
        })
        .collect();
    for process in &mut processes {
        let mut ready = String::new();
        BufReader::new(process.stdout.as_mut().expect("stdout"))
            .read_line(&mut ready)
            .expect("the node says it is ready");
        assert_eq!(ready.trim(), "ready");
    }
    let (parked, to_answer) = std::sync::mpsc::channel();
    let answerers = answerers(&store, to_answer, &Arc::new(Notify::new()));
    let written_before = wal_position(url);
    let started = Instant::now();
    for process in &mut processes {
        let go = process.stdin.as_mut().expect("stdin");
        go.write_all(b"go\n").and_then(|()| go.flush()).expect("go");
    }
    rt.block_on(async {
        let mut completed = 0;
        while completed < JOBS {
            let next = tokio::time::timeout(Duration::from_secs(120), heard.recv()).await;
            let change = next
                .expect("a node stopped: no change for 2 minutes")
                .expect("the database's notifications keep up");
            match change {
                JobChange::Saved {
                    job,
                    status: JobStatus::WaitingHuman,
                } => parked.send(job).expect("answerers"),
                JobChange::Saved {
                    status: JobStatus::Completed,
                    ..
                } => completed += 1,
                JobChange::Missed => panic!("the bench lost the database's notifications"),
                _ => {}
            }
        }
    });
    let elapsed = started.elapsed();
    let written = wal_position(url) - written_before;
    for mut process in processes {
        drop(process.stdin.take());
        process.wait().expect("the node stops");
    }
    drop(parked);
    for answerer in answerers {
        answerer.join().expect("answerer");
    }
    check_completed(&*store);
    Round {
        elapsed,
        written_per_cycle: written / JOBS as u64,
    }
}

/// A node process: a worker on the database `url`, which starts on a line on stdin and stops
/// when stdin closes.
fn node(url: &str, name: &str) {
    let (rt, engine, _cache) = maestro_benches::threaded_chat_engine();
    let store: Arc<dyn JobStore> = Arc::new(PostgresStore::open(url).expect("store opens"));
    let worker = Arc::new(Worker::new(
        store,
        engine,
        node_config(name),
        Arc::new(Notify::new()),
    ));
    println!("ready");
    let stop = CancelFlag::default();
    let (go, went) = std::sync::mpsc::channel();
    let on_close = stop.clone();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut line = String::new();
        let _ = stdin.read_line(&mut line);
        let _ = go.send(());
        let _ = std::io::copy(&mut stdin, &mut std::io::sink());
        on_close.cancel();
    });
    went.recv().expect("go");
    rt.block_on(worker.run(stop, false));
}

fn node_config(name: &str) -> WorkerConfig {
    WorkerConfig {
        runners: RUNNERS_PER_NODE,
        idle_poll: Duration::from_millis(5),
        name: name.to_owned(),
        ..WorkerConfig::default()
    }
}

fn create_jobs(engine: &Engine, store: &dyn JobStore) {
    for n in 0..JOBS {
        let job = engine
            .new_job(format!("job-{n:06}"), Some("chat"), "hello".into())
            .unwrap();
        store.create(&job).unwrap();
    }
}

/// Threads that answer the jobs sent to `to_answer` until its sender is gone.
fn answerers(
    store: &Arc<dyn JobStore>,
    to_answer: std::sync::mpsc::Receiver<String>,
    wake: &Arc<Notify>,
) -> Vec<std::thread::JoinHandle<()>> {
    let to_answer = Arc::new(Mutex::new(to_answer));
    (0..ANSWERERS)
        .map(|_| {
            let (store, to_answer, wake) = (store.clone(), to_answer.clone(), wake.clone());
            std::thread::spawn(move || answer_parked(&*store, &to_answer, &wake))
        })
        .collect()
}

fn check_completed(store: &dyn JobStore) {
    let completed = store.list(Some(JobStatus::Completed), JOBS + 1).unwrap();
    assert_eq!(completed.len(), JOBS);
}

/// Bytes this process has written so far.
fn process_bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))
        .and_then(|bytes| bytes.trim().parse().ok())
        .expect("wchar in /proc/self/io")
}

/// How far the cluster's write-ahead log has come, in bytes.
fn wal_position(url: &str) -> u64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connects");
    let row = client
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
            &[],
        )
        .expect("WAL position");
    row.get::<_, i64>(0) as u64
}

/// A new database, dropped after its round.
struct Database {
    admin: String,
    name: String,
    url: String,
}

impl Database {
    fn new(admin: &str) -> Self {
        let name = format!("maestro_bench_{}_{}", std::process::id(), unique());
        let mut client = postgres::Client::connect(admin, postgres::NoTls).expect("connects");
        client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .expect("database");
        let server = admin.rsplit_once('/').map_or(admin, |(server, _)| server);
        Self {
            admin: admin.to_owned(),
            url: format!("{server}/{name}"),
            name,
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP DATABASE \"{}\" WITH (FORCE)", self.name));
        }
    }
}

/// A number no other call in this process returns.
fn unique() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One cycle's transactions, as the store runs them: the save that parks a job and claims the
/// next, the answer, and the save that completes it and claims the next; each statement with
/// rows of a cycle's sizes (a state of about 1.2 KB, a log row of events and messages).
const CYCLE_SCRIPT: &str = r#"
\set n random(1, 3000)
\set b random(1, 1000000000)
BEGIN;
SELECT cancel_reason FROM jobs WHERE id = 'job-' || lpad(:n::text, 6, '0') AND lease_owner = 'bench' AND cancel_requested;
WITH written AS (UPDATE jobs SET status = 'waiting_human', updated_at_ms = updated_at_ms + 1, lease_owner = NULL WHERE id = 'job-' || lpad(:n::text, 6, '0') RETURNING id, status), stated AS (UPDATE job_states SET state = repeat('s', 1200) WHERE id IN (SELECT id FROM written)) SELECT pg_notify('maestro_jobs', status || ' ' || id) FROM written;
SELECT batch, last_seq FROM saves WHERE job_id = 'job-' || lpad(:n::text, 6, '0') ORDER BY batch DESC LIMIT 1;
INSERT INTO saves (job_id, batch, first_seq, last_seq, at_ms, events, messages_from, messages) VALUES ('job-' || lpad(:n::text, 6, '0'), :b, 1, 6, 0, repeat('e', 1500), 1, repeat('m', 400)) ON CONFLICT DO NOTHING;
SELECT id FROM jobs WHERE status = 'pending' ORDER BY updated_at_ms, id LIMIT 1 FOR UPDATE SKIP LOCKED;
SELECT j.status, s.state, j.pending_resume, j.lease_until_ms FROM jobs j JOIN job_states s USING (id) WHERE j.id = 'job-' || lpad(:n::text, 6, '0') FOR UPDATE OF j;
UPDATE jobs SET lease_owner = 'bench', lease_until_ms = 1 WHERE id = 'job-' || lpad(:n::text, 6, '0');
SELECT messages_from, messages FROM saves WHERE job_id = 'job-' || lpad(:n::text, 6, '0') AND messages IS NOT NULL ORDER BY batch;
COMMIT;
BEGIN;
SELECT j.status, s.state, j.pending_resume, j.lease_until_ms FROM jobs j JOIN job_states s USING (id) WHERE j.id = 'job-' || lpad(:n::text, 6, '0') FOR UPDATE OF j;
WITH written AS (UPDATE jobs SET status = 'pending', pending_resume = '{"resume":"answered"}', updated_at_ms = updated_at_ms + 1 WHERE id = 'job-' || lpad(:n::text, 6, '0') RETURNING id, status) SELECT pg_notify('maestro_jobs', status || ' ' || id) FROM written;
COMMIT;
BEGIN;
SELECT cancel_reason FROM jobs WHERE id = 'job-' || lpad(:n::text, 6, '0') AND lease_owner = 'bench' AND cancel_requested;
WITH written AS (UPDATE jobs SET status = 'completed', updated_at_ms = updated_at_ms + 1, lease_owner = NULL WHERE id = 'job-' || lpad(:n::text, 6, '0') RETURNING id, status), stated AS (UPDATE job_states SET state = repeat('s', 1200) WHERE id IN (SELECT id FROM written)) SELECT pg_notify('maestro_jobs', status || ' ' || id) FROM written;
SELECT batch, last_seq FROM saves WHERE job_id = 'job-' || lpad(:n::text, 6, '0') ORDER BY batch DESC LIMIT 1;
INSERT INTO saves (job_id, batch, first_seq, last_seq, at_ms, events, messages_from, messages) VALUES ('job-' || lpad(:n::text, 6, '0'), :b + 1, 7, 12, 0, repeat('e', 1500), 3, repeat('m', 400)) ON CONFLICT DO NOTHING;
SELECT id FROM jobs WHERE status = 'pending' ORDER BY updated_at_ms, id LIMIT 1 FOR UPDATE SKIP LOCKED;
SELECT j.status, s.state, j.pending_resume, j.lease_until_ms FROM jobs j JOIN job_states s USING (id) WHERE j.id = 'job-' || lpad(:n::text, 6, '0') FOR UPDATE OF j;
UPDATE jobs SET lease_owner = 'bench', lease_until_ms = 1 WHERE id = 'job-' || lpad(:n::text, 6, '0');
SELECT messages_from, messages FROM saves WHERE job_id = 'job-' || lpad(:n::text, 6, '0') AND messages IS NOT NULL ORDER BY batch;
COMMIT;
"#;

/// Cycles per second `pgbench` reaches with [`CYCLE_SCRIPT`] on a database of `JOBS` jobs in
/// maestro's schema.
fn pgbench_ceiling(admin: &str, engine: &Engine) -> f64 {
    let database = Database::new(admin);
    let store = PostgresStore::open(&database.url).expect("schema");
    for n in 0..JOBS {
        let job = engine
            .new_job(format!("job-{n:06}"), Some("chat"), "hello".into())
            .unwrap();
        store.create(&job).unwrap();
    }
    drop(store);
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("cycle.sql");
    std::fs::write(&script, CYCLE_SCRIPT).expect("script");
    let bin = std::env::var("MAESTRO_POSTGRES_BIN").unwrap_or_else(|_| {
        let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's binaries in /usr/lib/postgresql (or MAESTRO_POSTGRES_BIN)")
            .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
            .collect();
        versions.sort();
        versions
            .pop()
            .expect("a PostgreSQL version")
            .display()
            .to_string()
    });
    let mut rates = Vec::new();
    for _ in 0..ROUNDS {
        let output = std::process::Command::new(format!("{bin}/pgbench"))
            .args(["-n", "-c", &RUNNERS_PER_NODE.to_string(), "-j", "2", "-t"])
            .arg((JOBS / RUNNERS_PER_NODE).to_string())
            .arg("-f")
            .arg(&script)
            .arg(&database.url)
            .output()
            .expect("pgbench runs");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "pgbench failed:\n{text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let tps = text
            .lines()
            .find_map(|line| line.strip_prefix("tps = "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|rate| rate.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no tps in pgbench's output:\n{text}"));
        rates.push(tps);
    }
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}
