//! `maestro work` as a real process: a piece spawns subtasks, parks on WAIT_SUBTASKS and
//! resumes at its default_next with their results; and a worker killed with SIGKILL in the
//! middle of a batch loses nothing — after a restart every job ends exactly once and parked
//! jobs stay untouched.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use maestro::engine::{Answer, JobEvent, JobStatus};
use maestro::plugin::{Resume, SubtaskStatus};
use maestro::store::{JobStore, SqliteStore};
mod common;

use maestro_plugins as artifacts;

const PIECES: &[(&str, &str)] = &[
    (
        "delegate.yaml",
        "name: delegate\ninitial_movement: gather\nmax_movements: 4\nmovements:\n  - name: gather\n    instructions: Delegate the sub-questions to subtasks.\n    tools: [SpawnSubTask]\n    rules:\n      - condition: Subtasks were started.\n        next: WAIT_SUBTASKS\n    default_next: write\n  - name: write\n    instructions: Write the report from the subtasks' results.\n    tools: [complete]\n    default_next: COMPLETE\n",
    ),
    (
        "child.yaml",
        "name: child\ninitial_movement: answer\nmax_movements: 1\nmovements:\n  - name: answer\n    instructions: Answer the sub-question.\n    tools: [complete]\n",
    ),
    (
        "slow.yaml",
        "name: slow\ninitial_movement: work\nmax_movements: 1\nmovements:\n  - name: work\n    instructions: Work, slowly.\n    tools: [sleep, complete]\n",
    ),
    (
        "ask.yaml",
        "name: ask\ninitial_movement: ask\nmax_movements: 1\nmovements:\n  - name: ask\n    instructions: Ask the user.\n    tools: [complete]\n",
    ),
];

const SCRIPT: &str = r#"
conversations:
  - input_contains: "sub A"
    turns:
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "A found 3 sources" } }]
  - input_contains: "sub B"
    turns:
      - tool_calls: [{ name: complete, arguments: { status: aborted, summary: "B: the site is down" } }]
  - input_contains: "slow"
    turns:
      - tool_calls: [{ name: sleep, arguments: { ms: 300 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 300 } }]
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "slow job done" } }]
  - input_contains: "nobody answers"
    turns:
      - tool_calls: [{ name: complete, arguments: { status: needs_user_input, question: "Anyone?" } }]
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "no answer came in time" } }]
  - input_contains: "question"
    turns:
      - tool_calls: [{ name: complete, arguments: { status: needs_user_input, question: "Which one?" } }]
turns:
  - tool_calls:
      - { name: SpawnSubTask, arguments: { piece: child, input: "sub A: find sources" } }
      - { name: SpawnSubTask, arguments: { piece: child, input: "sub B: check the site" } }
  - tool_calls: [{ name: transition, arguments: { next: WAIT_SUBTASKS } }]
  - tool_calls: [{ name: complete, arguments: { status: done, summary: "report from both subtasks" } }]
"#;

