//! Hot loading under load: a plugin is replaced 50 times (by rename and by in-place rewrite)
//! while jobs call it through a running `maestro serve`. No call fails, every call is answered
//! by a version that was written, the calls of one run never mix versions, and once the folder
//! settles the last version answers. And a parked call keeps its version: it resumes after its
//! plugin was removed from the folder or replaced by another version, and after a restart too
//! (from the archive).

mod common;
mod serve_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use maestro::engine::JobEvent;
use maestro::store::{JobStore, SqliteStore};
use serde_json::Value;
use serve_support::{ServerFolder, TestServer, has_ended};

const REPLACEMENTS: u16 = 50;
const CALLS_PER_JOB: usize = 3;

const PIECE: &str = "name: stamp\ninitial_movement: work\nmax_movements: 1\nmovements:\n  - name: work\n    instructions: Ask Stamp three times, then complete.\n    tools: [Stamp, complete]\n";

const SCRIPT: &str = r#"
turns:
  - tool_calls: [{ name: Stamp, arguments: {} }]
  - tool_calls: [{ name: Stamp, arguments: {} }]
  - tool_calls: [{ name: Stamp, arguments: {} }]
  - tool_calls: [{ name: complete, arguments: { status: done, summary: "stamped" } }]
"#;

/// The Stamp answers of a finished job, in order, with whether each was an error.
fn stamp_answers(store: &SqliteStore, id: &str) -> Vec<(String, bool)> {
    answers_of(store, id, "Stamp")
}

