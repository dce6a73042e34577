//! `maestro run` and `maestro jobs` as separate processes on one store file: a job parks in one
//! process, survives it, and is answered (once) from another.

mod cli_support;
mod common;
mod postgres_support;

use cli_support::{maestro, repo, scripted_flags, text, with};

use maestro_plugins as artifacts;
use serde_json::Value;

fn chat_flags() -> Vec<String> {
    scripted_flags("chat.yaml")
}

fn jobs(store: impl AsRef<std::ffi::OsStr>, status: &str) -> Vec<Value> {
    let output = maestro(store, &["jobs", "list", "--json", "--status", status]);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice::<Vec<Value>>(&output.stdout).unwrap()
}

#[test]
fn an_ask_parks_survives_the_process_and_is_answered_once_from_another() {
    let dir = tempfile::tempdir().unwrap();
    parks_and_is_answered_from_another_process(dir.path().join("jobs.db").to_str().unwrap());
}

#[test]
fn on_postgres_an_ask_parks_survives_the_process_and_is_answered_once_from_another() {
    if let Some(database) = postgres_support::database() {
        parks_and_is_answered_from_another_process(&database.url);
    }
}

/// A chat job run on `store` parks on its question; the processes after it find it there,
/// refuse wrong answers, finish it with the right one, refuse a second, and read it back.
fn parks_and_is_answered_from_another_process(store: &str) {
    let flags = chat_flags();

    let run = maestro(
        store,
        &with(&["run", "chat", "--input", "What should I pack?"], &flags),
    );
    let shown = text(&run);
    assert!(run.status.success(), "{shown}");
    assert!(
        shown.contains("parked: waiting_human (input), resumes at movement chat"),
        "{shown}"
    );
    assert!(
        shown.contains("question: Where are you travelling to?"),
        "{shown}"
    );
    assert!(shown.contains("maestro jobs answer job-"), "{shown}");

    // The run's process is gone; the job is a row of the store.
    let waiting = jobs(store, "waiting_human");
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0]["wait_reason"], "input");
    let id = waiting[0]["id"].as_str().unwrap().to_owned();

    // The phase is the fold of the stored log: waiting for the user's input, with the question.
    let show = maestro(store, &["jobs", "show", &id]);
    let shown = text(&show);
    assert!(show.status.success(), "{shown}");
    assert!(shown.contains("phase     waiting_user/input"), "{shown}");
    assert!(
        shown.contains(r#"reason    {"kind":"input","message":"Where are you travelling to?"}"#),
        "{shown}"
    );

    let wrong = maestro(store, &with(&["jobs", "approve", &id], &flags));
    assert_eq!(wrong.status.code(), Some(2), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("an answer to a question"),
        "{}",
        text(&wrong)
    );
    // A session read from standard input (`-`) reaches the store as a login, which this wait
    // does not take; an empty one is refused before that.
    for (stdin, said) in [
        ("cookie=from-stdin\n", "an answer to a question"),
        ("\n", "the session is empty"),
    ] {
        let mut command = common::maestro_command();
        command
            .args(with(&["jobs", "login", &id, "-"], &flags))
            .arg("--store")
            .arg(store)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
        let login = child.wait_with_output().unwrap();
        assert_eq!(login.status.code(), Some(2), "{}", text(&login));
        assert!(text(&login).contains(said), "{said}: {}", text(&login));
    }

    let answer = maestro(store, &with(&["jobs", "answer", &id, "Lisbon"], &flags));
    let shown = text(&answer);
    assert!(answer.status.success(), "{shown}");
    assert!(shown.contains("\"answer\":\"Lisbon\""), "{shown}");
    assert!(shown.contains("completed: Packing list ready"), "{shown}");

    let again = maestro(store, &with(&["jobs", "answer", &id, "Porto"], &flags));
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(
        text(&again).contains("is completed, not waiting"),
        "{}",
        text(&again)
    );

    let show = maestro(store, &["jobs", "show", &id, "--json"]);
    assert!(show.status.success(), "{}", text(&show));
    let job: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(job["status"], "completed");
    assert_eq!(job["session"]["phase"], "done");
    assert!(job["session"]["waiting_reason"].is_null());
    let kinds: Vec<&str> = job["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"started"));
    assert!(
        kinds.contains(&"parked") && kinds.contains(&"resumed"),
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"finished"));
    let seqs: Vec<u64> = job["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[test]
fn an_answer_recorded_without_running_waits_for_resume() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let flags = chat_flags();
    assert!(
        maestro(&store, &with(&["run", "chat", "-i", "hi"], &flags))
            .status
            .success()
    );
    let id = jobs(&store, "waiting_human")[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let recorded = maestro(&store, &["jobs", "answer", &id, "Oslo", "--no-run"]);
    assert!(recorded.status.success(), "{}", text(&recorded));
    assert_eq!(jobs(&store, "pending").len(), 1);
    let resumed = maestro(&store, &with(&["jobs", "resume", &id], &flags));
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(jobs(&store, "completed").len(), 1);
}

#[test]
fn cancel_ends_a_parked_job() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let flags = chat_flags();
    assert!(
        maestro(&store, &with(&["run", "chat", "-i", "hi"], &flags))
            .status
            .success()
    );
    let id = jobs(&store, "waiting_human")[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancel = maestro(&store, &["jobs", "cancel", &id]);
    assert!(cancel.status.success(), "{}", text(&cancel));
    assert_eq!(jobs(&store, "cancelled").len(), 1);
    let late = maestro(&store, &with(&["jobs", "answer", &id, "too late"], &flags));
    assert_eq!(late.status.code(), Some(2));
}

#[test]
fn prune_deletes_ended_jobs_older_than_asked_and_keeps_waiting_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let flags = chat_flags();
    for _ in 0..2 {
        let run = maestro(&store, &with(&["run", "chat", "-i", "hi"], &flags));
        assert!(run.status.success(), "{}", text(&run));
    }
    let ended = jobs(&store, "waiting_human")[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        maestro(&store, &["jobs", "cancel", &ended])
            .status
            .success()
    );

    let bad = maestro(&store, &["jobs", "prune", "--older-than", "30 fortnights"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad).contains("`30 fortnights` is not an age"),
        "{}",
        text(&bad)
    );
    let recent = maestro(&store, &["jobs", "prune", "--older-than", "1h"]);
    assert!(
        text(&recent).contains("deleted 0 jobs"),
        "{}",
        text(&recent)
    );
    assert_eq!(jobs(&store, "cancelled").len(), 1);

    let all = maestro(&store, &["jobs", "prune", "--older-than", "0s"]);
    assert!(text(&all).contains("deleted 1 job that"), "{}", text(&all));
    assert!(jobs(&store, "cancelled").is_empty());
    assert_eq!(
        jobs(&store, "waiting_human").len(),
        1,
        "a waiting job stays"
    );
    let gone = maestro(&store, &["jobs", "show", &ended]);
    assert!(text(&gone).contains("no job"), "{}", text(&gone));
}

#[test]
fn setup_mistakes_are_usage_errors_that_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let pieces = repo().join("pieces").display().to_string();
    let no_model = maestro(
        &store,
        &[
            "run",
            "chat",
            "-i",
            "hi",
            "--plugins",
            artifacts::DIR,
            "--pieces",
            &pieces,
        ],
    );
    assert_eq!(no_model.status.code(), Some(2));
    assert!(
        text(&no_model).contains("no model: give --model"),
        "{}",
        text(&no_model)
    );

    let config = dir.path().join("maestro.toml");
    let run_with_config = |contents: &str| {
        std::fs::write(&config, contents).unwrap();
        maestro(
            &store,
            &[
                "run",
                "chat",
                "-i",
                "hi",
                "--config",
                config.to_str().unwrap(),
            ],
        )
    };
    let bad = run_with_config("plugins = \"p\"\nworkers = 4\n");
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).contains("maestro.toml:2:1"), "{}", text(&bad));
    assert!(text(&bad).contains("workers"), "{}", text(&bad));

    let zero = run_with_config("max_burst = 0\n");
    assert_eq!(zero.status.code(), Some(2));
    assert!(
        text(&zero).contains("maestro.toml: max_burst must be at least 1"),
        "{}",
        text(&zero)
    );
    let flag = maestro(&store, &["run", "chat", "-i", "hi", "--max-burst", "0"]);
    assert_eq!(flag.status.code(), Some(2), "{}", text(&flag));
    assert!(text(&flag).contains("--max-burst"), "{}", text(&flag));

    let unknown = maestro(
        &store,
        &[
            "run",
            "nosuch",
            "-i",
            "hi",
            "--model",
            "scripted:x.yaml",
            "--plugins",
            artifacts::DIR,
            "--pieces",
            &pieces,
        ],
    );
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown).contains("no piece named `nosuch`"),
        "{}",
        text(&unknown)
    );
}

