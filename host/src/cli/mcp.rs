//! `maestro mcp`: the tools of a plugin folder served to an MCP client over stdin and stdout,
//! for a client that starts maestro as a subprocess; with `--jobs`, the pieces too, each call a
//! job of the store run by this process's runners (a task for a client of the tasks extension).
//!
//! Invariant: stdout carries the protocol and nothing else; what the command has to say
//! (plugins that failed to load, what it serves) goes to stderr. With `--jobs`, a job is only
//! ever claimed, run and saved through the store, as `maestro work` does: the client going away
//! (or Ctrl-C, or SIGTERM) stops the runners at their next step, and what they leave is taken
//! up by the next process on that store.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::Failure;
use super::folder::load_folder;
use super::setup::{EngineOptions, Setup};
use crate::engine::{CancelFlag, CatalogSlot, JobEvent, JobStatus, Observer, ToolCatalog};
use crate::mcp::{Jobs, Sealer, ToolServer, serve_stdio};
use crate::plugin::Runtime;
use crate::store::JobChange;
use crate::worker::{Worker, WorkerConfig};

#[derive(Debug, Args)]
pub struct McpCommand {
    #[command(flatten)]
    pub engine: EngineOptions,
    /// Also offer every piece of the pieces folder as a tool: a call starts a job in the store
    /// (--store), run by this process's runners, and is a task for a client of the tasks
    /// extension. Needs --pieces and --model.
    #[arg(long)]
    pub jobs: bool,
    /// With --jobs, jobs run at once [default: server.runners, else 2].
    #[arg(long, value_name = "N")]
    pub runners: Option<usize>,
    /// With --jobs, where people settle what a job waits for outside the client (a login):
    /// the address of a `maestro serve` on the same store [default: server.public_url; else
    /// the client is told the job's id].
    #[arg(long, value_name = "URL", env = "MAESTRO_PUBLIC_URL")]
    pub public_url: Option<String>,
}

pub async fn execute(command: &McpCommand, runtime: Runtime) -> Result<(), Failure> {
    let setup = Setup::resolve(&command.engine)?;
    let dir = setup.plugins.clone().ok_or_else(|| {
        Failure::usage(
            "maestro mcp serves a plugin folder: give --plugins DIR (or `plugins` in the config)",
        )
    })?;
    if command.jobs {
        return serve_with_jobs(command, &setup, runtime, dir).await;
    }
    if command.runners.is_some() {
        return Err(Failure::usage(
            "--runners runs the jobs of --jobs: give --jobs too",
        ));
    }
    if command.public_url.is_some() {
        eprintln!(
            "warning: --public-url (or MAESTRO_PUBLIC_URL) names where the jobs of --jobs are \
             answered; without --jobs it is not used"
        );
    }
    let policy = setup.policy(&runtime)?;
    let mut plugins = Vec::new();
    for loaded in load_folder(&runtime, &dir, &policy).await? {
        match loaded.plugin {
            Ok(plugin) => plugins.push(Arc::new(plugin)),
            Err(error) => eprintln!("warning: plugin {}: not loaded: {error}", loaded.name),
        }
    }
    let catalog = ToolCatalog::new(plugins).map_err(Failure::usage)?;
    eprintln!(
        "maestro mcp serves {} tools of {} on stdio",
        catalog.tool_names().len(),
        dir.display()
    );
    let sealer = Sealer::in_memory().map_err(Failure::failed)?;
    let server = ToolServer::new(Arc::new(CatalogSlot::new(Arc::new(catalog))), sealer);
    serve_stdio(server).await.map_err(Failure::failed)
}

/// The tools and the pieces, with the store's jobs run here until the client goes.
async fn serve_with_jobs(
    command: &McpCommand,
    setup: &Setup,
    runtime: Runtime,
    dir: std::path::PathBuf,
) -> Result<(), Failure> {
    let runners = command.runners.or(setup.server.runners).unwrap_or(2);
    if runners == 0 {
        let at = match command.runners {
            Some(_) => "--runners".to_owned(),
            None => setup.server_field("runners"),
        };
        return Err(Failure::usage(format!("{at}: must be at least 1")));
    }
    let lease_ms = setup.server.lease_ms.unwrap_or(30_000);
    if lease_ms < 30 {
        let at = setup.server_field("lease_ms");
        return Err(Failure::usage(format!("{at}: must be at least 30")));
    }
    let public_url = setup.public_url(command.public_url.as_deref())?;
    let store = setup.open_store()?;
    let (plugins, follower) = setup.plugin_host(&runtime, &store, dir.clone()).await?;
    if follower.is_none() {
        for warning in crate::serve::restore_parked_versions(store.as_ref(), &plugins).await {
            eprintln!("warning: {warning}");
        }
    }
    let engine = Arc::new(setup.live_engine(&runtime, &store, &plugins)?);
    let sealer = Sealer::with_store(store.clone()).map_err(Failure::failed)?;
    let wake = setup.wake.clone();
    let jobs = Arc::new(
        Jobs::new(
            engine.clone(),
            store.clone(),
            Arc::new(move |_job: &str, status| {
                if status == JobStatus::Pending {
                    wake.notify_one();
                }
            }),
        )
        .map_err(Failure::failed)?,
    );
    let heard = store
        .changes()
        .map(|changes| tokio::spawn(hear_other_nodes(changes, jobs.clone())));
    let worker = Worker::new(
        store.clone(),
        engine.clone(),
        WorkerConfig {
            runners,
            lease: Duration::from_millis(lease_ms),
            wait_expiry: setup.wait_expiry,
            ..WorkerConfig::default()
        },
        setup.wake.clone(),
    )
    .with_observer(Arc::new(SavesToCalls(jobs.clone())))
    .with_versions(plugins.clone());
    let stop = CancelFlag::default();
    let worker = {
        let (worker, stop) = (Arc::new(worker), stop.clone());
        tokio::spawn(async move { worker.run(stop, false).await })
    };
    let server = ToolServer::new(plugins.slot().clone(), sealer)
        .with_versions(plugins.clone())
        .with_jobs(jobs)
        .with_public_url(public_url);
    eprintln!(
        "maestro mcp serves the tools of {} and the pieces of {} on stdio; {runners} runner(s) on \
         store {}",
        dir.display(),
        setup.pieces.clone().unwrap_or_default().display(),
        setup.store
    );
    let served = tokio::select! {
        served = serve_stdio(server) => served,
        () = super::serve::wait_for_stop() => {
            eprintln!("stopping: runners finish their current step");
            Ok(())
        }
    };
    stop.cancel();
    let stats = worker.await.unwrap_or_default();
    for task in [heard, follower].into_iter().flatten() {
        task.abort();
    }
    eprintln!(
        "maestro mcp done: {} run(s), {} lost lease(s)",
        stats.runs, stats.lost_leases
    );
    served.map_err(Failure::failed)
}

/// Tells the calls that follow a job of each save of it this process makes.
struct SavesToCalls(Arc<Jobs>);

impl Observer for SavesToCalls {
    fn on_event(&self, _job_id: &str, _event: &JobEvent) {}

    fn on_saved(&self, job_id: &str, _status: JobStatus) {
        self.0.saved(job_id);
    }
}

/// Tells the calls that follow a job of each save another node makes, where the store hears.
async fn hear_other_nodes(
    mut changes: tokio::sync::broadcast::Receiver<JobChange>,
    jobs: Arc<Jobs>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match changes.recv().await {
            Ok(JobChange::Saved { job, .. }) => jobs.saved(&job),
            // A follower reads its job again within a second by itself.
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}
