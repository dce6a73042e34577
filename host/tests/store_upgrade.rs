//! A store written by an earlier maestro keeps its jobs after the upgrade. Each fixture in
//! `fixtures/` was made by a release, with its schema version in the file's name:
//!
//! ```sh
//! maestro run chat --input "What should I pack?" …        # parks on its question
//! maestro run chat --input "Packing for a week away" …    # parks, then
//! maestro jobs answer <id> Lisbon …                       # completes
//! maestro run approval --input "Rotate the staging API key" …  # parks on RequestTool
//! ```
//!
//! `store-schema-2.db` by the release before the conversation moved out of the job's state,
//! answering the second job before the third started; `store-schema-6.db` by the release
//! before a job's log became a chain, answering it after, so that the third job's save lies
//! between the second's two.

use std::path::{Path, PathBuf};
use std::process::Output;

mod cli_support;
mod common;

use cli_support::{maestro, scripted_flags, text, with};

use maestro::llm::Message;
use maestro::store::{JobStore, SqliteStore};
use serde_json::Value;

/// A store made by an earlier release, and its jobs.
struct Fixture {
    file: &'static str,
    version: usize,
    asked: &'static str,
    completed: &'static str,
    approval: &'static str,
}

const FIXTURES: [Fixture; 2] = [
    Fixture {
        file: "store-schema-2.db",
        version: 2,
        asked: "job-01a23be514c8719fb40f160d6e890387",
        completed: "job-01a23be514e4758b939d132be1f408da",
        approval: "job-01a23be515d67265b5ec7f2134fec2d9",
    },
    Fixture {
        file: "store-schema-6.db",
        version: 6,
        asked: "job-01a24ed7699976a9a303c59e952ce143",
        completed: "job-01a24ed769e372afb905d7c3674bb772",
        approval: "job-01a24ed76a0d72cca5c16993681c12d7",
    },
];

/// The schema version of this maestro.
const CURRENT: usize = 7;

/// The fixture, copied where the test may change it.
fn upgraded_copy(fixture: &Fixture) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(fixture.file),
        &store,
    )
    .unwrap();
    (dir, store)
}

fn succeeded(output: Output) -> String {
    let shown = text(&output);
    assert!(output.status.success(), "{shown}");
    shown
}

/// The first message of `id`'s conversation as loaded from `store`, and the roles of all.
fn conversation(store: &SqliteStore, id: &str) -> (Message, Vec<&'static str>) {
    let (job, _) = store.load(id).unwrap();
    let roles = job
        .conversation
        .iter()
        .map(|message| match message {
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
        })
        .collect();
    (job.conversation[0].clone(), roles)
}

fn user(text: &str) -> Message {
    Message::User { text: text.into() }
}

#[test]
fn store_migrate_upgrades_an_earlier_releases_store_once_and_says_so() {
    for fixture in &FIXTURES {
        let (_dir, store) = upgraded_copy(fixture);
        let first = succeeded(maestro(&store, &["store", "migrate"]));
        assert_eq!(
            first.trim(),
            format!(
                "store {}: schema version {CURRENT} (migrated from {})",
                store.display(),
                fixture.version
            )
        );
        let again = succeeded(maestro(&store, &["store", "migrate"]));
        assert_eq!(
            again.trim(),
            format!(
                "store {}: schema version {CURRENT}, up to date",
                store.display()
            )
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mistyped = dir.path().join("jobs-typo.db");
    let refused = maestro(&mistyped, &["store", "migrate"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert_eq!(
        text(&refused).trim(),
        format!(
            "error: no store at {}: there is nothing to migrate",
            mistyped.display()
        )
    );
    assert!(!mistyped.exists());
}

#[test]
fn an_earlier_releases_store_keeps_its_jobs_logs_and_conversations_and_its_parked_jobs_finish() {
    for fixture in &FIXTURES {
        keeps_its_jobs(fixture);
    }
}

fn keeps_its_jobs(fixture: &Fixture) {
    let Fixture {
        asked,
        completed,
        approval,
        ..
    } = *fixture;
    // Shown with a failure: which fixture it was.
    eprintln!("fixture {}", fixture.file);
    let (_dir, store) = upgraded_copy(fixture);
    // Opening it is the upgrade: any command does it.
    let listed: Vec<Value> =
        serde_json::from_slice(&maestro(&store, &["jobs", "list", "--json"]).stdout).unwrap();
    let statuses: Vec<(&str, &str, Option<&str>)> = listed
        .iter()
        .map(|job| {
            (
                job["id"].as_str().unwrap(),
                job["status"].as_str().unwrap(),
                job["wait_reason"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (approval, "waiting_human", Some("tool_request")),
            (completed, "completed", None),
            (asked, "waiting_human", Some("input")),
        ]
    );

    let shown: Value = serde_json::from_str(&succeeded(maestro(
        &store,
        &["jobs", "show", completed, "--json"],
    )))
    .unwrap();
    let seqs: Vec<u64> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=11).collect::<Vec<_>>());
    assert_eq!(shown["session"]["phase"], "done");
    assert_eq!(
        shown["result"],
        "Packing list ready for the destination you gave."
    );

    {
        let opened = SqliteStore::open(&store).unwrap();
        assert_eq!(
            conversation(&opened, completed),
            (
                user("Packing for a week away"),
                vec!["user", "assistant", "tool", "assistant", "tool"]
            )
        );
        assert_eq!(
            conversation(&opened, asked),
            (user("What should I pack?"), vec!["user", "assistant"])
        );
    }

    let chat = scripted_flags("chat.yaml");
    let answered = succeeded(maestro(
        &store,
        &with(&["jobs", "answer", asked, "Lisbon"], &chat),
    ));
    assert!(
        answered.contains("completed: Packing list ready for the destination you gave."),
        "{answered}"
    );
    let approval_flags = scripted_flags("approval.yaml");
    let approved = succeeded(maestro(
        &store,
        &with(&["jobs", "approve", approval], &approval_flags),
    ));
    assert!(
        approved.contains("completed: RotateKey was approved for staging"),
        "{approved}"
    );

    // The resumed jobs' events follow the ones written before the upgrade, numbered on.
    let opened = SqliteStore::open(&store).unwrap();
    for id in [asked, approval] {
        let events = opened.events(id, 0).unwrap();
        let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{id}");
        assert!(seqs.len() > 8, "{id}: {seqs:?}");
        assert!(
            matches!(
                events.last().map(|event| &event.event),
                Some(maestro::engine::JobEvent::Finished { .. })
            ),
            "{id}"
        );
    }
    // The resumed job's conversation is the stored one with the run's messages after it.
    assert_eq!(
        conversation(&opened, asked),
        (
            user("What should I pack?"),
            vec!["user", "assistant", "tool", "assistant", "tool"]
        )
    );
}
