//! Artifacts under review from the command line: `maestro run review` runs the job and its
//! worker until a human must act, `jobs show` prints the phase machine's phase and reason,
//! `jobs artifacts` the drafts, and `jobs revise` / `jobs accept` carry the review on to the end.

use std::path::Path;

mod cli_support;
mod common;

use cli_support::{maestro, scripted_flags as flags, text, with};

use serde_json::Value;

fn show(store: &Path, id: &str) -> (String, Value) {
    let shown = maestro(store, &["jobs", "show", id]);
    assert!(shown.status.success(), "{}", text(&shown));
    let json = maestro(store, &["jobs", "show", id, "--json"]);
    assert!(json.status.success(), "{}", text(&json));
    (text(&shown), serde_json::from_slice(&json.stdout).unwrap())
}

fn root_job(store: &Path) -> String {
    let output = maestro(store, &["jobs", "list", "--json"]);
    let jobs: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    jobs.iter()
        .find(|job| job["parent"].is_null())
        .and_then(|job| job["id"].as_str())
        .expect("a top-level job")
        .to_owned()
}

#[test]
fn a_review_parks_in_review_artifact_and_accept_lets_it_finish() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let flags = flags("review.yaml");

    let run = maestro(
        &store,
        &with(&["run", "review", "--input", "Tides of the Tagus"], &flags),
    );
    let shown = text(&run);
    assert!(run.status.success(), "{shown}");
    // The worker ran in the same process and handed in its draft.
    assert!(shown.contains("artifact art-"), "{shown}");
    assert!(
        shown.contains("parked: waiting_human (review_artifact)"),
        "{shown}"
    );
    assert!(shown.contains("maestro jobs accept job-"), "{shown}");
    let id = root_job(&store);

    let (shown, json) = show(&store, &id);
    assert!(
        shown.contains("phase     waiting_user/review_artifact"),
        "{shown}"
    );
    let artifact = json["session"]["waiting_reason"]["artifact_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(json["session"]["artifacts"][0]["status"], "under_review");
    assert_eq!(json["session"]["artifacts"][0]["fact"], false);
    assert_eq!(json["session"]["kept_session_disagrees"], false);

    let listed = maestro(&store, &["jobs", "artifacts", &id]);
    let listed = text(&listed);
    assert!(
        listed.contains(&artifact) && listed.contains("under_review"),
        "{listed}"
    );
    assert!(listed.contains("two high tides a day"), "{listed}");

    // A revision: the worker drafts again, and the job waits on the new version.
    let revise = maestro(
        &store,
        &with(&["jobs", "revise", &id, "Add the spring tides."], &flags),
    );
    assert!(revise.status.success(), "{}", text(&revise));
    let (shown, json) = show(&store, &id);
    assert!(
        shown.contains("phase     waiting_user/review_artifact"),
        "{shown}"
    );
    let revised = json["session"]["waiting_reason"]["artifact_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(revised, artifact);

    let accept = maestro(&store, &with(&["jobs", "accept", &id], &flags));
    let said = text(&accept);
    assert!(accept.status.success(), "{said}");
    assert!(said.contains("completed:"), "{said}");
    let (shown, json) = show(&store, &id);
    assert!(shown.contains("phase     done"), "{shown}");
    let facts: Vec<&Value> = json["session"]["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|artifact| artifact["fact"] == true)
        .collect();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0]["id"], revised.as_str());
    assert!(facts[0]["body"].as_str().unwrap().contains("Spring tides"));

    // A second verdict is refused: the job waits for nothing.
    let again = maestro(&store, &with(&["jobs", "accept", &id], &flags));
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("not waiting"), "{}", text(&again));
}

#[test]
fn a_job_without_a_piece_waits_for_a_choice_and_its_intake() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let flags = flags("commission.yaml");
    let run = maestro(
        &store,
        &with(&["run", "--input", "A report, please"], &flags),
    );
    let shown = text(&run);
    assert!(run.status.success(), "{shown}");
    assert!(
        shown.contains("parked: waiting_human (skill_selection)"),
        "{shown}"
    );
    assert!(shown.contains("commission"), "{shown}");
    let id = root_job(&store);

    let choose = maestro(
        &store,
        &with(&["jobs", "choose", &id, "commission"], &flags),
    );
    let shown = text(&choose);
    assert!(choose.status.success(), "{shown}");
    assert!(shown.contains("parked: waiting_human (intake)"), "{shown}");
    assert!(shown.contains("topic (required)"), "{shown}");

    let missing = maestro(&store, &with(&["jobs", "intake", &id], &flags));
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        text(&missing).contains("needs a value for the required field: topic"),
        "{}",
        text(&missing)
    );
    let filled = maestro(
        &store,
        &with(
            &["jobs", "intake", &id, "--slot", "topic=Lisbon trams"],
            &flags,
        ),
    );
    let shown = text(&filled);
    assert!(filled.status.success(), "{shown}");
    assert!(
        shown.contains("parked: waiting_human (tool_request)"),
        "{shown}"
    );
    let (shown, _) = show(&store, &id);
    assert!(
        shown.contains("phase     waiting_user/approve_step"),
        "{shown}"
    );
}

#[test]
fn accepting_the_first_draft_lets_the_review_finish() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db");
    let flags = flags("review.yaml");
    let run = maestro(
        &store,
        &with(&["run", "review", "--input", "Tides of the Tagus"], &flags),
    );
    assert!(run.status.success(), "{}", text(&run));
    let id = root_job(&store);
    let (shown, _) = show(&store, &id);
    assert!(
        shown.contains("phase     waiting_user/review_artifact"),
        "{shown}"
    );
    let accept = maestro(&store, &with(&["jobs", "accept", &id], &flags));
    let said = text(&accept);
    assert!(accept.status.success(), "{said}");
    assert!(said.contains("completed:"), "{said}");
    let (shown, json) = show(&store, &id);
    assert!(shown.contains("phase     done"), "{shown}");
    let facts = json["session"]["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|artifact| artifact["fact"] == true)
        .count();
    assert_eq!(facts, 1);
}
