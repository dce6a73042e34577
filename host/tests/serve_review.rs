//! The seed's typical path through the HTTP API of a real `maestro serve`: a job started without
//! a piece, the piece chosen, its intake filled in, the worker approved, the worker's question
//! answered at the parent, its draft sent back for a revision and the new version accepted —
//! each step's phase and reason read back from `GET /v1/jobs/{id}`, stale and wrong verdicts
//! refused, the accepted artifact listed as a fact.

mod common;
mod serve_support;

use serde_json::{Value, json};
use serve_support::{ServerFolder, TestServer};

fn pieces() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "commission.yaml",
            include_str!("../../pieces/commission.yaml"),
        ),
        ("report.yaml", include_str!("../../pieces/report.yaml")),
        ("review.yaml", include_str!("../../pieces/review.yaml")),
    ]
}

fn server() -> TestServer {
    TestServer::start(ServerFolder::new(
        &pieces(),
        include_str!("../../pieces/scripts/commission.yaml"),
        &[
            maestro_plugins::COMPLETE,
            maestro_plugins::HAND_IN,
            maestro_plugins::RUN_WORKER,
        ],
        true,
    ))
}

/// Waits until the job waits for a human with `reason` (as the phase machine calls it).
async fn until_waiting(server: &TestServer, id: &str, reason: &str) -> Value {
    server
        .wait_for(id, reason, |job| {
            job["phase"] == "waiting_user"
                && job["waiting_reason"]["kind"] == reason
                && job["status"] == "waiting_human"
        })
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typical_path_walks_through_the_http_api() {
    let server = server();
    let (status, job) = server
        .post("/v1/jobs", json!({ "input": "A report for the council." }))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();

    let job = until_waiting(&server, &id, "skill_selection").await;
    let offered: Vec<&str> = job["waiting_reason"]["available_skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|skill| skill["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["commission", "report", "review"]);
    let wait = job["wait"]["id"].clone();
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/choose"),
            json!({ "piece": "nope", "wait": wait }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("wrong_answer")),
        "{body}"
    );
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/choose"),
            json!({ "piece": "commission", "wait": wait }),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let job = until_waiting(&server, &id, "intake").await;
    assert_eq!(job["piece"], "commission");
    assert_eq!(job["wait"]["request"]["fields"][0]["name"], "topic");
    let wait = job["wait"]["id"].clone();
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/intake"),
            json!({ "slots": { "topic": "Lisbon trams" }, "wait": wait }),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let job = until_waiting(&server, &id, "approve_step").await;
    assert_eq!(job["wait"]["asked_by"], "piece");
    assert_eq!(job["wait"]["request"]["tool"], "RunWorker");
    let wait = job["wait"]["id"].clone();
    let (status, body) = server
        .post(&format!("/v1/jobs/{id}/approve"), json!({ "wait": wait }))
        .await;
    assert_eq!(status, 200, "{body}");

    let job = until_waiting(&server, &id, "worker_questions").await;
    let worker = job["waiting_reason"]["worker_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        job["waiting_reason"]["questions"],
        json!(["Who will read the report on the Lisbon trams?"])
    );
    // The worker is one of the jobs this one started.
    assert_eq!(job["children"], json!([worker]));
    // The inbox shows the parent, not the worker whose question it carries.
    let inbox = server.get("/v1/inbox").await;
    let waiting: Vec<&str> = inbox["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["id"].as_str().unwrap())
        .collect();
    assert_eq!(waiting, [id.as_str()]);
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{worker}/answer"),
            json!({ "text": "me" }),
        )
        .await;
    assert_eq!(status, 422, "a worker is answered at its parent: {body}");
    let wait = job["wait"]["id"].clone();
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/answer"),
            json!({ "text": "The city council", "wait": wait }),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let job = until_waiting(&server, &id, "review_artifact").await;
    let first = job["wait"]["artifact"]["id"].as_str().unwrap().to_owned();
    assert_eq!(job["waiting_reason"]["artifact_id"], first.as_str());
    assert_eq!(job["wait"]["artifact"]["status"], "under_review");
    assert!(
        job["wait"]["artifact"]["body"]
            .as_str()
            .unwrap()
            .contains("Five lines")
    );
    let wait = job["wait"]["id"].clone();
    // A verdict names the wait it settles: an older one is stale.
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/accept"),
            json!({ "wait": wait.as_u64().unwrap() - 1 }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("stale_answer")),
        "{body}"
    );
    let (status, body) = server
        .post(&format!("/v1/jobs/{id}/revise"), json!({ "wait": wait }))
        .await;
    assert_eq!(status, 200, "{body}");

    let job = until_waiting(&server, &id, "revision").await;
    let wait = job["wait"]["id"].clone();
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/revise"),
            json!({ "wait": wait, "instruction": "Name the lines." }),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let job = server
        .wait_for(&id, "the second draft under review", |job| {
            job["waiting_reason"]["kind"] == "review_artifact"
                && job["waiting_reason"]["artifact_id"] != first.as_str()
        })
        .await;
    let second = job["waiting_reason"]["artifact_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(job["wait"]["artifact"]["revises"], first.as_str());
    let wait = job["wait"]["id"].clone();
    let (status, body) = server
        .post(&format!("/v1/jobs/{id}/accept"), json!({ "wait": wait }))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = server
        .post(&format!("/v1/jobs/{id}/accept"), json!({ "wait": wait }))
        .await;
    assert_eq!(status, 409, "a verdict is given once: {body}");

    let job = server
        .wait_for(&id, "completed", |job| job["status"] == "completed")
        .await;
    assert_eq!(job["phase"], "done");
    let listed = server.get(&format!("/v1/jobs/{id}/artifacts")).await;
    let artifacts = listed["artifacts"].as_array().unwrap();
    let status_of = |artifact: &str| {
        artifacts
            .iter()
            .find(|a| a["id"] == artifact)
            .map(|a| (a["status"].clone(), a["fact"].clone()))
    };
    assert_eq!(
        status_of(&first),
        Some((json!("revision_requested"), json!(false)))
    );
    assert_eq!(status_of(&second), Some((json!("accepted"), json!(true))));
    let worker_job = server.get(&format!("/v1/jobs/{worker}")).await;
    assert_eq!(worker_job["status"], "completed");
    assert_eq!(worker_job["parent"], id.as_str());
}
