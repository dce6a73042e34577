//! A folder for the tests of `maestro work` and `maestro run` as processes: pieces (a
//! delegating parent, a child, a slow worker, a question), a scripted model, a plugin folder
//! (the first-party tools and `hostile` for its `sleep`) and a policy that lets SpawnSubTask
//! spawn; and a bounded wait for a process to end.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use maestro::engine::{JobEvent, JobStatus};
use maestro::store::{JobStore, StoreAddress};

use crate::common;
use crate::postgres_support::TestDatabase;
use maestro_plugins as artifacts;

pub const PIECES: &[(&str, &str)] = &[
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

pub const SCRIPT: &str = r#"
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
  - input_contains: "crash job"
    turns:
      - tool_calls: [{ name: sleep, arguments: { ms: 400 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 400 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 400 } }]
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "crash job done" } }]
  - input_contains: "crash question"
    turns:
      - tool_calls: [{ name: complete, arguments: { status: needs_user_input, question: "Go on?" } }]
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "went on" } }]
  - input_contains: "long job"
    turns:
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "long job done" } }]
  - input_contains: "lease kept from renewing"
    turns:
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: sleep, arguments: { ms: 1000 } }]
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "kept job done" } }]
  - input_contains: "fan out"
    turns:
      - tool_calls: [{ name: SpawnSubTask, arguments: { piece: ask, input: "a question from the parent" } }]
      - tool_calls: [{ name: transition, arguments: { next: WAIT_SUBTASKS } }]
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
/// its `sleep`) and a policy that lets SpawnSubTask spawn; the store is `jobs.db` in it, or a
/// PostgreSQL database of its own.
pub struct Workspace {
    dir: tempfile::TempDir,
    database: Option<TestDatabase>,
    /// A SQLite store elsewhere than `jobs.db` in the folder.
    store_file: Option<PathBuf>,
}

impl Workspace {
    /// A workspace whose store is `database`.
    pub fn on_postgres(database: TestDatabase) -> Self {
        Self {
            database: Some(database),
            ..Self::new()
        }
    }

    /// A workspace whose store is the SQLite file `store`.
    pub fn on_sqlite_at(store: PathBuf) -> Self {
        Self {
            store_file: Some(store),
            ..Self::new()
        }
    }

    /// The store's address, as `--store` takes it.
    pub fn store_address(&self) -> String {
        match (&self.database, &self.store_file) {
            (Some(database), _) => database.url.clone(),
            (None, Some(file)) => file.display().to_string(),
            (None, None) => self.path("jobs.db").display().to_string(),
        }
    }

    pub fn new() -> Self {
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
        Self {
            dir,
            database: None,
            store_file: None,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = common::maestro_command();
        command.args(args);
        command.arg("--store").arg(self.store_address());
        command.arg("--pieces").arg(self.path("pieces"));
        command
    }

    pub fn maestro(&self, args: &[&str]) -> Output {
        let output = self.command(args).output().unwrap();
        assert!(
            output.status.success(),
            "maestro {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// A `maestro` command that takes only the store (`jobs cancel`, `jobs show`), which must
    /// succeed.
    pub fn on_the_store(&self, args: &[&str]) -> Output {
        let output = common::maestro_command()
            .args(args)
            .arg("--store")
            .arg(self.store_address())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "maestro {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    pub fn start(&self, piece: &str, input: &str) -> String {
        let output = self.maestro(&["jobs", "start", piece, "--input", input]);
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// `maestro <subcommand>` with the folder's script, plugins and policy, then `extra`.
    pub fn engine_command(&self, subcommand: &str, extra: &[&str]) -> Command {
        let script = format!("scripted:{}", self.path("script.yaml").display());
        let plugins = self.path("plugins").display().to_string();
        let policy = self.path("policy.toml").display().to_string();
        let mut args = vec![
            subcommand,
            "--model",
            &script,
            "--plugins",
            &plugins,
            "--policy",
            &policy,
        ];
        args.extend_from_slice(extra);
        self.command(&args)
    }

    pub fn worker(&self, extra: &[&str]) -> Command {
        let mut command = self.engine_command("work", extra);
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        command
    }

    /// Runs `maestro work --until-idle` with `extra` to its end, which must be a success.
    pub fn work_until_idle(&self, extra: &[&str]) -> Output {
        let mut args = extra.to_vec();
        args.push("--until-idle");
        let output = finish(self.worker(&args).spawn().unwrap(), Duration::from_secs(90));
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    pub fn store(&self) -> Arc<dyn JobStore> {
        StoreAddress::parse(&self.store_address()).open().unwrap().0
    }
}

/// Polls until `ready` holds; the bound only keeps a broken build from hanging the suite.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends SIGINT (what Ctrl-C sends) to `child`.
pub fn interrupt(child: &Child) {
    let sent = Command::new("kill")
        .args(["-s", "INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

pub fn finish(child: Child, deadline: Duration) -> Output {
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

/// The log of a job that completed: numbered 1, 2, … with no gap, one start and one end, and
/// every tool call made once and answered right after it.
pub fn assert_each_step_once_in_order(id: &str, events: &[maestro::store::StoredEvent]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{id}");
    let log: Vec<&JobEvent> = events.iter().map(|e| &e.event).collect();
    assert!(
        matches!(log.first(), Some(JobEvent::Started { .. })),
        "{id}: {log:?}"
    );
    assert!(
        matches!(
            log.last(),
            Some(JobEvent::Finished {
                status: JobStatus::Completed,
                ..
            })
        ),
        "{id}: {log:?}"
    );
    let count = |what: fn(&JobEvent) -> bool| log.iter().filter(|e| what(e)).count();
    assert_eq!(
        count(|e| matches!(e, JobEvent::Started { .. })),
        1,
        "{id}: {log:?}"
    );
    assert_eq!(
        count(|e| matches!(e, JobEvent::Finished { .. })),
        1,
        "{id}: {log:?}"
    );
    // Every call is answered once, right after it, and no call is made twice.
    let mut calls = std::collections::BTreeSet::new();
    for (index, event) in log.iter().enumerate() {
        if let JobEvent::ToolCalled { call_id, tool, .. } = event {
            assert!(
                calls.insert(call_id.clone()),
                "{id}: {call_id} twice: {log:?}"
            );
            if tool != "complete" {
                assert!(
                    matches!(log.get(index + 1), Some(JobEvent::ToolAnswered { call_id: answered, .. }) if answered == call_id),
                    "{id}: {call_id} unanswered: {log:?}"
                );
            }
        }
    }
}
