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
