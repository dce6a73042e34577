//! Cancelling as the README promises it, with real processes: a job a worker is running stops
//! at its next step, a cancel reaches the job's open subtasks, and Ctrl-C on `maestro run`
//! cancels the job it runs; a runner's own stop, when the store fails under it, cancels
//! nothing. Each test waits for the state it acts on (a job running, a child
//! parked, a tool called), never for a time.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use maestro::engine::{JobEvent, JobStatus};
use maestro::store::JobStore;
use serde_json::Value;

mod common;
mod postgres_support;
mod worker_support;

use worker_support::{Workspace, interrupt, wait_until};

/// What the engine saves as the result of a job it stopped for a cancel.
const STOPPED: &str = "cancelled by a user or operator";

fn status(store: &dyn JobStore, id: &str) -> JobStatus {
    store.load(id).unwrap().1
}

fn log(store: &dyn JobStore, id: &str) -> Vec<JobEvent> {
    store
        .events(id, 0)
        .unwrap()
        .into_iter()
        .map(|stored| stored.event)
        .collect()
}

fn calls_of(log: &[JobEvent], name: &str) -> usize {
    log.iter()
        .filter(|event| matches!(event, JobEvent::ToolCalled { tool, .. } if tool == name))
        .count()
}

/// The job ended cancelled by its runner, which stopped between steps with `reason`: the work it
/// had left (five one-second sleeps, then `complete`) was not done.
fn stopped_by_its_runner(store: &dyn JobStore, id: &str, reason: &str) {
    let (state, status) = store.load(id).unwrap();
    assert_eq!(status, JobStatus::Cancelled, "{state:?}");
    assert_eq!(state.result.as_deref(), Some(reason));
    let log = log(store, id);
    assert!(
        matches!(log.last(), Some(JobEvent::Finished { status: JobStatus::Cancelled, detail }) if detail == reason),
        "{log:?}"
    );
    assert!(calls_of(&log, "sleep") < 5, "it stopped early: {log:?}");
    assert_eq!(calls_of(&log, "complete"), 0, "{log:?}");
}

#[test]
fn cancelling_a_job_a_worker_is_running_stops_it_at_its_next_step_with_the_reason_given() {
    let workspace = Workspace::new();
    let id = workspace.start("slow", "a long job");
    // A short lease: the runner renews it (and hears of the cancel) every 200 ms.
    let mut worker = workspace
        .worker(&["--runners", "1", "--lease-ms", "600"])
        .spawn()
        .unwrap();
    let store = workspace.store();
    wait_until("the job runs", || {
        status(store.as_ref(), &id) == JobStatus::Running
    });

    let output = workspace.on_the_store(&["jobs", "cancel", &id, "--reason", "wrong vendor"]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.starts_with(&format!(
            "{id} is running: its runner stops it at the next step"
        )),
        "{said}"
    );
    wait_until("the runner stops the job", || {
        status(store.as_ref(), &id) == JobStatus::Cancelled
    });
    worker.kill().unwrap();
    worker.wait().unwrap();
    stopped_by_its_runner(store.as_ref(), &id, "wrong vendor");
}

#[test]
fn cancelling_a_parent_cancels_its_open_subtasks() {
    let workspace = Workspace::new();
    let parent = workspace.start("delegate", "fan out to a child that asks");
    workspace.work_until_idle(&["--runners", "2"]);
    let store = workspace.store();
    assert_eq!(status(store.as_ref(), &parent), JobStatus::WaitingSubtasks);
    let children = store.children(&parent).unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    let child = children[0].clone();
    assert_eq!(status(store.as_ref(), &child), JobStatus::WaitingHuman);

    let output = workspace.on_the_store(&["jobs", "cancel", &parent, "--reason", "not needed"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("cancelled {parent} (and its open subtasks)")
    );
    let (state, status_now) = store.load(&parent).unwrap();
    assert_eq!(
        (status_now, state.result.as_deref()),
        (JobStatus::Cancelled, Some("not needed"))
    );
    let (state, status_now) = store.load(&child).unwrap();
    assert_eq!(
        (status_now, state.result.as_deref()),
        (JobStatus::Cancelled, Some("its parent job was cancelled"))
    );
    assert!(matches!(
        log(store.as_ref(), &child).last(),
        Some(JobEvent::Finished {
            status: JobStatus::Cancelled,
            ..
        })
    ));
}

#[test]
fn ctrl_c_on_maestro_run_cancels_the_job_at_its_next_step() {
    let workspace = Workspace::new();
    let mut run = workspace
        .engine_command("run", &["slow", "--input", "a long job", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Every step is a line as it happens: the interrupt comes while the first sleep runs.
    let mut steps = BufReader::new(run.stdout.take().unwrap()).lines();
    let job = loop {
        let line = steps
            .next()
            .expect("the run printed a tool call before it ended")
            .unwrap();
        let step: Value = serde_json::from_str(&line).unwrap();
        if step["event"]["event"] == "tool_called" && step["event"]["tool"] == "sleep" {
            break step["job"].as_str().unwrap().to_owned();
        }
    };
    interrupt(&run);
    for line in steps {
        line.unwrap();
    }
    let output = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "interrupted: cancelling the job at its next step (Ctrl-C again to quit now)"
        ),
        "{stderr}"
    );
    stopped_by_its_runner(workspace.store().as_ref(), &job, STOPPED);
}

/// A store that fails while a runner holds a job (here a write lock held longer than the
/// store's busy timeout) stops the run at its next step, as a lost lease does; but that stop is
/// no one's cancel. The runner saves nothing, and the job waits, still running, to be taken up
/// from its last save once its lease ends, as a crashed runner's job does.
#[test]
fn a_runner_that_cannot_renew_its_lease_stops_the_job_without_cancelling_it() {
    let workspace = Workspace::new();
    let id = workspace.start("slow", "lease kept from renewing");
    let mut worker = workspace
        .worker(&["--runners", "1", "--lease-ms", "600"])
        .spawn()
        .unwrap();
    let said = said_by(&mut worker);
    let store = workspace.store();
    wait_until("the job runs", || {
        status(store.as_ref(), &id) == JobStatus::Running
    });

    let lock = rusqlite::Connection::open(workspace.path("jobs.db")).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    wait_until("the runner cannot renew the lease", || {
        said.lock().unwrap().contains("cannot renew the lease")
    });
    lock.execute_batch("ROLLBACK").unwrap();
    wait_until("the runner gives the job up, or saves it ended", || {
        said.lock().unwrap().contains("lost the lease mid-run")
            || status(store.as_ref(), &id).is_final()
    });
    worker.kill().unwrap();
    worker.wait().unwrap();

    let (state, status) = store.load(&id).unwrap();
    assert_eq!(status, JobStatus::Running, "{state:?}");
    let log = log(store.as_ref(), &id);
    assert!(
        log.is_empty(),
        "nothing of the stopped run was saved: {log:?}"
    );
}

/// What `child` writes to its standard error, as it comes.
fn said_by(child: &mut std::process::Child) -> Arc<Mutex<String>> {
    let said = Arc::new(Mutex::new(String::new()));
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let into = said.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut said = into.lock().unwrap();
            said.push_str(&line);
            said.push('\n');
        }
    });
    said
}
