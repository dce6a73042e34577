//! Two `maestro serve` processes on one PostgreSQL database, as two nodes of a cluster: a job
//! started on one is seen, answered and streamed on the other, each event once and in order,
//! whichever node runs it.

mod common;
mod postgres_support;
mod serve_support;

use reqwest::Method;
use serde_json::json;
use serve_support::{APPROVAL_SCRIPT, ServerFolder, TestServer, approval_piece, read_events};

#[tokio::test(flavor = "multi_thread")]
async fn two_nodes_share_jobs_answers_and_event_streams() {
    let Some(database) = postgres_support::database() else {
        return;
    };
    let node = || {
        TestServer::start(
            ServerFolder::new(
                &[approval_piece()],
                APPROVAL_SCRIPT,
                &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
                true,
            )
            .with_store(&database.url),
        )
    };
    let (a, b) = (node(), node());
    let id = a.start_job("approval", "Rotate the staging API key").await;

    // Node B streams the events of a job started on node A, wherever it runs, until it parks.
    let events = b
        .request(Method::GET, &format!("/v1/jobs/{id}/events"))
        .send()
        .await
        .unwrap();
    let before = read_events(events, |name, _| name == "parked").await;
    let seqs: Vec<String> = before.iter().map(|(seq, _, _)| seq.clone()).collect();
    let expected: Vec<String> = (1..=before.len()).map(|n| n.to_string()).collect();
    assert_eq!(seqs, expected, "every event once, in order");

    // Node B's inbox shows it, and B's approval is the one that counts: A refuses a second.
    let inbox = b.get("/v1/inbox").await;
    assert_eq!(inbox["jobs"][0]["id"], id.as_str(), "{inbox}");
    let wait = inbox["jobs"][0]["wait"]["id"].as_u64().unwrap();
    let (status, body) = b
        .post(&format!("/v1/jobs/{id}/approve"), json!({ "wait": wait }))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = a
        .post(&format!("/v1/jobs/{id}/approve"), json!({ "wait": wait }))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("not_waiting")),
        "{body}"
    );

    // Node A streams the rest from where B's stream stopped: each event once, then the end.
    let last = before.last().unwrap().0.clone();
    let rest = a
        .request(Method::GET, &format!("/v1/jobs/{id}/events"))
        .header("Last-Event-ID", &last)
        .send()
        .await
        .unwrap();
    let after = read_events(rest, |name, _| name == "end").await;
    let first_new: u64 = after[0].0.parse().unwrap();
    assert_eq!(first_new, last.parse::<u64>().unwrap() + 1);
    let (_, end, end_data) = after.last().unwrap();
    assert_eq!(
        (end.as_str(), &end_data["status"]),
        ("end", &json!("completed"))
    );
    for node in [&a, &b] {
        assert_eq!(
            node.get(&format!("/v1/jobs/{id}")).await["status"],
            "completed"
        );
    }
}

/// `component` with a custom section appended: the same tool, another version (content hash).
fn another_version_of(component: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(component).unwrap();
    let (name, payload) = (b"maestro-test", b"another build");
    let size = 1 + name.len() + payload.len();
    bytes.extend([0, size as u8, name.len() as u8]);
    bytes.extend(name);
    bytes.extend(payload);
    bytes
}

/// Two nodes serve RequestTool in two versions. The job parks on whichever node runs it, on
/// that node's version, and that node goes away; the other node, which never loaded that
/// version (it started before the park, so not even at its start), resumes the call on exactly
/// that version, fetched from the shared store when it claims the job.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_parked_on_one_node_resumes_on_another_that_never_loaded_its_version() {
    let Some(database) = postgres_support::database() else {
        return;
    };
    let folder = || {
        ServerFolder::new(
            &[approval_piece()],
            APPROVAL_SCRIPT,
            &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
            true,
        )
        .with_store(&database.url)
    };
    let second = folder();
    let file = second.path("plugins").join("request_tool.wasm");
    std::fs::write(&file, another_version_of(maestro_plugins::REQUEST_TOOL)).unwrap();
    let mut nodes = [
        Some(TestServer::start(folder())),
        Some(TestServer::start(second)),
    ];
    let mut versions = Vec::new();
    for node in nodes.iter().flatten() {
        let serving = node.plugin("request_tool").await;
        versions.push(serving["content_hash"].as_str().unwrap().to_owned());
    }
    assert_ne!(versions[0], versions[1]);

    let starter = nodes[0].as_ref().unwrap();
    let id = starter
        .start_job("approval", "Rotate the staging API key")
        .await;
    let parked = starter
        .wait_for(&id, "parked", |job| job["status"] == "waiting_human")
        .await;
    let wait = parked["wait"]["id"].as_u64().unwrap();
    let store = maestro::store::StoreAddress::parse(&database.url)
        .open()
        .unwrap()
        .0;
    let pinned = store
        .load(&id)
        .unwrap()
        .0
        .parked_plugin()
        .unwrap()
        .content_hash
        .clone();
    let parked_on = versions
        .iter()
        .position(|v| *v == pinned)
        .expect("a node's version");
    drop(nodes[parked_on].take());
    let other = nodes[1 - parked_on].take().unwrap();

    let (status, body) = other
        .post(&format!("/v1/jobs/{id}/approve"), json!({ "wait": wait }))
        .await;
    assert_eq!(status, 200, "{body}");
    let done = other.wait_for(&id, "ended", serve_support::has_ended).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", other.log());
    // The parked call itself resumed and answered, on the other node.
    let stream = other
        .request(Method::GET, &format!("/v1/jobs/{id}/events"))
        .send()
        .await
        .unwrap();
    let events = read_events(stream, |name, _| name == "end").await;
    let resumed = events
        .iter()
        .position(|(_, name, _)| name == "resumed")
        .expect("the job resumed");
    let answered = events[resumed..]
        .iter()
        .find(|(_, name, data)| name == "tool_answered" && data["tool"] == "RequestTool")
        .unwrap_or_else(|| panic!("the parked RequestTool call was answered: {events:?}"));
    assert_eq!(
        answered.2["is_error"],
        false,
        "{answered:?}\n{}",
        other.log()
    );
    // On exactly the pinned version, which came from the store into this node's archive; its
    // own version still serves new calls.
    let archived = other
        .folder
        .path("plugin-versions")
        .join(format!("{pinned}.wasm"));
    assert_eq!(
        maestro::plugin::content_hash(&std::fs::read(&archived).unwrap()),
        pinned
    );
    let serving = other.plugin("request_tool").await;
    assert_eq!(serving["content_hash"], versions[1 - parked_on].as_str());
}