/// The answers `wanted` gave a job, in order, with whether each was an error.
fn answers_of(store: &SqliteStore, id: &str, wanted: &str) -> Vec<(String, bool)> {
    store
        .events(id, 0)
        .unwrap()
        .into_iter()
        .filter_map(|stored| match stored.event {
            JobEvent::ToolAnswered {
                tool,
                content,
                is_error,
                ..
            } if tool == wanted => Some((content, is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn replacing_a_plugin_50_times_under_load_fails_no_call_and_never_mixes_versions() {
    let folder = ServerFolder::new(
        &[("stamp.yaml", PIECE)],
        SCRIPT,
        &[maestro_plugins::COMPLETE],
        false,
    );
    let plugin = folder.path("plugins/stamp.wasm");
    std::fs::write(&plugin, maestro_examples::stamp_version(0)).unwrap();
    let server = TestServer::start(folder);
    let store = SqliteStore::open(server.folder.path("jobs.db")).unwrap();

    let first = server.start_job("stamp", "before any reload").await;
    server
        .wait_for(&first, "finished", |job| job["status"] == "completed")
        .await;

    // The writer: versions 1..=50, every 30 ms, half by atomic rename, half rewritten in place
    // (so the watcher also sees empty and partial files, which must never serve).
    let writer = {
        let plugin = plugin.clone();
        let staging = server.folder.path("stamp.staging");
        std::thread::spawn(move || {
            for version in 1..=REPLACEMENTS {
                let bytes = maestro_examples::stamp_version(version);
                if version % 2 == 0 {
                    std::fs::write(&staging, &bytes).unwrap();
                    std::fs::rename(&staging, &plugin).unwrap();
                } else {
                    std::fs::write(&plugin, &bytes).unwrap();
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    };

    // The load: jobs started all through the replacements, a few at a time.
    let mut ids = vec![first];
    while !writer.is_finished() {
        for _ in 0..4 {
            ids.push(server.start_job("stamp", "under reload").await);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    writer.join().unwrap();

    // Once the folder settles, the last version serves.
    let last = format!("stamp-v{REPLACEMENTS:03}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut settled = false;
    while Instant::now() < deadline {
        let id = server.start_job("stamp", "after the reloads").await;
        let job = server.wait_for(&id, "ended", has_ended).await;
        ids.push(id.clone());
        assert_eq!(job["status"], "completed", "{job}");
        if stamp_answers(&store, &id)[0].0 == last {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(settled, "version {last} never served\n{}", server.log());

    let written: BTreeSet<String> = (0..=REPLACEMENTS)
        .map(|version| format!("stamp-v{version:03}"))
        .collect();
    let mut seen = BTreeSet::new();
    for id in &ids {
        let job = server.wait_for(id, "ended", has_ended).await;
        assert_eq!(
            job["status"],
            "completed",
            "job {id}: {job}\n{}",
            server.log()
        );
        let answers = stamp_answers(&store, id);
        assert_eq!(answers.len(), CALLS_PER_JOB, "job {id}: {answers:?}");
        for (content, is_error) in &answers {
            assert!(!is_error, "job {id}: a call failed: {content}");
            assert!(
                written.contains(content),
                "job {id}: unknown answer {content}"
            );
        }
        assert!(
            answers.iter().all(|(content, _)| content == &answers[0].0),
            "job {id} mixed versions in one run: {answers:?}"
        );
        seen.insert(answers[0].0.clone());
    }
    assert!(
        seen.contains("stamp-v000") && seen.contains(&last),
        "{seen:?}"
    );
    let stamp = server.plugin("stamp").await;
    assert_eq!(stamp["status"], "serving", "{stamp}");
    eprintln!(
        "{} jobs, {} calls, answered by {} versions",
        ids.len(),
        ids.len() * CALLS_PER_JOB,
        seen.len()
    );
}

const CONFIRM_PIECE: &str = "name: confirm\ninitial_movement: ask\nmax_movements: 1\nmovements:\n  - name: ask\n    instructions: Confirm with the user, then complete.\n    tools: [Confirm, complete]\n";

const CONFIRM_SCRIPT: &str = r#"
turns:
  - tool_calls: [{ name: Confirm, arguments: {} }]
  - tool_calls: [{ name: complete, arguments: { status: done, summary: "confirmed" } }]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_parked_call_resumes_on_its_version_after_removal_and_restart() {
    let server = TestServer::start(ServerFolder::new(
        &[("confirm.yaml", CONFIRM_PIECE)],
        CONFIRM_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_examples::CONFIRM],
        false,
    ));
    let parked = |job: &Value| job["status"] == "waiting_human";
    let first = server.start_job("confirm", "first").await;
    let second = server.start_job("confirm", "second").await;
    server.wait_for(&first, "parked", parked).await;
    server.wait_for(&second, "parked", parked).await;

    std::fs::remove_file(server.folder.path("plugins/confirm.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let confirm = server.plugin("confirm").await;
        if confirm["status"] == "removed" {
            break;
        }
        assert!(Instant::now() < deadline, "never removed: {confirm}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // New calls no longer reach it: a new job's call is answered as an unknown tool.
    let third = server.start_job("confirm", "third").await;
    server.wait_for(&third, "ended", has_ended).await;
    let store = SqliteStore::open(server.folder.path("jobs.db")).unwrap();
    let answered_unknown = store.events(&third, 0).unwrap().into_iter().any(|stored| {
        matches!(stored.event, JobEvent::ToolAnswered { tool, is_error: true, content, .. }
            if tool == "Confirm"
                && content == "Tool `Confirm` is not available in movement `ask`. Available: `Confirm`, `complete`.")
    });
    assert!(answered_unknown, "a removed plugin must take no new call");

    // The parked call resumes on the version that parked it.
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{first}/answer"),
            serde_json::json!({ "text": "yes" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let done = server.wait_for(&first, "ended", has_ended).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.log());
    let confirmed = |store: &SqliteStore, id: &str| {
        store.events(id, 0).unwrap().into_iter().any(|stored| {
            matches!(&stored.event, JobEvent::ToolAnswered { tool, content, is_error: false, .. }
                if tool == "Confirm" && content == "yes")
        })
    };
    assert!(confirmed(&store, &first));

    // After a restart the folder no longer has it: the archive does.
    let server = server.restart();
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{second}/answer"),
            serde_json::json!({ "text": "yes" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let done = server.wait_for(&second, "ended", has_ended).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.log());
    assert!(confirmed(&store, &second));
    let log = server.log();
    assert!(
        log.contains(
            "movements[0].tools[0]: no known plugin provides tool `Confirm` \
             (until a plugin offers it, calls to it fail)"
        ),
        "the missing tool is reported at start:\n{log}"
    );
    assert!(
        !log.contains("cannot resume"),
        "the parked call's version was restored from the archive:\n{log}"
    );
}

const STAMP_ASK_PIECE: &str = "name: stamp_ask\ninitial_movement: ask\nmax_movements: 1\nmovements:\n  - name: ask\n    instructions: Ask StampAsk, then complete.\n    tools: [StampAsk, complete]\n";

const STAMP_ASK_SCRIPT: &str = r#"
turns:
  - tool_calls: [{ name: StampAsk, arguments: {} }]
  - tool_calls: [{ name: complete, arguments: { status: done, summary: "stamped" } }]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_parked_call_resumes_on_its_exact_version_after_its_plugin_file_is_replaced() {
    let folder = ServerFolder::new(
        &[("stamp_ask.yaml", STAMP_ASK_PIECE)],
        STAMP_ASK_SCRIPT,
        &[maestro_plugins::COMPLETE],
        false,
    );
    let plugin = folder.path("plugins/stamp.wasm");
    std::fs::write(&plugin, maestro_examples::stamp_version(1)).unwrap();
    let server = TestServer::start(folder);
    let parked = |job: &Value| job["status"] == "waiting_human";
    let before = server.start_job("stamp_ask", "parked on version 1").await;
    server.wait_for(&before, "parked", parked).await;

    // Version 2 replaces the file (by rename, as an installer does) and becomes the serving one.
    let replacement = maestro_examples::stamp_version(2);
    let replacement_hash = maestro::plugin::content_hash(&replacement);
    let staging = server.folder.path("stamp.staging");
    std::fs::write(&staging, &replacement).unwrap();
    std::fs::rename(&staging, &plugin).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stamp = server.plugin("stamp").await;
        if stamp["content_hash"] == replacement_hash.as_str() {
            break;
        }
        assert!(Instant::now() < deadline, "never replaced: {stamp}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = server.start_job("stamp_ask", "parked on version 2").await;
    server.wait_for(&after, "parked", parked).await;

    for id in [&before, &after] {
        let (status, body) = server
            .post(
                &format!("/v1/jobs/{id}/answer"),
                serde_json::json!({ "text": "any" }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let store = SqliteStore::open(server.folder.path("jobs.db")).unwrap();
    for (id, version) in [(&before, "stamp-v001"), (&after, "stamp-v002")] {
        let done = server.wait_for(id, "ended", has_ended).await;
        assert_eq!(done["status"], "completed", "{done}\n{}", server.log());
        assert_eq!(
            answers_of(&store, id, "StampAsk"),
            [(version.to_string(), false)],
            "job {id}"
        );
    }
}
