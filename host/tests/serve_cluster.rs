//! Two `maestro serve` processes on one PostgreSQL database, as two nodes of a cluster: a job
//! started on one is seen, answered and streamed on the other, each event once and in order,
//! whichever node runs it.

mod common;
mod postgres_support;
mod serve_support;

use std::time::{Duration, Instant};

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

/// A job parks on node A on RequestTool's first version; a second version is then uploaded to
/// A. Node B starts with no RequestTool in its folder: it takes the cluster's second version at
/// start and never loads the first. A goes away; B resumes the parked call on exactly the
/// first version, fetched from the shared store when it claims the job, while the second keeps
/// serving new calls.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_parked_on_one_node_resumes_on_another_that_never_loaded_its_version() {
    let Some(database) = postgres_support::database() else {
        return;
    };
    let folder = |plugins: &[&str]| {
        ServerFolder::new(&[approval_piece()], APPROVAL_SCRIPT, plugins, true)
            .with_store(&database.url)
    };
    let first = folder(&[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL]);
    let a = TestServer::start(first);
    let pinned = a.plugin("request_tool").await["content_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = a.start_job("approval", "Rotate the staging API key").await;
    let parked = a
        .wait_for(&id, "parked", |job| job["status"] == "waiting_human")
        .await;
    let wait = parked["wait"]["id"].as_u64().unwrap();
    let store = maestro::store::StoreAddress::parse(&database.url)
        .open()
        .unwrap()
        .0;
    let parked_on = store
        .load(&id)
        .unwrap()
        .0
        .parked_plugin()
        .unwrap()
        .content_hash
        .clone();
    assert_eq!(parked_on, pinned);
    let published = store.published_plugins().unwrap();
    assert!(
        published.iter().any(|record| record.name == "request_tool"
            && record.content_hash.as_deref() == Some(pinned.as_str())),
        "node A published its folder's version when it started: {published:?}"
    );
    let second = upload(
        &a,
        "request_tool",
        another_version_of(maestro_plugins::REQUEST_TOOL),
    )
    .await;
    assert_ne!(second, pinned);

    let other = TestServer::start(folder(&[maestro_plugins::COMPLETE]));
    assert_eq!(
        other.plugin("request_tool").await["content_hash"],
        second.as_str()
    );
    assert!(
        !other
            .folder
            .path("plugin-versions")
            .join(format!("{pinned}.wasm"))
            .exists(),
        "node B never had the first version"
    );
    drop(a);

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
    assert_eq!(serving["content_hash"], second.as_str());
}

/// Uploads `bytes` as plugin `name` to `node`; returns the content hash that serves there.
async fn upload(node: &TestServer, name: &str, bytes: Vec<u8>) -> String {
    let response = node
        .request(Method::PUT, &format!("/v1/plugins/{name}"))
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", node.log());
    let status: serde_json::Value = response.json().await.unwrap();
    status["content_hash"].as_str().unwrap().to_owned()
}

/// Polls `node`'s entry of plugin `name` until `done` holds for it.
async fn wait_for_plugin(
    node: &TestServer,
    name: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + serve_support::STATE_WAIT;
    loop {
        let listed = node.get("/v1/plugins").await;
        let entry = listed["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|plugin| plugin["name"] == name)
            .cloned()
            .unwrap_or_default();
        if done(&entry) {
            return entry;
        }
        assert!(
            Instant::now() < deadline,
            "plugin {name} never became {what}: {entry}\n{}",
            node.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls until the file at `path` holds `bytes` (`None`: until it is gone).
async fn wait_for_file(path: &std::path::Path, bytes: Option<&[u8]>) {
    let deadline = Instant::now() + serve_support::STATE_WAIT;
    while std::fs::read(path).ok().as_deref() != bytes {
        assert!(
            Instant::now() < deadline,
            "{} never changed",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A version uploaded to one `maestro serve` node serves on the other one and lands in the
/// folder of a `maestro work` node; a file dropped into a node's folder serves everywhere, and a
/// removal removes it everywhere. A version whose bytes in the store do not hash to it is
/// refused by every node, and the version before keeps serving.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_installed_on_one_node_serves_on_every_node_and_bad_bytes_are_refused() {
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
    let (a, b) = (TestServer::start(folder()), TestServer::start(folder()));
    let worker_folder = folder();
    let mut worker = common::maestro_command()
        .arg("work")
        .arg("--config")
        .arg(worker_folder.path("maestro.toml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();

    // An upload to A.
    let version = another_version_of(maestro_plugins::REQUEST_TOOL);
    let uploaded_at = Instant::now();
    let hash = upload(&a, "request_tool", version.clone()).await;
    let on_b = wait_for_plugin(&b, "request_tool", "the uploaded version", |entry| {
        entry["content_hash"] == hash.as_str()
    })
    .await;
    eprintln!(
        "serving on node B {:?} after the upload to A",
        uploaded_at.elapsed()
    );
    assert_eq!(on_b["status"], "serving");
    assert_eq!(
        std::fs::read(b.folder.path("plugins/request_tool.wasm")).unwrap(),
        version
    );
    wait_for_file(
        &worker_folder.path("plugins/request_tool.wasm"),
        Some(&version),
    )
    .await;

    // A file dropped into B's folder, then removed through A.
    let stamp = std::fs::read(maestro_examples::STAMP).unwrap();
    std::fs::write(b.folder.path("plugins/stamp.wasm"), &stamp).unwrap();
    wait_for_plugin(&a, "stamp", "serving", |entry| entry["status"] == "serving").await;
    assert_eq!(
        std::fs::read(a.folder.path("plugins/stamp.wasm")).unwrap(),
        stamp
    );
    let response = a
        .request(Method::DELETE, "/v1/plugins/stamp")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", a.log());
    wait_for_plugin(&b, "stamp", "removed", |entry| entry["status"] == "removed").await;
    wait_for_file(&b.folder.path("plugins/stamp.wasm"), None).await;
    wait_for_file(&worker_folder.path("plugins/stamp.wasm"), None).await;

    // Bytes that are not the version they are published as.
    let store = maestro::store::StoreAddress::parse(&database.url)
        .open()
        .unwrap()
        .0;
    let forged = "f".repeat(64);
    let echo = std::fs::read(maestro_plugins::ECHO).unwrap();
    store
        .keep_component(&forged, "request_tool", &echo)
        .unwrap();
    store.publish_plugin("request_tool", Some(&forged)).unwrap();
    for node in [&a, &b] {
        let entry = wait_for_plugin(node, "request_tool", "refusing the forged bytes", |entry| {
            entry["last_error"]["content_hash"] == forged.as_str()
        })
        .await;
        assert_eq!(entry["status"], "serving");
        assert_eq!(
            entry["content_hash"],
            hash.as_str(),
            "the version before keeps serving"
        );
        assert_eq!(entry["last_error"]["source"], "cluster");
        let message = entry["last_error"]["message"].as_str().unwrap();
        assert!(message.contains("hash to"), "{message}");
    }
    assert_eq!(
        std::fs::read(worker_folder.path("plugins/request_tool.wasm")).unwrap(),
        version,
        "the worker node keeps its version too"
    );
    let _ = worker.kill();
    let _ = worker.wait();
}
