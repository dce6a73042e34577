//! `maestro work`: run the jobs of a store with N concurrent runners, until Ctrl-C (or, with
//! `--until-idle`, until no job is pending or running).
//!
//! Invariant: to jobs this command only claims, runs and saves; everything it does to a job is
//! in the store, so any number of `maestro work` processes may share one store file, and
//! killing one loses no job (its leases expire and the others take over). On a store shared by
//! many nodes (PostgreSQL) its plugin folder follows the versions the other nodes install (it
//! publishes its own folder's at start), and a call parked on a version it never loaded
//! resumes on that version, fetched from the store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::Failure;
use super::serve::auth_for;
use super::setup::{EngineOptions, Setup};
use crate::engine::{CancelFlag, JobEvent, Observer};
use crate::plugin::Runtime;
use crate::serve::Scrape;
use crate::store::JobStore;
use crate::telemetry::Exporter;
use crate::worker::{Worker, WorkerConfig};

#[derive(Debug, Args)]
pub struct WorkCommand {
    #[command(flatten)]
    pub engine: EngineOptions,
    /// Jobs run at once.
    #[arg(long, default_value_t = 4)]
    pub runners: usize,
    /// How long a claim lasts without renewal; a crashed worker's jobs are taken up again after
    /// this long.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub lease_ms: u64,
    /// Stop once no job is pending or running (jobs that wait for a human are left waiting).
    #[arg(long)]
    pub until_idle: bool,
    /// Serve this worker's metrics at http://ADDR/metrics (Prometheus's text format), behind
    /// `server.tokens` like `maestro serve`'s; without tokens only on loopback.
    #[arg(long, value_name = "ADDR", env = "MAESTRO_METRICS")]
    pub metrics: Option<String>,
}

pub async fn execute(command: &WorkCommand, runtime: Runtime) -> Result<(), Failure> {
    if command.lease_ms < 30 {
        return Err(Failure::usage("--lease-ms must be at least 30"));
    }
    let setup = Setup::resolve(&command.engine)?;
    let store = setup.open_store()?;
    let metrics = match &command.metrics {
        Some(addr) => Some(serve_metrics(&setup, addr, store.clone()).await?),
        None => None,
    };
    let (engine, plugins, follower) = match setup.plugins.clone() {
        Some(dir) if store.changes().is_some() => {
            let (plugins, follower) = setup.plugin_host(&runtime, &store, dir).await?;
            let engine = setup.live_engine(&runtime, &store, &plugins)?;
            (engine, Some(plugins), follower)
        }
        _ => (setup.engine_all(&runtime, &store).await?, None, None),
    };
    let config = WorkerConfig {
        runners: command.runners.max(1),
        lease: Duration::from_millis(command.lease_ms),
        wait_expiry: setup.wait_expiry,
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(store, Arc::new(engine), config, setup.wake.clone())
        .with_observer(Arc::new(StepLog));
    if let Some(plugins) = plugins {
        worker = worker.with_versions(plugins);
    }
    let worker = Arc::new(worker);
    let stop = CancelFlag::default();
    let on_interrupt = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("stopping: runners finish their current step of work and exit");
            on_interrupt.cancel();
        }
    });
    let stats = worker.run(stop, command.until_idle).await;
    if let Some(follower) = follower {
        follower.abort();
    }
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    eprintln!(
        "worker done: {} run(s), {} lost lease(s)",
        stats.runs, stats.lost_leases
    );
    match stats.gave_up {
        Some(reason) => Err(Failure::failed(format!(
            "{reason}; stopped before every job ran, as --until-idle asks: the jobs stay in the \
             store, and a worker started once it answers again takes them up"
        ))),
        None => Ok(()),
    }
}

/// Starts the metrics listener on `addr`; says where it listens.
async fn serve_metrics(
    setup: &Setup,
    addr: &str,
    store: Arc<dyn JobStore>,
) -> Result<tokio::task::JoinHandle<()>, Failure> {
    let listen: SocketAddr = addr.parse().map_err(|_| {
        Failure::usage(format!(
            "--metrics: `{addr}` is not an address: give IP:port, like 127.0.0.1:9464"
        ))
    })?;
    let auth = auth_for(setup, listen)?;
    let exporter = Exporter::install().map_err(Failure::failed)?;
    let (bound, task) = crate::serve::serve_metrics(listen, auth, Scrape { store, exporter })
        .await
        .map_err(Failure::usage)?;
    eprintln!("metrics at http://{bound}/metrics");
    Ok(task)
}

/// One stderr line per park and end (and every event with `-v`).
struct StepLog;

impl Observer for StepLog {
    fn on_event(&self, job_id: &str, event: &JobEvent) {
        match event {
            JobEvent::Parked {
                status,
                resume_movement,
                ..
            } => {
                eprintln!("{job_id}: parked {status}, resumes at {resume_movement}");
            }
            JobEvent::Finished { status, detail } => eprintln!("{job_id}: {status}: {detail}"),
            other => tracing::info!(
                job = job_id,
                "{}",
                serde_json::to_string(other).unwrap_or_default()
            ),
        }
    }
}
