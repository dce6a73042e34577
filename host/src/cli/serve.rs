//! `maestro serve`: the workers, the HTTP API, the inbox page and the plugin watcher in one
//! process, until Ctrl-C or SIGTERM.
//!
//! Invariant: every setting comes from a flag, else the config file's `[server]` table, else
//! its documented default; a bad value stops the start with the file and field it came from.
//! The server prints one line saying where it listens, so scripts can wait for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::Failure;
use super::setup::{EngineOptions, Setup, TokenEntry};
use crate::plugin::Runtime;
use crate::serve::{Auth, Scope, ServeSettings, Token, restore_parked_versions};
use crate::store::JobStore;
use crate::worker::WorkerConfig;

const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

#[derive(Debug, Args)]
pub struct ServeCommand {
    #[command(flatten)]
    pub engine: EngineOptions,
    /// Address to listen on (IP:port; port 0 picks a free one) [default: server.listen, else
    /// 127.0.0.1:7070].
    #[arg(long, value_name = "ADDR", env = "MAESTRO_LISTEN")]
    pub listen: Option<String>,
    /// Jobs run at once [default: server.runners, else 4].
    #[arg(long)]
    pub runners: Option<usize>,
    /// The address people reach this server at, for the links MCP clients are given (behind a
    /// TLS proxy: `https://maestro.example.com`) [default: server.public_url, else the address
    /// each request named, over http://].
    #[arg(long, value_name = "URL", env = "MAESTRO_PUBLIC_URL")]
    pub public_url: Option<String>,
}

pub async fn execute(command: &ServeCommand, runtime: Runtime) -> Result<(), Failure> {
    let setup = Setup::resolve(&command.engine)?;
    let server = &setup.server;
    let at = |field: &str| setup.server_field(field);
    let listen_text = command
        .listen
        .clone()
        .or_else(|| server.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        Failure::usage(format!(
            "{}: `{listen_text}` is not an address: give IP:port, like {DEFAULT_LISTEN}",
            at("listen")
        ))
    })?;
    let auth = auth_for(&setup, listen)?;
    let public_url = setup.public_url(command.public_url.as_deref())?;
    let runners = command.runners.or(server.runners).unwrap_or(4);
    if runners == 0 {
        return Err(Failure::usage(format!(
            "{}: must be at least 1",
            at("runners")
        )));
    }
    let lease_ms = server.lease_ms.unwrap_or(30_000);
    if lease_ms < 30 {
        return Err(Failure::usage(format!(
            "{}: must be at least 30",
            at("lease_ms")
        )));
    }
    let max_upload_mib = server.max_upload_mib.unwrap_or(64);
    if max_upload_mib == 0 {
        return Err(Failure::usage(format!(
            "{}: must be at least 1",
            at("max_upload_mib")
        )));
    }
    let max_event_streams = server
        .max_event_streams
        .unwrap_or(crate::serve::DEFAULT_EVENT_STREAMS);
    if max_event_streams == 0 {
        return Err(Failure::usage(format!(
            "{}: must be at least 1",
            at("max_event_streams")
        )));
    }
    let retain_finished = server
        .retain_finished
        .as_deref()
        .map(super::jobs::parse_age)
        .transpose()
        .map_err(|message| Failure::usage(format!("{}: {message}", at("retain_finished"))))?;
    let Some(plugin_dir) = setup.plugins.clone() else {
        return Err(Failure::usage(
            "no plugin folder: give --plugins, MAESTRO_PLUGIN_DIR, or `plugins` in --config",
        ));
    };
    if !plugin_dir.is_dir() {
        return Err(Failure::usage(format!(
            "plugin folder {} does not exist",
            plugin_dir.display()
        )));
    }
    // Before the first plugin loads, so its load is counted.
    crate::telemetry::Exporter::install().map_err(Failure::failed)?;
    let store = setup.open_store()?;
    let (plugins, follower) = setup
        .plugin_host(&runtime, &store, plugin_dir.clone())
        .await?;
    // On a store of its own the server finds every parked call's version now, to warn early
    // of one it cannot resume. On a shared store that would read every parked job of the
    // cluster at each start: there a runner fetches a missing version when it claims the job.
    if follower.is_none() {
        for warning in restore_parked_versions(store.as_ref(), &plugins).await {
            eprintln!("warning: {warning}");
        }
    }
    let engine = setup.live_engine(&runtime, &store, &plugins)?;
    let settings = ServeSettings {
        listen,
        auth,
        worker: WorkerConfig {
            runners,
            lease: Duration::from_millis(lease_ms),
            wait_expiry: setup.wait_expiry,
            ..WorkerConfig::default()
        },
        debounce: Duration::from_millis(server.watch_debounce_ms.unwrap_or(10)),
        max_upload_bytes: max_upload_mib << 20,
        retain_finished,
        max_event_streams,
        public_url,
    };
    let open = settings.auth.is_open();
    let running = crate::serve::start(
        store.clone() as Arc<dyn JobStore>,
        Arc::new(engine),
        plugins,
        setup.wake.clone(),
        settings,
    )
    .await
    .map_err(Failure::usage)?;
    eprintln!(
        "maestro serves http://{} (inbox at /, API at /v1, OpenAPI at /openapi.json, metrics at /metrics, MCP at /mcp){}; plugins \
         from {}, store {}",
        running.addr,
        if open {
            ", no token needed on loopback"
        } else {
            ", bearer token required"
        },
        plugin_dir.display(),
        setup.store
    );
    wait_for_stop().await;
    eprintln!("stopping: runners finish their current step; open event streams get 2 s");
    let stats = running.stop(Duration::from_secs(2)).await;
    if let Some(follower) = follower {
        follower.abort();
    }
    eprintln!(
        "server done: {} run(s), {} lost lease(s)",
        stats.runs, stats.lost_leases
    );
    Ok(())
}

/// The API's tokens from `server.tokens` and `MAESTRO_API_TOKEN`, checked for a server that
/// listens on `listen`.
pub(super) fn auth_for(setup: &Setup, listen: SocketAddr) -> Result<Auth, Failure> {
    let at = |field: &str| setup.server_field(field);
    let mut tokens = Vec::new();
    for (index, entry) in setup.server.tokens.iter().enumerate() {
        let scope = match entry {
            TokenEntry::Full(_) => Scope::Admin,
            TokenEntry::Scoped { scope, .. } => Scope::parse(scope).ok_or_else(|| {
                let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                Failure::usage(format!(
                    "{}: unknown scope `{scope}`; one of: {}",
                    at(&format!("tokens[{index}].scope")),
                    known.join(", ")
                ))
            })?,
        };
        tokens.push(Token {
            secret: entry.secret().to_owned(),
            scope,
        });
    }
    if let Ok(secret) = std::env::var("MAESTRO_API_TOKEN") {
        tokens.push(Token {
            secret,
            scope: Scope::Admin,
        });
    }
    Auth::new(tokens, listen).map_err(|message| match &setup.config {
        Some(file) => Failure::usage(format!("{}: {message}", file.display())),
        None => Failure::usage(message),
    })
}

pub(super) async fn wait_for_stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
