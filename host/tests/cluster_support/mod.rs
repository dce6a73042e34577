//! Three `maestro work` nodes on one store (a PostgreSQL database, or a SQLite file on a disk
//! that fills up), as real processes, with 300 jobs that each park on a question and are
//! answered as soon as they do: what the failure tests (a node SIGKILLed, the database
//! restarted, the disk full) run, and what they check afterwards.

#![allow(dead_code)]

use std::collections::HashSet;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use maestro::engine::{Answer, JobEvent, JobState, JobStatus};
use maestro::plugin::Resume;
use maestro::store::{JobStore, new_job_id};

use crate::postgres_support::TestDatabase;
use crate::worker_support::{
    Workspace, assert_each_step_once_in_order, finish, interrupt, wait_until,
};

pub const JOBS: usize = 300;
pub const NODES: usize = 3;

pub struct Cluster {
    pub workspace: Workspace,
    pub store: Arc<dyn JobStore>,
    pub nodes: Vec<Option<Child>>,
    /// The jobs that are answered when they park.
    pub jobs: Vec<String>,
    /// A job that parks and is never answered: no node may touch it.
    pub unanswered: String,
    answering: Arc<AtomicBool>,
    /// Whether the second half of the jobs may be answered yet.
    held: Arc<AtomicBool>,
    answerer: Option<std::thread::JoinHandle<()>>,
}

impl Cluster {
    /// The jobs in the database, the nodes started and the answerer answering; with
    /// `hold_back_half`, the second half of the jobs park and wait until
    /// [`Cluster::answer_the_rest`].
    pub fn start(database: TestDatabase, hold_back_half: bool) -> Self {
        Self::start_in(Workspace::on_postgres(database), hold_back_half)
    }

    /// [`Cluster::start`] on the store of `workspace`.
    pub fn start_in(workspace: Workspace, hold_back_half: bool) -> Self {
        let store = workspace.store();
        let create = |input: &str| {
            let job = JobState::new(new_job_id(), "ask", "ask", input.to_owned());
            store.create(&job).unwrap();
            job.id
        };
        let unanswered = create("a question nobody answers");
        let jobs: Vec<String> = (0..JOBS)
            .map(|n| create(&format!("a crash question {n}")))
            .collect();
        let nodes = (0..NODES)
            .map(|node| {
                let log =
                    std::fs::File::create(workspace.path(&format!("node-{node}.log"))).unwrap();
                let mut command = workspace.worker(&["--runners", "4", "--lease-ms", "2000"]);
                command.stderr(Stdio::from(log));
                Some(command.spawn().unwrap())
            })
            .collect();
        let answering = Arc::new(AtomicBool::new(true));
        let held = Arc::new(AtomicBool::new(hold_back_half));
        let answerer = {
            let (store, answering, held) = (store.clone(), answering.clone(), held.clone());
            let (first, second) = jobs.split_at(JOBS / 2);
            let first: HashSet<String> = first.iter().cloned().collect();
            let second: HashSet<String> = second.iter().cloned().collect();
            std::thread::spawn(move || answer_while(&*store, &first, &second, &held, &answering))
        };
        Self {
            workspace,
            store,
            nodes,
            jobs,
            unanswered,
            answering,
            held,
            answerer: Some(answerer),
        }
    }

    /// Lets the jobs held back be answered.
    pub fn answer_the_rest(&self) {
        self.held.store(false, Ordering::Relaxed);
    }

    /// Jobs completed so far; `None` while the store does not answer.
    pub fn completed(&self) -> Option<usize> {
        let completed = self.store.list(Some(JobStatus::Completed), JOBS + 1).ok()?;
        Some(completed.len())
    }

    pub fn wait_for_completed(&self, at_least: usize) {
        wait_until(&format!("{at_least} jobs complete"), || {
            self.completed().is_some_and(|done| done >= at_least)
        });
    }

