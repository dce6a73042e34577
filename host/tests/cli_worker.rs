//! `maestro work` as a real process: a piece spawns subtasks, parks on WAIT_SUBTASKS and
//! resumes at its default_next with their results; a wait expires; and two workers share one
//! store while one is SIGKILLed at an end, at a park or during resumes — every job ends exactly
//! once, each step of its log is there once and in order, the survivor loses no lease, and a
//! parked job stays untouched; and a worker serves its metrics on an address of its own.

use std::time::Duration;

use maestro::engine::{Answer, JobEvent, JobStatus};
use maestro::plugin::{Resume, SubtaskStatus};

mod common;
mod postgres_support;
mod worker_support;

use worker_support::{Workspace, assert_each_step_once_in_order, finish, interrupt, wait_until};

#[test]
fn subtasks_run_as_jobs_and_the_parent_resumes_at_default_next_with_their_results() {
    let workspace = Workspace::new();
    let parent = workspace.start("delegate", "Research the market");
    workspace.work_until_idle(&["--runners", "2"]);

    let store = workspace.store();
    let (state, status) = store.load(&parent).unwrap();
    assert_eq!(status, JobStatus::Completed, "{state:?}");
    assert_eq!(state.result.as_deref(), Some("report from both subtasks"));
    let children = store.children(&parent).unwrap();
    assert_eq!(children.len(), 2);
    let events = store.events(&parent, 0).unwrap();
    let parked_at = events.iter().find_map(|e| match &e.event {
        JobEvent::Parked {
            status,
            resume_movement,
            ..
        } => Some((*status, resume_movement.clone())),
        _ => None,
    });
    assert_eq!(
        parked_at,
        Some((JobStatus::WaitingSubtasks, "write".to_owned()))
    );
    let results = events
        .iter()
        .find_map(|e| match &e.event {
            JobEvent::Resumed {
                movement,
                resume: Answer::Resume(Resume::SubtasksDone(results)),
                ..
            } => Some((movement.clone(), results.clone())),
            _ => None,
        })
        .expect("the parent was resumed with the children's results");
    assert_eq!(results.0, "write", "a rule park resumes at default_next");
    let mut statuses: Vec<(SubtaskStatus, String)> = results
        .1
        .iter()
        .map(|r| (r.status, r.output.clone()))
        .collect();
    statuses.sort_by_key(|(status, _)| *status as u8);
    assert_eq!(
        statuses,
        vec![
            (SubtaskStatus::Completed, "A found 3 sources".to_owned()),
            (SubtaskStatus::Aborted, "B: the site is down".to_owned()),
        ],
        "the aborted child is reported as aborted, not hidden"
    );
    for child in &children {
        let (child_state, _) = store.load(child).unwrap();
        assert_eq!(child_state.parent.as_deref(), Some(parent.as_str()));
    }
}

/// Where the first worker is killed in one run of the crash test.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Just after one of its jobs finished: before or during the save of that end.
    Ending,
    /// Just after one of its jobs parked: before or during the save of that park.
    Parking,
    /// Just after the parked jobs were answered: while they are taken up and resumed.
    Resuming,
}

/// A small generator for the kill delays; the seed is printed so a failing run can be replayed
/// (`MAESTRO_CRASH_SEED`).
struct Delays(u64);

