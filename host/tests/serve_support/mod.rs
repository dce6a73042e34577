//! A real `maestro serve` process for the serve tests: a folder with a config file, pieces, a
//! scripted model and a plugin folder; the server on a free loopback port; an HTTP client that
//! sends the bearer token. The process is killed when the value drops, and its log is printed
//! when a test fails, so a failure shows what the server said.

#![allow(dead_code)]

pub mod browser;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// How long a test waits for a state (a job's status, a card on the page) before it calls the
/// state never reached. Tests wait for states, not for time: this bound only keeps a broken
/// build from hanging the suite, so it is far above what a loaded machine needs.
pub const STATE_WAIT: Duration = Duration::from_secs(120);

pub const APPROVAL_SCRIPT: &str = r#"
turns:
  - text: "The change: rotate the API key of the staging service."
  - tool_calls:
      - name: RequestTool
        arguments:
          tool: RotateKey
          reason: Rotate the staging API key as the user asked.
          arguments: { service: staging, revoke_old_after_minutes: 60 }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "RotateKey was approved and ran." }
"#;

pub struct ServerFolder {
    pub dir: tempfile::TempDir,
    /// Whether the config asks for [`TOKEN`].
    pub token: bool,
}

impl ServerFolder {
    /// `pieces`: (file name, YAML); `plugins`: component files copied into the plugin folder;
    /// `token`: whether the API needs [`TOKEN`].
    pub fn new(pieces: &[(&str, &str)], script: &str, plugins: &[&str], token: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("pieces")).unwrap();
        for (name, text) in pieces {
            std::fs::write(root.join("pieces").join(name), text).unwrap();
        }
        std::fs::write(root.join("script.yaml"), script).unwrap();
        std::fs::create_dir(root.join("plugins")).unwrap();
        for plugin in plugins {
            let name = Path::new(plugin).file_name().unwrap();
            std::fs::copy(plugin, root.join("plugins").join(name)).unwrap();
        }
        let tokens = if token {
            format!("tokens = [\"{TOKEN}\"]\n")
        } else {
            String::new()
        };
        let script = root.join("script.yaml").display().to_string();
        std::fs::write(
            root.join("maestro.toml"),
            format!(
                "plugins = \"plugins\"\npieces = \"pieces\"\nstore = \"jobs.db\"\n\n\
                 [model]\nprovider = \"scripted\"\nname = {script:?}\n\n\
                 [server]\nlisten = \"127.0.0.1:0\"\nrunners = 4\n{tokens}"
            ),
        )
        .unwrap();
        Self { dir, token }
    }

    /// The folder with `policy` (TOML) as the operator's policy file.
    pub fn with_policy(self, policy: &str) -> Self {
        std::fs::write(self.path("policy.toml"), policy).unwrap();
        let config = self.path("maestro.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("policy = \"policy.toml\"\n{text}")).unwrap();
        self
    }

    /// The folder with `address` as its store (a PostgreSQL URL), and its plugin archive in it.
    pub fn with_store(self, address: &str) -> Self {
        let config = self.path("maestro.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        let text = text.replace("store = \"jobs.db\"", &format!("store = {address:?}"));
        // `[server]` is the last table: the archive joins it.
        std::fs::write(&config, format!("{text}archive = \"plugin-versions\"\n")).unwrap();
        self
    }

    /// The folder with `line` (`key = value`) in its config's `[server]` table.
    pub fn with_server_setting(self, line: &str) -> Self {
        let config = self.path("maestro.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        // `[server]` is the last table.
        std::fs::write(&config, format!("{text}{line}\n")).unwrap();
        self
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn command(&self, extra: &[&str]) -> Command {
        let mut command = crate::common::maestro_command();
        command
            .arg("serve")
            .arg("--config")
            .arg(self.path("maestro.toml"));
        command.args(extra);
        command
    }
}

pub struct TestServer {
    pub folder: ServerFolder,
    pub base: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    pub http: reqwest::Client,
    token: Option<String>,
}

impl TestServer {
    pub fn start(folder: ServerFolder) -> Self {
        let mut child = folder
            .command(&[])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("maestro serves http://") {
                    let address = rest.split_whitespace().next().unwrap_or_default();
                    let _ = address_tx.send(address.to_owned());
                }
                lines.lock().unwrap().push(line);
            }
        });
        let address = match address_rx.recv_timeout(STATE_WAIT) {
            Ok(address) => address,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "maestro serve did not start:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        let token = folder.token.then(|| TOKEN.to_owned());
        Self {
            folder,
            base: format!("http://{address}"),
            child,
            log,
            http: reqwest::Client::new(),
            token,
        }
    }

    /// Kills the server (as a crash would) and starts it again on the same folder and store.
    pub fn restart(mut self) -> Self {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let folder = std::mem::replace(
            &mut self.folder,
            ServerFolder {
                dir: tempfile::tempdir().unwrap(),
                token: false,
            },
        );
        drop(self);
        Self::start(folder)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends and returns (status, JSON body).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{path}: not JSON ({status}): {text}"));
        (status, value)
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}\n{}", self.log());
        body
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn start_job(&self, piece: &str, input: &str) -> String {
        let (status, job) = self
            .post("/v1/jobs", json!({ "piece": piece, "input": input }))
            .await;
        assert_eq!(status, 201, "{job}\n{}", self.log());
        job["id"].as_str().unwrap().to_owned()
    }

    /// The `GET /v1/plugins` entry of plugin `name`.
    pub async fn plugin(&self, name: &str) -> Value {
        let listed = self.get("/v1/plugins").await;
        listed["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|plugin| plugin["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no plugin `{name}` in {listed}"))
    }

    /// Polls the job until `done(job)` holds.
    pub async fn wait_for(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + STATE_WAIT;
        loop {
            let job = self.get(&format!("/v1/jobs/{id}")).await;
            if done(&job) {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} never became {what}: {job}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- maestro serve log ---\n{}", self.log());
        }
    }
}

