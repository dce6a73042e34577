//! A store written by an earlier maestro keeps its jobs after the upgrade: the fixture
//! `fixtures/store-schema-2.db` was made by the release before the conversation moved out of the
//! job's state (schema version 2), with:
//!
//! ```sh
//! maestro run chat --input "What should I pack?" …        # parks on its question
//! maestro run chat --input "Packing for a week away" …    # parks, then
//! maestro jobs answer <id> Lisbon …                       # completes
//! maestro run approval --input "Rotate the staging API key" …  # parks on RequestTool
//! ```

use std::path::{Path, PathBuf};
use std::process::Output;

mod cli_support;
mod common;

use cli_support::{maestro, scripted_flags, text, with};

use maestro::llm::Message;
use maestro::store::{JobStore, SqliteStore};
use serde_json::Value;

const ASKED: &str = "job-01a23be514c8719fb40f160d6e890387";
const COMPLETED: &str = "job-01a23be514e4758b939d132be1f408da";
const APPROVAL: &str = "job-01a23be515d67265b5ec7f2134fec2d9";

/// The fixture, copied where the test may change it.
fn upgraded_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-schema-2.db"),
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
fn store_migrate_upgrades_a_second_schema_store_once_and_says_so() {
    let (_dir, store) = upgraded_copy();
    let first = succeeded(maestro(&store, &["store", "migrate"]));
    assert_eq!(
        first.trim(),
        format!(
            "store {}: schema version 6 (migrated from 2)",
            store.display()
        )
    );
    let again = succeeded(maestro(&store, &["store", "migrate"]));
    assert_eq!(
        again.trim(),
        format!("store {}: schema version 6, up to date", store.display())
    );
    let mistyped = store.with_file_name("jobs-typo.db");
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
fn a_second_schema_store_keeps_its_jobs_logs_and_conversations_and_its_parked_jobs_finish() {
    let (_dir, store) = upgraded_copy();
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
            (APPROVAL, "waiting_human", Some("tool_request")),
            (COMPLETED, "completed", None),
            (ASKED, "waiting_human", Some("input")),
        ]
    );

    let shown: Value = serde_json::from_str(&succeeded(maestro(
        &store,
        &["jobs", "show", COMPLETED, "--json"],
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
            conversation(&opened, COMPLETED),
            (
                user("Packing for a week away"),
                vec!["user", "assistant", "tool", "assistant", "tool"]
            )
        );
        assert_eq!(
            conversation(&opened, ASKED),
            (user("What should I pack?"), vec!["user", "assistant"])
        );
    }

    let chat = scripted_flags("chat.yaml");
    let answered = succeeded(maestro(
        &store,
        &with(&["jobs", "answer", ASKED, "Lisbon"], &chat),
    ));
    assert!(
        answered.contains("completed: Packing list ready for the destination you gave."),
        "{answered}"
    );
    let approval = scripted_flags("approval.yaml");
    let approved = succeeded(maestro(
        &store,
        &with(&["jobs", "approve", APPROVAL], &approval),
    ));
    assert!(
        approved.contains("completed: RotateKey was approved for staging"),
        "{approved}"
    );

    // The resumed jobs' events follow the ones written before the upgrade, numbered on.
    let opened = SqliteStore::open(&store).unwrap();
    for id in [ASKED, APPROVAL] {
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
        conversation(&opened, ASKED),
        (
            user("What should I pack?"),
            vec!["user", "assistant", "tool", "assistant", "tool"]
        )
    );
}
