//! `maestro serve`: one process that runs the workers, the HTTP API and the plugin-folder
//! watcher over one store.
//!
//! Invariant: the server adds no state of its own that a restart would lose: jobs, their events
//! and answers are in the store; plugin versions are in the plugin folder and the archive; the
//! phase of a job is folded from its log on every read. So a server can be killed at any point
//! and started again on the same store, folder and config, and every job goes on.

mod answers;
mod api;
mod auth;
mod bodies;
mod guard;
mod job_graph;
mod job_view;
mod live;
mod mcp;
mod metrics;
mod plugins;
mod ui;
mod watch;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::sync::Notify;

pub use api::{ApiError, AppState, router};
pub use auth::{Auth, Scope, Token};
pub use bodies::{ROUTES_WITH_BODIES, check_request_body};
pub use guard::Guard;
pub use live::{Hub, Notice};
pub use metrics::{Scrape, serve_metrics};
pub use plugins::{Change, FailureSource, LoadFailure, PluginHost, PluginStatus, ServingState};
pub use watch::{FolderWatch, watch_folder};

use crate::engine::{CancelFlag, Engine, JobStatus, ResumePoint};
use crate::store::JobStore;
use crate::worker::{Worker, WorkerConfig, WorkerStats};

/// How the server runs, beyond what the engine and the plugin host already know.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub listen: SocketAddr,
    pub auth: Auth,
    pub worker: WorkerConfig,
    /// How long the plugin folder must be quiet before a change is loaded.
    pub debounce: Duration,
    pub max_upload_bytes: usize,
    /// Job trees that ended longer ago than this are deleted, checked at start and then every
    /// [`RETENTION_EVERY`] (or every `retain_finished`, if shorter).
    pub retain_finished: Option<Duration>,
    /// Event streams open at once, over every client.
    pub max_event_streams: usize,
    /// The address people reach the pages at, for the links MCP clients are given; without
    /// it, the address each request named.
    pub public_url: Option<String>,
}

/// Event streams open at once when the configuration names no number.
pub const DEFAULT_EVENT_STREAMS: usize = 256;

/// How often retention looks for old trees at most.
pub const RETENTION_EVERY: Duration = Duration::from_secs(600);

/// A server that listens; [`RunningServer::stop`] ends it.
pub struct RunningServer {
    pub addr: SocketAddr,
    stop: CancelFlag,
    shutdown: Arc<Notify>,
    http: tokio::task::JoinHandle<()>,
    worker: tokio::task::JoinHandle<WorkerStats>,
    retention: Option<tokio::task::JoinHandle<()>>,
    /// Brings the store's changes to the live feed, where the store tells of them.
    heard: Option<tokio::task::JoinHandle<()>>,
    /// Tells MCP clients when the tools change, and MCP calls when a job they follow is saved.
    announcing: tokio::task::JoinHandle<()>,
    /// Ends the MCP sessions.
    mcp_stop: tokio_util::sync::CancellationToken,
    _watch: FolderWatch,
}