/// Whether a job (as the API shows it) has ended.
pub fn has_ended(job: &Value) -> bool {
    maestro::engine::JobStatus::parse(job["status"].as_str().unwrap())
        .is_some_and(|status| status.is_final())
}

/// The pieces folder's approval piece, as shipped.
pub fn approval_piece() -> (&'static str, &'static str) {
    (
        "approval.yaml",
        include_str!("../../../pieces/approval.yaml"),
    )
}

/// What a job of the approval piece ends with once approved (its `complete`'s summary, from
/// [`APPROVAL_SCRIPT`]).
pub const APPROVED: &str = "RotateKey was approved and ran.";

/// A folder of the approval piece, its scripted model and the first-party plugins; `token`:
/// whether the API needs [`TOKEN`].
pub fn approval_folder(token: bool) -> ServerFolder {
    ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        maestro_plugins::FIRST_PARTY,
        token,
    )
}

/// What an MCP client of 2025-11-25 saw of the approval piece called as a tool: its job's
/// question asked in the middle of the call, and the answer ending the job with its result.
pub fn check_asked_in_call(seen: &Value) {
    assert_eq!(
        seen["asked_in_call"],
        json!({ "is_error": false, "text": APPROVED }),
        "{seen}"
    );
    let message = seen["asked_in_call_asked"][0]["message"].as_str().unwrap();
    assert!(message.contains("RotateKey"), "{message}");
}

/// A server with the commission piece, its worker's piece and their scripted model: the seed's
/// typical path.
pub fn commission_server() -> TestServer {
    TestServer::start(ServerFolder::new(
        &[
            (
                "commission.yaml",
                include_str!("../../../pieces/commission.yaml"),
            ),
            ("report.yaml", include_str!("../../../pieces/report.yaml")),
        ],
        include_str!("../../../pieces/scripts/commission.yaml"),
        &[
            maestro_plugins::COMPLETE,
            maestro_plugins::HAND_IN,
            maestro_plugins::RUN_WORKER,
        ],
        true,
    ))
}

/// Reads `(id, event name, data)` from an SSE response until `stop` says so.
pub async fn read_events(
    response: reqwest::Response,
    stop: impl Fn(&str, &Value) -> bool,
) -> Vec<(String, String, Value)> {
    let mut stream = response.bytes_stream().eventsource();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stream.next()).await {
        let event = event.expect("a well-formed event");
        let data: Value = serde_json::from_str(&event.data).expect("JSON data");
        let done = stop(&event.event, &data);
        seen.push((event.id, event.event, data));
        if done {
            return seen;
        }
    }
    panic!("the stream ended before the expected event; got {seen:?}");
}

/// The session the private page of [`reading_server`]'s site takes.
pub const SESSION: &str = "sid=a-good-session";

/// A site whose page `/private` needs [`SESSION`] (401 without it), and a server whose piece
/// `read` reads that page with BrowseWeb, so its job waits for a browser login, and then
/// completes with "read it". Keep the site alive; the third value is the page's address.
pub async fn reading_server() -> (wiremock::MockServer, TestServer, String) {
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    const PIECE: &str = "name: read\ndescription: Read a private page.\n\
                         initial_movement: read\nmax_movements: 1\nmovements:\n  - name: read\n    \
                         instructions: Read the private page, then complete.\n    \
                         tools: [BrowseWeb, complete]\n";
    let site = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/private"))
        .and(header("cookie", SESSION))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            "<html><head><title>Private</title></head><body><p>Balance: 1,234</p></body></html>",
            "text/html",
        ))
        .with_priority(1)
        .mount(&site)
        .await;
    Mock::given(method("GET"))
        .and(path("/private"))
        .respond_with(ResponseTemplate::new(401))
        .with_priority(2)
        .mount(&site)
        .await;
    let private = format!("{}/private", site.uri());
    let script = format!(
        "turns:\n  - tool_calls: [{{ name: BrowseWeb, arguments: {{ url: {private:?} }} }}]\n  \
         - tool_calls: [{{ name: complete, arguments: {{ status: done, summary: \"read it\" }} }}]\n"
    );
    let folder = ServerFolder::new(
        &[("read.yaml", PIECE)],
        &script,
        &[maestro_plugins::BROWSE_WEB, maestro_plugins::COMPLETE],
        true,
    )
    .with_policy(&format!(
        "[plugins.browse_web]\nhttp_allow = [\"{}\"]\n",
        site.address()
    ));
    (site, TestServer::start(folder), private)
}

impl TestServer {
    /// Runs `sdk`'s MCP client on `args` to its end (it blocks); what the client saw. A failed
    /// client shows its output and the server's log.
    pub fn mcp_client(&self, sdk: crate::common::McpSdk, args: &[&str]) -> Value {
        let output = sdk.command(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "the {sdk:?} client failed:\n{stdout}\n{}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.log()
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|error| panic!("the client printed no JSON ({error}):\n{stdout}"))
    }
}