#[test]
fn a_config_file_gives_every_choice_with_paths_relative_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo();
    let config = dir.path().join("maestro.toml");
    std::fs::write(
        &config,
        format!(
            "plugins = {:?}\npieces = {:?}\nstore = \"state/jobs.db\"\n\n[model]\nprovider = \"scripted\"\nname = {:?}\n",
            artifacts::DIR,
            repo.join("pieces").display().to_string(),
            repo.join("pieces/scripts/approval.yaml").display().to_string(),
        ),
    )
    .unwrap();
    let output = common::maestro_command()
        .args([
            "run",
            "approval",
            "-i",
            "Rotate the key",
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let shown = text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("waiting_human (tool_request)"), "{shown}");
    assert!(shown.contains("maestro jobs approve job-"), "{shown}");
    assert!(
        dir.path().join("state/jobs.db").is_file(),
        "the store sits beside the config"
    );
}

#[test]
fn a_policy_that_lets_a_plugin_write_the_plugin_folder_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[plugins.echo]\n[[plugins.echo.dirs]]\nhost = {:?}\nguest = \"/plugins\"\nwritable = true\n",
            artifacts::DIR
        ),
    )
    .unwrap();
    let flags = chat_flags();
    let mut args = with(&["run", "chat", "--input", "Hello"], &flags);
    let policy = policy.display().to_string();
    args.extend(["--policy", policy.as_str()]);
    let output = maestro(&store, &args);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let said = text(&output);
    assert!(
        said.contains("policy.toml:3:8: plugins.echo.dirs[0].host"),
        "{said}"
    );
    assert!(said.contains("covers the plugin folder"), "{said}");
    assert!(jobs(&store, "pending").is_empty() && jobs(&store, "completed").is_empty());
}