/// Binds `settings.listen`, starts the runners and the watcher. `plugins` must be synced and
/// `engine` must run on `plugins.slot()`.
pub async fn start(
    store: Arc<dyn JobStore>,
    engine: Arc<Engine>,
    plugins: Arc<PluginHost>,
    wake: Arc<Notify>,
    settings: ServeSettings,
) -> Result<RunningServer, String> {
    let changes = store.changes();
    let hub = Arc::new(match changes {
        Some(_) => Hub::fed_by_store(),
        None => Hub::default(),
    });
    let heard = changes.map(|changes| tokio::spawn(live::forward_changes(changes, hub.clone())));
    let listener_hub = hub.clone();
    plugins.on_change(move |status| listener_hub.publish(Notice::Plugin(status.clone())));
    let watch = watch_folder(plugins.clone(), settings.debounce)?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", settings.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|error| format!("cannot read the listening address: {error}"))?;
    plugins.runtime().forbid_destination(addr);
    // Responses and event streams are small writes: with Nagle's algorithm, one written while
    // the previous is unacknowledged waits for the client's delayed ACK (40 ms on Linux).
    let listener = listener.tap_io(|connection| {
        if let Err(error) = connection.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a connection: {error}");
        }
    });

    let worker = Arc::new(
        Worker::new(store.clone(), engine.clone(), settings.worker, wake.clone())
            .with_observer(hub.clone())
            .with_versions(plugins.clone()),
    );
    let stop = CancelFlag::default();
    let worker = {
        let stop = stop.clone();
        tokio::spawn(async move { worker.run(stop, false).await })
    };

    let retention = settings
        .retain_finished
        .map(|age| tokio::spawn(retain(store.clone(), age)));

    let metrics = crate::telemetry::Exporter::install()?;
    let sealer = crate::mcp::Sealer::with_store(store.clone())?;
    let jobs = crate::mcp::Jobs::new(
        engine.clone(),
        store.clone(),
        mcp::job_changes(hub.clone(), wake.clone()),
    )?;
    let logins = Arc::new(crate::mcp::Logins::default());
    let tools = crate::mcp::ToolServer::new(plugins.slot().clone(), sealer)
        .with_versions(plugins.clone())
        .with_jobs(Arc::new(jobs))
        .with_logins(logins.clone())
        .with_public_url(settings.public_url.clone());
    let announcing = tokio::spawn(mcp::tell_mcp(hub.clone(), tools.clone()));
    let mcp_stop = tokio_util::sync::CancellationToken::new();
    let state = Arc::new(AppState {
        store,
        engine,
        plugins,
        hub,
        wake,
        guard: Guard::new(addr, settings.auth.is_open()),
        auth: settings.auth,
        max_upload_bytes: settings.max_upload_bytes,
        streams: Arc::new(tokio::sync::Semaphore::new(settings.max_event_streams)),
        metrics,
        logins,
        mcp: tools,
        mcp_stop: mcp_stop.clone(),
    });
    let shutdown = Arc::new(Notify::new());
    let http = {
        let shutdown = shutdown.clone();
        let app = router(state);
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.notified().await })
                .await;
            if let Err(error) = served {
                tracing::error!("the HTTP server failed: {error}");
            }
        })
    };
    Ok(RunningServer {
        addr,
        stop,
        shutdown,
        http,
        worker,
        retention,
        heard,
        announcing,
        mcp_stop,
        _watch: watch,
    })
}

/// Deletes the trees that ended more than `age` ago, now and then periodically, until aborted.
async fn retain(store: Arc<dyn JobStore>, age: Duration) {
    let every = age.min(RETENTION_EVERY);
    loop {
        let pruning = store.clone();
        match tokio::task::spawn_blocking(move || {
            crate::store::prune_finished(pruning.as_ref(), age)
        })
        .await
        {
            Ok(Ok(0)) => {}
            Ok(Ok(deleted)) => {
                tracing::info!(deleted, "retention deleted jobs that ended long ago")
            }
            Ok(Err(error)) => tracing::warn!("retention failed: {error}"),
            Err(error) => tracing::warn!("retention failed: {error}"),
        }
        tokio::time::sleep(every).await;
    }
}

impl RunningServer {
    /// Stops taking requests and jobs; runs in progress end at their next stop, and open event
    /// streams get `grace` to finish before they are cut.
    pub async fn stop(self, grace: Duration) -> WorkerStats {
        self.stop.cancel();
        self.shutdown.notify_one();
        self.mcp_stop.cancel();
        self.announcing.abort();
        if let Some(heard) = &self.heard {
            heard.abort();
        }
        if let Some(retention) = self.retention {
            retention.abort();
        }
        let mut http = self.http;
        if tokio::time::timeout(grace, &mut http).await.is_err() {
            http.abort();
        }
        self.worker.await.unwrap_or_default()
    }
}

