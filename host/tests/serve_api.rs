//! `maestro serve` through its HTTP API, as a client sees it: bearer auth, a job that parks on
//! a tool approval, its live event stream (and a reconnect that misses nothing), the inbox, an
//! approval that resumes it and a second one that is refused, JSON errors, and plugin upload and
//! removal.

mod common;
mod serve_support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use serve_support::{
    APPROVAL_SCRIPT, ServerFolder, TOKEN, TestServer, approval_piece, read_events,
};

fn approval_server() -> TestServer {
    TestServer::start(ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
        true,
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_parks_streams_its_events_and_resumes_once_approved() {
    let server = approval_server();

    // Without a token, or with a wrong one: 401 with a JSON error, and no data.
    let response = server
        .http
        .get(server.url("/v1/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let response = server
        .http
        .get(server.url("/v1/jobs"))
        .bearer_auth("not-the-token-at-all")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // The page and the API description are public; they hold no data.
    let page = server.http.get(server.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("maestro — inbox"));
    let openapi: Value = server
        .http
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(openapi["paths"]["/v1/jobs/{id}/events"].is_object());

    let health = server.get("/v1/health").await;
    assert_eq!(health["status"], "ok");
    assert_eq!(health["plugins"], 2);
    let pieces = server.get("/v1/pieces").await;
    assert_eq!(pieces["pieces"][0]["name"], "approval");
    assert_eq!(
        pieces["pieces"][0]["movements"],
        json!(["prepare", "apply"])
    );

    let id = server
        .start_job("approval", "Rotate the staging API key")
        .await;
    let events = server
        .request(Method::GET, &format!("/v1/jobs/{id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let before = read_events(events, |name, _| name == "parked").await;
    let names: Vec<&str> = before.iter().map(|(_, name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"started"), "{names:?}");
    assert!(names.contains(&"tool_called"), "{names:?}");
    for (index, (seq, _, data)) in before.iter().enumerate() {
        assert_eq!(
            seq,
            &(index + 1).to_string(),
            "ids are the log's sequence numbers"
        );
        assert_eq!(data["seq"], index + 1);
    }

    // The inbox shows exactly what a human must decide, with the exact arguments.
    let inbox = server.get("/v1/inbox").await;
    let waiting = &inbox["jobs"][0];
    assert_eq!(waiting["id"], id.as_str());
    assert_eq!(waiting["phase"], "waiting_user");
    assert_eq!(waiting["waiting_reason"]["kind"], "approve_step");
    assert_eq!(waiting["movement"], "apply");
    let wait = &waiting["wait"];
    assert_eq!(wait["reason"], "tool_request");
    assert_eq!(wait["request"]["kind"], "tool_approval");
    assert_eq!(wait["request"]["tool"], "RotateKey");
    assert_eq!(
        wait["asked_by"], "tool",
        "RequestTool's own request, not the policy's gate"
    );
    let arguments: Value =
        serde_json::from_str(wait["request"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        arguments,
        json!({ "service": "staging", "revoke_old_after_minutes": 60 })
    );
    let wait_id = wait["id"].as_u64().unwrap();

    // Its piece, drawn, with the movement it waits in marked; under a policy that runs nothing.
    let graph = server
        .http
        .get(server.url(&format!("/v1/jobs/{id}/graph")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(graph.status(), 200);
    assert_eq!(graph.headers()["content-type"], "image/svg+xml");
    let policy = graph.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    let svg = graph.text().await.unwrap();
    assert!(
        svg.contains(r#"class="node movement current" data-movement="apply""#),
        "{svg}"
    );
    let (status, _) = server
        .call(reqwest::Method::GET, "/v1/jobs/job-none/graph", None)
        .await;
    assert_eq!(status, 404);

    let listed = server.get("/v1/jobs?status=waiting_human").await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1);

    // An answer of the wrong kind, or for another wait, changes nothing.
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/login"),
            json!({ "session": "cookie=1" }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("wrong_answer")),
        "{body}"
    );
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/approve"),
            json!({ "wait": wait_id + 1 }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("stale_answer")),
        "{body}"
    );

    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/approve"),
            json!({ "wait": wait_id }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/approve"),
            json!({ "wait": wait_id }),
        )
        .await;
    assert_eq!(status, 409, "a second approval is refused: {body}");
    assert_eq!(body["error"]["code"], "not_waiting");

    // A client that reconnects after the park gets the rest, each event once, then `end`.
    let last = before.last().unwrap().0.clone();
    let rest = server
        .request(Method::GET, &format!("/v1/jobs/{id}/events"))
        .header("Last-Event-ID", &last)
        .send()
        .await
        .unwrap();
    let after = read_events(rest, |name, _| name == "end").await;
    let (_, end, end_data) = after.last().unwrap();
    assert_eq!(end, "end");
    assert_eq!(end_data["status"], "completed");
    let first_new: u64 = after[0].0.parse().unwrap();
    assert_eq!(first_new, last.parse::<u64>().unwrap() + 1);
    let names: Vec<&str> = after.iter().map(|(_, name, _)| name.as_str()).collect();
    assert!(names.contains(&"resumed"), "{names:?}");
    assert!(names.contains(&"finished"), "{names:?}");

    let job = server.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["status"], "completed");
    assert_eq!(job["phase"], "done");
    assert_eq!(job["input"], "Rotate the staging API key");
    assert!(job["wait"].is_null());
    assert_eq!(server.get("/v1/inbox").await["jobs"], json!([]));

    // `?after=` works like Last-Event-ID, and a finished job's stream ends by itself.
    let replay = server
        .request(Method::GET, &format!("/v1/jobs/{id}/events?after=0"))
        .send()
        .await
        .unwrap();
    let all = read_events(replay, |name, _| name == "end").await;
    assert_eq!(all.len(), before.len() + after.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_json_errors_that_name_the_problem() {
    let server = approval_server();
    let expect = |status: u16, body: &Value, want_status: u16, code: &str, mentions: &str| {
        assert_eq!(status, want_status, "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(mentions),
            "`{message}` should mention `{mentions}`"
        );
    };
    let (status, body) = server.call(Method::GET, "/v1/jobs/job-none", None).await;
    expect(status, &body, 404, "not_found", "job-none");
    let (status, body) = server
        .post("/v1/jobs", json!({ "piece": "approval", "input": 7 }))
        .await;
    expect(status, &body, 400, "bad_request", "input");
    let response = server
        .request(Method::POST, "/v1/jobs")
        .body(r#"{"piece":"approval","input":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        415,
        "JSON bodies need their content type"
    );
    let (status, body) = server
        .post("/v1/jobs", json!({ "piece": "nope", "input": "x" }))
        .await;
    expect(status, &body, 404, "unknown_piece", "nope");
    let (status, body) = server
        .call(Method::GET, "/v1/jobs?status=parked", None)
        .await;
    expect(status, &body, 400, "bad_request", "status");
    let (status, body) = server.call(Method::GET, "/v1/jobs?limit=0", None).await;
    expect(status, &body, 400, "bad_request", "limit");
    let (status, body) = server
        .post("/v1/jobs/job-none/deny", json!({ "reason": "  " }))
        .await;
    expect(status, &body, 400, "bad_request", "reason");
    let (status, body) = server.call(Method::GET, "/v1/nothing-here", None).await;
    expect(status, &body, 404, "not_found", "endpoint");
    let (status, body) = server.call(Method::GET, "/nothing-here", None).await;
    expect(status, &body, 404, "not_found", "endpoint");
    let (status, body) = server.call(Method::DELETE, "/v1/jobs", None).await;
    expect(status, &body, 405, "method_not_allowed", "method");
    let response = server
        .request(Method::POST, "/v1/jobs")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "bad_request");

    // A cancelled parked job leaves the inbox.
    let id = server.start_job("approval", "Rotate it").await;
    server
        .wait_for(&id, "parked", |job| job["status"] == "waiting_human")
        .await;
    let (status, body) = server
        .post(&format!("/v1/jobs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert_eq!(server.get("/v1/inbox").await["jobs"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn plugins_are_uploaded_checked_and_removed() {
    let server = approval_server();
    let names = |plugins: &Value| -> Vec<String> {
        plugins["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                format!(
                    "{}:{}",
                    p["name"].as_str().unwrap(),
                    p["status"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(
        names(&server.get("/v1/plugins").await),
        ["complete:serving", "request_tool:serving"]
    );

    // Not a component: refused, nothing written, nothing serving under that name.
    let response = server
        .request(Method::PUT, "/v1/plugins/stamp")
        .body(b"\0asm not really".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "plugin_rejected");
    assert!(!server.folder.path("plugins/stamp.wasm").exists());

    let stamp = std::fs::read(maestro_examples::STAMP).unwrap();
    let response = server
        .request(Method::PUT, "/v1/plugins/stamp")
        .body(stamp.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["status"], "serving");
    assert_eq!(status["tools"], json!(["Stamp", "StampAsk"]));
    assert_eq!(
        std::fs::read(server.folder.path("plugins/stamp.wasm")).unwrap(),
        stamp
    );

    // A broken replacement is refused and the previous version keeps serving.
    let response = server
        .request(Method::PUT, "/v1/plugins/stamp")
        .body(std::fs::read(maestro_plugins::WRONG_WORLD).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let entry = server.plugin("stamp").await;
    assert_eq!(entry["status"], "serving");
    assert_eq!(entry["content_hash"], status["content_hash"]);
    assert!(
        entry["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("maestro:tool/plugin"),
        "{entry}"
    );
    assert_eq!(entry["last_error"]["source"], "upload", "{entry}");

    // A name that could leave the folder is refused before anything happens.
    let response = server
        .request(Method::PUT, "/v1/plugins/..%2Fescape")
        .body(stamp)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    let (status, body) = server.call(Method::DELETE, "/v1/plugins/stamp", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "removed");
    assert!(!server.folder.path("plugins/stamp.wasm").exists());
    let (status, body) = server.call(Method::DELETE, "/v1/plugins/stamp", None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
}

#[test]
fn an_open_server_is_refused_off_loopback() {
    let folder = ServerFolder::new(&[approval_piece()], APPROVAL_SCRIPT, &[], false);
    let output = folder.command(&["--listen", "0.0.0.0:0"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("server.tokens"), "{stderr}");
    assert!(stderr.contains("maestro.toml"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_deletes_jobs_that_ended_long_enough_ago_and_keeps_waiting_ones() {
    let folder = ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
        false,
    );
    let config = folder.path("maestro.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}retain_finished = \"soon\"\n")).unwrap();
    let refused = folder.command(&[]).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(
        said.contains("maestro.toml: server.retain_finished: `soon` is not an age"),
        "{said}"
    );

    std::fs::write(&config, format!("{text}retain_finished = \"1s\"\n")).unwrap();
    let server = TestServer::start(folder);
    let ended = server.start_job("approval", "Rotate it").await;
    let waiting = server.start_job("approval", "Rotate that").await;
    let mut parked = Vec::new();
    for id in [&ended, &waiting] {
        parked.push(
            server
                .wait_for(id, "waiting", |job| job["status"] == "waiting_human")
                .await,
        );
    }
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{ended}/approve"),
            json!({ "wait": parked[0]["wait"]["id"] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    server
        .wait_for(&ended, "ended", serve_support::has_ended)
        .await;

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _) = server
            .call(Method::GET, &format!("/v1/jobs/{ended}"), None)
            .await;
        if status == 404 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the ended job was never deleted\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) = server
        .call(Method::GET, &format!("/v1/jobs/{ended}/events"), None)
        .await;
    assert_eq!(status, 404, "its events went with it");
    let kept = server.get(&format!("/v1/jobs/{waiting}")).await;
    assert_eq!(kept["status"], "waiting_human");
}

#[tokio::test(flavor = "multi_thread")]
async fn event_streams_past_the_cap_are_refused_until_one_ends() {
    let folder = ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
        false,
    );
    let config = folder.path("maestro.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}max_event_streams = 1\n")).unwrap();
    let server = TestServer::start(folder);
    let id = server.start_job("approval", "Rotate it").await;
    let job = server
        .wait_for(&id, "waiting", |job| job["status"] == "waiting_human")
        .await;

    let held = server
        .request(Method::GET, &format!("/v1/jobs/{id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    for path in ["/v1/events".to_owned(), format!("/v1/jobs/{id}/events")] {
        let (status, body) = server.call(Method::GET, &path, None).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (503, Some("too_many_streams")),
            "{path}: {body}"
        );
    }

    // The held stream ends with its job, and its place is free again.
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/approve"),
            json!({ "wait": job["wait"]["id"] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    read_events(held, |name, _| name == "end").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let response = server
            .request(Method::GET, "/v1/events")
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            break;
        }
        assert_eq!(response.status(), 503);
        assert!(
            std::time::Instant::now() < deadline,
            "the place never came free"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
