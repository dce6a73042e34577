//! An open `maestro serve` (no tokens, loopback) against what a web page can make a browser
//! send: a name rebound to 127.0.0.1, a cross-site `Origin`, and cross-site "simple" POSTs that
//! need no preflight. None of them reads a job, answers one or installs a plugin; and a token
//! may do only what its scope allows.

mod common;
mod serve_support;

use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HOST, ORIGIN};
use serde_json::{Value, json};
use serve_support::{APPROVAL_SCRIPT, ServerFolder, TestServer, approval_piece};

fn open_server() -> TestServer {
    TestServer::start(ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
        false,
    ))
}

/// A parked approval job: its id and its wait.
async fn parked_job(server: &TestServer) -> (String, u64) {
    let id = server
        .start_job("approval", "Rotate the staging API key")
        .await;
    let job = server
        .wait_for(&id, "the approval park", |job| job["wait"].is_object())
        .await;
    (id, job["wait"]["id"].as_u64().unwrap())
}

async fn refusal(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["error"]["code"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_rebound_to_loopback_gets_nothing_from_an_open_server() {
    let server = open_server();
    let (id, wait) = parked_job(&server).await;
    let port = server.url("").rsplit(':').next().unwrap().to_owned();
    let rebound = format!("attacker.example:{port}");
    let requests = [
        (Method::GET, "/".to_owned(), None),
        (Method::GET, "/v1/jobs".to_owned(), None),
        (Method::GET, format!("/v1/jobs/{id}"), None),
        (
            Method::POST,
            format!("/v1/jobs/{id}/approve"),
            Some(json!({ "wait": wait })),
        ),
        (Method::PUT, "/v1/plugins/planted".to_owned(), None),
    ];
    for (method, path, body) in requests {
        let mut request = server.request(method.clone(), &path).header(HOST, &rebound);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let (status, code) = refusal(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (421, "wrong_host"),
            "{method} {path}"
        );
    }
    // A loopback name with another port is not this server either.
    let request = server
        .request(Method::GET, "/v1/jobs")
        .header(HOST, "localhost:1");
    assert_eq!(refusal(request.send().await.unwrap()).await.0, 421);
    // The job still waits, and nothing was installed.
    let job = server.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["wait"]["id"], wait);
    assert!(!server.folder.path("plugins/planted.wasm").exists());
    // Its own loopback names are served.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let response = server
            .request(Method::GET, "/v1/health")
            .header(HOST, &host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{host}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cross_site_request_is_refused_on_every_route() {
    let server = open_server();
    let (id, wait) = parked_job(&server).await;
    for (method, path) in [
        (Method::GET, "/".to_owned()),
        (Method::GET, "/v1/inbox".to_owned()),
        (Method::GET, "/v1/events".to_owned()),
        (Method::POST, format!("/v1/jobs/{id}/approve")),
        (Method::POST, format!("/v1/jobs/{id}/cancel")),
        (Method::POST, "/v1/logins/0123456789abcdef".to_owned()),
    ] {
        let request = server
            .request(method.clone(), &path)
            .header(ORIGIN, "http://attacker.example")
            .json(&json!({ "wait": wait }));
        let (status, code) = refusal(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (403, "foreign_origin"),
            "{method} {path}"
        );
    }
    let job = server.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["wait"]["id"], wait, "still waiting: {job}");

    // The inbox page's own requests carry its own origin and are served.
    let own = server.url("");
    let own = own.trim_end_matches('/');
    let response = server
        .request(Method::GET, "/v1/inbox")
        .header(ORIGIN, own)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_post_a_form_could_send_changes_nothing_and_approve_names_its_wait() {
    let server = open_server();
    let (id, wait) = parked_job(&server).await;
    let approve = format!("/v1/jobs/{id}/approve");
    let cancel = format!("/v1/jobs/{id}/cancel");
    // What a cross-site form or a no-cors fetch can send without a preflight.
    for (path, content_type, body) in [
        (&approve, Some("text/plain"), format!("{{\"wait\":{wait}}}")),
        (&approve, None, String::new()),
        (&cancel, None, String::new()),
        (
            &cancel,
            Some("application/x-www-form-urlencoded"),
            "reason=x".into(),
        ),
        (
            &cancel,
            Some("multipart/form-data; boundary=x"),
            "--x--".into(),
        ),
    ] {
        let mut request = server.request(Method::POST, path).body(body);
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let (status, code) = refusal(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (415, "unsupported_media_type"),
            "{path} {content_type:?}"
        );
    }
    // An approval must say which wait it approves.
    let (status, body) = server.post(&approve, json!({})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("wait"),
        "{body}"
    );
    let job = server.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["status"], "waiting_human", "{job}");

    let (status, body) = server.post(&approve, json!({ "wait": wait })).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pages_may_run_only_their_own_script_and_are_never_framed() {
    let server = open_server();
    for path in ["/", "/jobs/job-0123", "/logins/0123456789abcdef"] {
        let page = server.request(Method::GET, path).send().await.unwrap();
        assert_eq!(page.status(), 200, "{path}");
        let header = |name: &str| page.headers()[name].to_str().unwrap().to_owned();
        let policy = header("content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'sha256-",
            "style-src 'sha256-",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(
                policy.contains(directive),
                "{directive} in {policy} ({path})"
            );
        }
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert_eq!(header("x-frame-options"), "DENY");
    }
    // The API's answers are never sniffed either.
    let api = server
        .request(Method::GET, "/v1/health")
        .send()
        .await
        .unwrap();
    assert_eq!(api.headers()["x-content-type-options"], "nosniff");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_may_do_only_what_its_scope_allows() {
    let folder = ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
        true,
    );
    let config = folder.path("maestro.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!("tokens = [\"{}\"]", serve_support::TOKEN),
        &format!(
            "tokens = [\"{}\", {{ token = \"reader-token-0123456789\", scope = \"read\" }}, \
             {{ token = \"answer-token-0123456789\", scope = \"answer\" }}]",
            serve_support::TOKEN
        ),
    );
    std::fs::write(&config, text).unwrap();
    let server = TestServer::start(folder);
    let (id, wait) = parked_job(&server).await;
    let as_token = |token: &str, method: Method, path: &str| {
        server
            .http
            .request(method, server.url(path))
            .bearer_auth(token)
    };
    let reader = "reader-token-0123456789";
    let answerer = "answer-token-0123456789";
    // A reader sees everything and changes nothing.
    let response = as_token(reader, Method::GET, &format!("/v1/jobs/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for (method, path, body) in [
        (
            Method::POST,
            format!("/v1/jobs/{id}/approve"),
            Some(json!({ "wait": wait })),
        ),
        (
            Method::POST,
            "/v1/jobs".to_owned(),
            Some(json!({"piece": "approval", "input": "x"})),
        ),
        (Method::PUT, "/v1/plugins/planted".to_owned(), None),
    ] {
        let mut request = as_token(reader, method.clone(), &path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let (status, code) = refusal(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (403, "forbidden_scope"),
            "{method} {path}"
        );
    }
    // An answerer decides waits but installs no code.
    let upload = as_token(answerer, Method::PUT, "/v1/plugins/planted")
        .body(std::fs::read(maestro_plugins::COMPLETE).unwrap())
        .send()
        .await
        .unwrap();
    // Refused before its body was read: the connection is not kept for the next request.
    assert_eq!(upload.headers()["connection"], "close");
    let (status, code) = refusal(upload).await;
    assert_eq!((status, code.as_str()), (403, "forbidden_scope"));
    assert!(!server.folder.path("plugins/planted.wasm").exists());
    let approved = as_token(answerer, Method::POST, &format!("/v1/jobs/{id}/approve"))
        .json(&json!({ "wait": wait }))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
}