    /// SIGKILLs node `index`.
    pub fn kill(&mut self, index: usize) {
        let mut node = self.nodes[index].take().unwrap();
        node.kill().unwrap();
        node.wait().unwrap();
    }

    /// What node `index` said.
    pub fn log(&self, index: usize) -> String {
        std::fs::read_to_string(self.workspace.path(&format!("node-{index}.log")))
            .unwrap_or_default()
    }

    /// Waits for every answered job to end, stops the nodes still running (Ctrl-C) and checks
    /// that each job ran exactly once to completion and the unanswered one was left alone;
    /// what each node said.
    pub fn finish_and_check(mut self) -> Vec<String> {
        let everything = || {
            self.jobs.iter().all(|id| {
                self.store
                    .summary(id)
                    .is_ok_and(|summary| summary.status.is_final())
            })
        };
        wait_until("every job ends", everything);
        self.answering.store(false, Ordering::Relaxed);
        self.answerer.take().unwrap().join().unwrap();
        for index in 0..NODES {
            if let Some(node) = self.nodes[index].take() {
                interrupt(&node);
                let output = finish(node, Duration::from_secs(60));
                assert!(
                    output.status.success(),
                    "node {index}:\n{}",
                    self.log(index)
                );
            }
        }
        for id in &self.jobs {
            let (state, status) = self.store.load(id).unwrap();
            assert_eq!(status, JobStatus::Completed, "{id}: {state:?}");
            let log = self.store.events(id, 0).unwrap();
            assert_each_step_once_in_order(id, &log);
            let parks = log
                .iter()
                .filter(|e| matches!(e.event, JobEvent::Parked { .. }))
                .count();
            let resumes = log
                .iter()
                .filter(|e| matches!(e.event, JobEvent::Resumed { .. }))
                .count();
            assert_eq!((parks, resumes), (1, 1), "{id}: {log:?}");
        }
        let (_, status) = self.store.load(&self.unanswered).unwrap();
        assert_eq!(
            status,
            JobStatus::WaitingHuman,
            "the unanswered job still waits"
        );
        let log = self.store.events(&self.unanswered, 0).unwrap();
        assert!(
            matches!(log.last().map(|e| &e.event), Some(JobEvent::Parked { .. })),
            "nothing ran the unanswered job after it parked: {log:?}"
        );
        (0..NODES).map(|index| self.log(index)).collect()
    }
}

/// Answers every job of `first` that waits, and of `second` once `held` is off, until told to
/// stop; a store that does not answer is asked again.
fn answer_while(
    store: &dyn JobStore,
    first: &HashSet<String>,
    second: &HashSet<String>,
    held: &AtomicBool,
    answering: &AtomicBool,
) {
    while answering.load(Ordering::Relaxed) {
        let waiting = store
            .list(Some(JobStatus::WaitingHuman), JOBS + 1)
            .unwrap_or_default();
        let answerable = |id: &String| {
            first.contains(id) || (second.contains(id) && !held.load(Ordering::Relaxed))
        };
        for job in waiting.iter().filter(|job| answerable(&job.id)) {
            // Refused once answered; failing while the database restarts: asked again.
            let _ = store.answer(
                &job.id,
                &Answer::Resume(Resume::Answered("yes".into())),
                None,
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the nodes said of an outage of the store: at most a few times each, not on every
/// attempt, and, where they said it at all, that it was over. A node may sleep through the
/// whole recovery in its longest pause while the others finish the jobs, so one node saying so
/// is enough.
pub fn assert_the_outage_was_said_sparingly(logs: &[String]) {
    for (node, log) in logs.iter().enumerate() {
        let failures = log.matches("the store has failed for").count();
        assert!(
            failures <= 3,
            "node {node} said the failure {failures} times:\n{log}"
        );
    }
    assert!(
        logs.iter()
            .any(|log| log.contains("the store answers again"))
            || logs
                .iter()
                .all(|log| !log.contains("the store has failed for")),
        "no node said the store was back: {logs:#?}"
    );
}