/// Loads the plugin versions that unfinished jobs are pinned to and that the folder no longer
/// holds, from the archive, so they resume on their own version: jobs waiting for a human or
/// for subtasks, answered ones, and runs a crash cut short. Returns one warning per version
/// that cannot be restored (those jobs end in an error naming it when resumed).
pub async fn restore_parked_versions(store: &dyn JobStore, plugins: &PluginHost) -> Vec<String> {
    let mut pins = BTreeSet::new();
    for status in [
        JobStatus::WaitingHuman,
        JobStatus::WaitingSubtasks,
        JobStatus::Pending,
        JobStatus::Running,
    ] {
        let Ok(jobs) = store.list(Some(status), usize::MAX >> 1) else {
            continue;
        };
        for summary in jobs {
            let Ok((job, _)) = store.load(&summary.id) else {
                continue;
            };
            if let Some(wait) = job.wait
                && let ResumePoint::ParkedCall { plugin, .. }
                | ResumePoint::ApprovalGate { plugin, .. } = wait.resume
            {
                pins.insert((plugin.name, plugin.content_hash));
            }
        }
    }
    let mut warnings = Vec::new();
    for (name, hash) in pins {
        if let Err(error) = plugins.restore_version(&name, &hash).await {
            warnings.push(format!(
                "parked calls on plugin `{name}` version {hash} cannot resume: {error}"
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{JobState, PinnedPlugin, Wait, WaitRequest};
    use crate::plugin::{CallRequest, Policy, Runtime, RuntimeConfig, content_hash};
    use crate::store::SqliteStore;

    #[tokio::test]
    async fn every_unfinished_job_gets_its_pinned_version_back_after_a_restart() {
        let folder = tempfile::tempdir().unwrap();
        let (dir, archive) = (
            folder.path().join("plugins"),
            folder.path().join("versions"),
        );
        std::fs::create_dir(&dir).unwrap();
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let host = |runtime: &Runtime| {
            PluginHost::new(
                runtime.clone(),
                dir.clone(),
                archive.clone(),
                Policy::default(),
            )
        };
        // A version served once (so it is archived), then left the folder.
        let echo = std::fs::read(maestro_plugins::ECHO).unwrap();
        let hash = content_hash(&echo);
        std::fs::write(dir.join("echo.wasm"), &echo).unwrap();
        assert_eq!(host(&runtime).sync("echo").await, Change::Loaded);
        std::fs::remove_file(dir.join("echo.wasm")).unwrap();

        let store = SqliteStore::open(folder.path().join("jobs.db")).unwrap();
        let pinned_wait = || Wait {
            id: 1,
            reason: None,
            request: WaitRequest::Subtasks {
                job_ids: vec!["child".into()],
            },
            resume: ResumePoint::ParkedCall {
                call: CallRequest::new("echo", serde_json::json!({})),
                plugin: PinnedPlugin {
                    name: "echo".into(),
                    content_hash: hash.clone(),
                },
            },
        };
        // A job parked on its running subtask, and one whose run a crash cut short.
        for id in ["subtasks", "crashed"] {
            let mut job = JobState::new(id.into(), "p", "m", "input".into());
            job.wait = Some(pinned_wait());
            store.create(&job).unwrap();
            store.claim(id, "node", 60_000).unwrap();
        }
        let mut child = JobState::new("child".into(), "p", "m", "input".into());
        child.parent = Some("subtasks".into());
        store.create(&child).unwrap();
        let (mut parked, _) = store.load("subtasks").unwrap();
        parked.status = JobStatus::WaitingSubtasks;
        store.save(&parked, &[], "node").unwrap();
        assert_eq!(
            store.load("subtasks").unwrap().1,
            JobStatus::WaitingSubtasks
        );
        assert_eq!(store.load("crashed").unwrap().1, JobStatus::Running);

        let restarted = host(&runtime);
        assert!(restarted.slot().current().pinned(&hash).is_none());
        assert!(restore_parked_versions(&store, &restarted).await.is_empty());
        assert!(restarted.slot().current().pinned(&hash).is_some());
    }
}
