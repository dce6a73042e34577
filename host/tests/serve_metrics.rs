//! A real Prometheus server scrapes a real `maestro serve` on loopback, with a token that may
//! only scrape, while the server runs jobs that park and resume, hit a sandbox limit and trap;
//! the test reads the series back through Prometheus's own query API.

mod common;
mod serve_support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use serve_support::{
    APPROVAL_SCRIPT, STATE_WAIT, ServerFolder, TestServer, approval_piece, has_ended,
};

/// A token whose only scope is `metrics`.
const SCRAPE_TOKEN: &str = "scrape-only-0123456789abcdef";

const PROBE_PIECE: &str = r#"
name: probe
description: Calls tools that hit a sandbox limit and trap, then completes.
max_movements: 5
initial_movement: work
movements:
  - name: work
    instructions: Call the tools, then complete.
    tools: [alloc_bomb, panic, complete]
    default_next: ABORT
"#;

/// The probe's turns; every other job plays the approval script.
const PROBE_CONVERSATION: &str = r#"
conversations:
  - input_contains: probe
    turns:
      - tool_calls: [{ name: alloc_bomb, arguments: {} }]
      - tool_calls: [{ name: panic, arguments: {} }]
      - tool_calls: [{ name: complete, arguments: { status: done, summary: "probed" } }]
"#;