impl Delays {
    fn next_ms(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

#[test]
fn two_workers_on_one_store_one_killed_at_random_points_lose_nothing_and_repeat_nothing() {
    one_of_two_workers_killed_at_random_points(Workspace::new);
}

#[test]
fn two_workers_on_postgres_one_killed_at_random_points_lose_nothing_and_repeat_nothing() {
    if postgres_support::database().is_some() {
        one_of_two_workers_killed_at_random_points(|| {
            Workspace::on_postgres(postgres_support::database().unwrap())
        });
    }
}

/// Two `maestro work` processes on the store of a new workspace each round; one is SIGKILLed
/// as a job ends, as one parks, and while answered ones resume: every job ends exactly once,
/// each step of its log once and in order, the survivor loses no lease, and a parked job stays
/// untouched.
fn one_of_two_workers_killed_at_random_points(workspace: impl Fn() -> Workspace) {
    let seed = std::env::var("MAESTRO_CRASH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash test seed: {seed} (MAESTRO_CRASH_SEED replays it)");
    let mut delays = Delays(seed);
    for point in [KillPoint::Ending, KillPoint::Parking, KillPoint::Resuming] {
        let workspace = workspace();
        let store = workspace.store();
        let answered: Vec<String> = (0..2)
            .map(|n| workspace.start("ask", &format!("a crash question {n}")))
            .collect();
        let unanswered = workspace.start("ask", "a question nobody answers");
        // Each job runs 1.2 s against a 600 ms lease: a job whose lease were not renewed would
        // be taken by the other worker mid-run, and its first run's save refused.
        let jobs: Vec<String> = (0..8)
            .map(|n| workspace.start("slow", &format!("crash job {n}")))
            .collect();
        let lease = ["--runners", "2", "--lease-ms", "600"];
        let mut victim = workspace.worker(&lease).spawn().unwrap();
        // Both run from the start, but for the park: the first to start takes the questions
        // (the oldest jobs), so the survivor joins once the victim has parked one.
        let mut survivor = match point {
            KillPoint::Parking => None,
            _ => Some(workspace.worker(&lease).spawn().unwrap()),
        };
        let (lines, said) = std::sync::mpsc::channel::<String>();
        let stderr = victim.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let victim_says = |what: &str| loop {
            let line = said
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("{point:?}: the first worker never said {what:?}"));
            if line.contains(what) {
                break;
            }
        };
        let answer_once_parked = || {
            wait_until("the questions park", || {
                answered
                    .iter()
                    .all(|id| store.load(id).unwrap().1 == JobStatus::WaitingHuman)
            });
            for id in &answered {
                store
                    .answer(id, &Answer::Resume(Resume::Answered("yes".into())), None)
                    .unwrap();
            }
        };
        match point {
            KillPoint::Ending => victim_says(": completed: "),
            KillPoint::Parking => {
                victim_says(": parked waiting_human");
                survivor = Some(workspace.worker(&lease).spawn().unwrap());
            }
            KillPoint::Resuming => answer_once_parked(),
        }
        std::thread::sleep(Duration::from_millis(delays.next_ms(40)));
        victim.kill().unwrap(); // SIGKILL
        victim.wait().unwrap();
        if !matches!(point, KillPoint::Resuming) {
            answer_once_parked();
        }
        wait_until("the unanswered question parks", || {
            store.load(&unanswered).unwrap().1 == JobStatus::WaitingHuman
        });
        let parked_events = store.events(&unanswered, 0).unwrap().len();

        // The survivor takes the dead worker's jobs as their leases run out and ends the rest.
        wait_until(&format!("{point:?} (seed {seed}): every job ends"), || {
            jobs.iter()
                .chain(&answered)
                .all(|id| store.load(id).unwrap().1.is_final())
        });
        let survivor = survivor.unwrap();
        interrupt(&survivor);
        let output = finish(survivor, Duration::from_secs(60));
        let report = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{report}");
        assert!(
            report.contains(" run(s), 0 lost lease(s)"),
            "{point:?} (seed {seed}): the survivor renewed every lease it held:\n{report}"
        );
        for id in jobs.iter().chain(&answered) {
            assert_each_step_once_in_order(id, &store.events(id, 0).unwrap());
        }
        for id in &answered {
            let log = store.events(id, 0).unwrap();
            let parks = log
                .iter()
                .filter(|e| matches!(e.event, JobEvent::Parked { .. }));
            let resumes = log
                .iter()
                .filter(|e| matches!(e.event, JobEvent::Resumed { .. }));
            assert_eq!((parks.count(), resumes.count()), (1, 1), "{id}: {log:?}");
        }
        assert_eq!(store.load(&unanswered).unwrap().1, JobStatus::WaitingHuman);
        assert_eq!(
            store.events(&unanswered, 0).unwrap().len(),
            parked_events,
            "a parked job is not touched"
        );
    }
}

#[test]
fn a_wait_with_an_expiry_resumes_with_expired() {
    let workspace = Workspace::new();
    let id = workspace.start("ask", "a question nobody answers");
    workspace.work_until_idle(&["--wait-expiry-ms", "300"]);
    let store = workspace.store();
    let (state, status) = store.load(&id).unwrap();
    assert_eq!(status, JobStatus::Completed, "{state:?}");
    assert_eq!(state.result.as_deref(), Some("no answer came in time"));
    let resumed = store.events(&id, 0).unwrap().into_iter().any(|e| {
        matches!(
            e.event,
            JobEvent::Resumed {
                resume: Answer::Resume(Resume::Expired),
                ..
            }
        )
    });
    assert!(resumed, "the parked call was re-invoked with `expired`");
}

#[test]
fn a_worker_serves_its_metrics_on_its_own_address_and_nothing_else() {
    let workspace = Workspace::new();
    let id = workspace.start("ask", "a question the metrics count");
    let mut worker = workspace
        .worker(&["--metrics", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let stderr = worker.stderr.take().unwrap();
    let (lines, said) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let url = loop {
        let line = said
            .recv_timeout(Duration::from_secs(120))
            .expect("the worker says where its metrics are");
        if let Some(url) = line.strip_prefix("metrics at ") {
            break url.to_owned();
        }
    };
    let store = workspace.store();
    wait_until("the question parks", || {
        store.load(&id).unwrap().1 == JobStatus::WaitingHuman
    });

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let get = |url: String| {
        runtime.block_on(async move {
            let response = reqwest::get(&url).await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    let (status, text) = get(url.clone());
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("maestro_jobs{status=\"waiting_human\"} 1"),
        "the parked job is counted:\n{text}"
    );
    assert!(
        text.contains("maestro_parks_total{reason=\"input\"} 1"),
        "its park is counted once its save stood:\n{text}"
    );
    let api = url.replace("/metrics", "/v1/jobs");
    assert_eq!(get(api).0, 404, "the metrics address serves no API");

    interrupt(&worker);
    let output = finish(worker, Duration::from_secs(60));
    assert!(output.status.success());
}