/// A folder with the pieces, the script, a plugin folder (first-party tools and `hostile` for
/// its `sleep`) and a policy that lets SpawnSubTask spawn.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pieces = dir.path().join("pieces");
        std::fs::create_dir(&pieces).unwrap();
        for (name, text) in PIECES {
            std::fs::write(pieces.join(name), text).unwrap();
        }
        std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        for path in artifacts::FIRST_PARTY.iter().chain([&artifacts::HOSTILE]) {
            let name = Path::new(path).file_name().unwrap();
            std::fs::copy(path, plugins.join(name)).unwrap();
        }
        std::fs::write(
            dir.path().join("policy.toml"),
            "[plugins.spawn_subtask]\nspawn_subtasks = true\n",
        )
        .unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = common::maestro_command();
        command.args(args);
        command.arg("--store").arg(self.path("jobs.db"));
        command.arg("--pieces").arg(self.path("pieces"));
        command
    }

    fn maestro(&self, args: &[&str]) -> Output {
        let output = self.command(args).output().unwrap();
        assert!(
            output.status.success(),
            "maestro {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    fn start(&self, piece: &str, input: &str) -> String {
        let output = self.maestro(&["jobs", "start", piece, "--input", input]);
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    fn worker(&self, extra: &[&str]) -> Command {
        let script = format!("scripted:{}", self.path("script.yaml").display());
        let plugins = self.path("plugins").display().to_string();
        let policy = self.path("policy.toml").display().to_string();
        let mut args = vec![
            "work",
            "--model",
            &script,
            "--plugins",
            &plugins,
            "--policy",
            &policy,
        ];
        args.extend_from_slice(extra);
        let mut command = self.command(&args);
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        command
    }

    fn store(&self) -> SqliteStore {
        SqliteStore::open(self.path("jobs.db")).unwrap()
    }
}

fn finish(child: Child, deadline: Duration) -> Output {
    let started = Instant::now();
    let mut child = child;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the worker did not finish in {deadline:?}:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn subtasks_run_as_jobs_and_the_parent_resumes_at_default_next_with_their_results() {
    let workspace = Workspace::new();
    let parent = workspace.start("delegate", "Research the market");
    let worker = workspace
        .worker(&["--runners", "2", "--until-idle"])
        .spawn()
        .unwrap();
    let output = finish(worker, Duration::from_secs(60));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

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

#[test]
fn a_worker_killed_mid_batch_loses_nothing_and_nothing_ends_twice() {
    let workspace = Workspace::new();
    // The questions first: runners take the oldest job first, so they park at once.
    let asking: Vec<String> = (0..2)
        .map(|n| workspace.start("ask", &format!("a question {n}")))
        .collect();
    // 32 jobs of 0.6 s on 4 runners: the kill has seconds to land mid-batch, even when this
    // test's polling thread is starved.
    let slow: Vec<String> = (0..32)
        .map(|n| workspace.start("slow", &format!("slow job {n}")))
        .collect();

    // First worker: parks the questions, starts the batch, and is killed in the middle of it.
    let mut first = workspace
        .worker(&["--runners", "4", "--lease-ms", "1000"])
        .spawn()
        .unwrap();
    let store = workspace.store();
    let started = Instant::now();
    loop {
        let completed = store.list(Some(JobStatus::Completed), 100).unwrap().len();
        let running = store.list(Some(JobStatus::Running), 100).unwrap().len();
        let parked = store
            .list(Some(JobStatus::WaitingHuman), 100)
            .unwrap()
            .len();
        if completed >= 2 && running >= 1 && parked == asking.len() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the batch never got going: {completed} completed, {running} running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let interrupted = store.list(Some(JobStatus::Running), 100).unwrap().len();
    assert!(interrupted >= 1, "the kill must catch jobs mid-run");
    let parked_before: Vec<usize> = asking
        .iter()
        .map(|id| store.events(id, 0).unwrap().len())
        .collect();

    // Second worker: takes the dead worker's jobs once their leases expire, runs the rest.
    let second = workspace
        .worker(&["--runners", "4", "--lease-ms", "1000", "--until-idle"])
        .spawn()
        .unwrap();
    let output = finish(second, Duration::from_secs(90));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    for id in &slow {
        let (state, status) = store.load(id).unwrap();
        assert_eq!(status, JobStatus::Completed, "{id}: {state:?}");
        let events = store.events(id, 0).unwrap();
        let ends = events
            .iter()
            .filter(|e| matches!(e.event, JobEvent::Finished { .. }))
            .count();
        assert_eq!(ends, 1, "{id} ended {ends} times");
        let starts = events
            .iter()
            .filter(|e| matches!(e.event, JobEvent::Started { .. }))
            .count();
        assert_eq!(starts, 1, "{id} started {starts} times in its log");
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    }
    for (id, before) in asking.iter().zip(parked_before) {
        let (_, status) = store.load(id).unwrap();
        assert_eq!(status, JobStatus::WaitingHuman, "{id} stays parked");
        assert_eq!(
            store.events(id, 0).unwrap().len(),
            before,
            "{id} was not touched"
        );
    }
}

#[test]
fn a_wait_with_an_expiry_resumes_with_expired() {
    let workspace = Workspace::new();
    let id = workspace.start("ask", "a question nobody answers");
    let worker = workspace
        .worker(&["--wait-expiry-ms", "300", "--until-idle"])
        .spawn()
        .unwrap();
    let output = finish(worker, Duration::from_secs(60));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