/// A Prometheus server on a free loopback port that scrapes `target` every second; killed on
/// drop.
struct Prometheus {
    child: Child,
    base: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    async fn start(target: &str) -> Self {
        let mut dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: maestro\n    \
                 authorization:\n      credentials: {SCRAPE_TOKEN}\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|error| {
                    panic!(
                        "cannot start prometheus ({error}): install the Debian package \
                         prometheus (.ci/install does)"
                    )
                });
            let mut prometheus = Self {
                child,
                base: format!("http://127.0.0.1:{port}"),
                http: reqwest::Client::new(),
                _dir: dir,
            };
            if prometheus.ready().await {
                return prometheus;
            }
            // Another listener took the port first: the data folder goes with this attempt.
            dir = std::mem::replace(&mut prometheus._dir, tempfile::tempdir().unwrap());
        }
        panic!("prometheus never became ready on three ports");
    }

    /// Waits until Prometheus answers `/-/ready`, or its process has exited.
    async fn ready(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + STATE_WAIT;
        let url = format!("{}/-/ready", self.base);
        while tokio::time::Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            let answer = self.http.get(&url).send().await;
            if answer.is_ok_and(|response| response.status().is_success()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// The value of instant query `query`, if it returns exactly one series.
    async fn value(&self, query: &str) -> Option<f64> {
        let response: Value = self
            .http
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", query)])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        assert_eq!(response["status"], "success", "{query}: {response}");
        match response["data"]["result"].as_array()?.as_slice() {
            [series] => series["value"][1].as_str()?.parse().ok(),
            [] => None,
            many => panic!("{query} has {} series: {response}", many.len()),
        }
    }

    /// Waits until `query` has the value `expected` in Prometheus.
    async fn wait_for(&self, query: &str, expected: f64, server: &TestServer) {
        let deadline = tokio::time::Instant::now() + STATE_WAIT;
        let mut last = None;
        while tokio::time::Instant::now() < deadline {
            last = self.value(query).await;
            if last == Some(expected) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "Prometheus never saw {query} == {expected} (last: {last:?})\n--- server log ---\n{}",
            server.log()
        );
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn with_scrape_token(folder: ServerFolder) -> ServerFolder {
    let config = folder.path("maestro.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        "tokens = [\"",
        &format!("tokens = [{{ token = \"{SCRAPE_TOKEN}\", scope = \"metrics\" }}, \""),
    );
    assert!(text.contains(SCRAPE_TOKEN), "the config has a tokens line");
    std::fs::write(&config, text).unwrap();
    folder
}

fn host_port(server: &TestServer) -> String {
    let url = server.url("");
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_parks_resumes_limits_and_traps_with_a_scrape_only_token() {
    let folder = ServerFolder::new(
        &[approval_piece(), ("probe.yaml", PROBE_PIECE)],
        &format!("{PROBE_CONVERSATION}{APPROVAL_SCRIPT}"),
        &[
            maestro_plugins::COMPLETE,
            maestro_plugins::REQUEST_TOOL,
            maestro_plugins::HOSTILE,
        ],
        true,
    )
    .with_policy("[plugins.hostile]\nmemory_mib = 8\n");
    let server = TestServer::start(with_scrape_token(folder));

    // The scrape-only token reads the metrics and nothing else; no token reads nothing.
    let scrape = |path: &str| {
        reqwest::Client::new()
            .get(server.url(path))
            .bearer_auth(SCRAPE_TOKEN)
    };
    let metrics = scrape("/metrics").send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("maestro_jobs{status=\"pending\"} 0"),
        "the job counts are read at the scrape"
    );
    assert_eq!(scrape("/v1/jobs").send().await.unwrap().status(), 403);
    let anonymous = reqwest::get(server.url("/metrics")).await.unwrap();
    assert_eq!(anonymous.status(), 401);

    let prometheus = Prometheus::start(&host_port(&server)).await;
    prometheus
        .wait_for("up{job=\"maestro\"}", 1.0, &server)
        .await;

    // Two jobs park on an approval; Prometheus sees them wait before anyone answers.
    let first = server.start_job("approval", "rotate the staging key").await;
    let second = server
        .start_job("approval", "rotate the staging key again")
        .await;
    let mut waits = Vec::new();
    for id in [&first, &second] {
        let job = server
            .wait_for(id, "its park", |job| job["status"] == "waiting_human")
            .await;
        waits.push(
            job["wait"]["id"]
                .as_u64()
                .expect("a parked job names its wait"),
        );
    }
    prometheus
        .wait_for("maestro_jobs{status=\"waiting_human\"}", 2.0, &server)
        .await;
    prometheus
        .wait_for("maestro_parks_total{reason=\"tool_request\"}", 2.0, &server)
        .await;
    for (id, wait) in [&first, &second].into_iter().zip(waits) {
        let (status, body) = server
            .post(&format!("/v1/jobs/{id}/approve"), json!({ "wait": wait }))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let probe = server.start_job("probe", "probe the sandbox").await;
    for id in [&first, &second, &probe] {
        let job = server.wait_for(id, "its end", has_ended).await;
        assert_eq!(job["status"], "completed", "{job}");
    }

    let expected = [
        ("maestro_jobs{status=\"completed\"}", 3.0),
        ("maestro_jobs{status=\"waiting_human\"}", 0.0),
        ("maestro_jobs_ended_total{status=\"completed\"}", 3.0),
        ("maestro_resumes_total{reason=\"tool_request\"}", 2.0),
        (
            "maestro_parked_duration_seconds_count{reason=\"tool_request\"}",
            2.0,
        ),
        (
            "sum(maestro_tool_calls_total{plugin=\"request_tool\",outcome=\"park:tool-request\"})",
            2.0,
        ),
        (
            "sum(maestro_tool_calls_total{plugin=\"hostile\",tool=\"alloc_bomb\",outcome=\"limit:memory\"})",
            1.0,
        ),
        ("maestro_limits_hit_total{limit=\"memory\"}", 1.0),
        (
            "sum(maestro_tool_calls_total{tool=\"panic\",outcome=\"error:trap\"})",
            1.0,
        ),
        (
            "sum(maestro_tool_calls_total{tool=\"complete\",outcome=\"terminal:complete\"})",
            3.0,
        ),
        ("maestro_plugin_loads_total{result=\"loaded\"}", 3.0),
        ("maestro_plugins_serving", 3.0),
        ("maestro_runners{state=\"busy\"}", 0.0),
        ("maestro_runners{state=\"idle\"}", 4.0),
    ];
    for (query, value) in expected {
        prometheus.wait_for(query, value, &server).await;
    }
    // Every tool call is timed, and the store's commits are measured.
    let timed = "sum(maestro_tool_call_duration_seconds_count)";
    let counted = "sum(maestro_tool_calls_total)";
    let calls = prometheus.value(counted).await.unwrap();
    prometheus.wait_for(timed, calls, &server).await;
    let commits = prometheus
        .value("maestro_store_commit_duration_seconds_count{store=\"sqlite\"}")
        .await
        .unwrap();
    assert!(commits >= 3.0, "{commits} commits");
    let hash = content_hash(Path::new(maestro_plugins::HOSTILE));
    let series = prometheus
        .value(&format!(
            "sum(maestro_tool_calls_total{{plugin=\"hostile\",content_hash=\"{hash}\"}})"
        ))
        .await;
    assert_eq!(
        series,
        Some(2.0),
        "the calls are labelled with the version that ran"
    );
}

fn content_hash(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}
