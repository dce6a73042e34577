//! The `maestro:tool/host` interface: capabilities the host offers guests.
//!
//! Invariant: each capability checks its policy grant on every use and
//! answers a denial with an error value (never a trap); `log` is bounded per
//! call so a guest cannot flood the host's log, and `spawn-subtask` in count
//! per call and in input size.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The levels of `host.log`, the same in every contract version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Starts child jobs for `host.spawn-subtask`. The job layer implements it;
/// a runtime without one answers every spawn with an error.
pub trait SubtaskSpawner: Send + Sync {
    fn spawn(
        &self,
        parent: SpawnContext,
        piece: String,
        input: String,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;
}

/// Who asks for a subtask.
#[derive(Debug, Clone)]
pub struct SpawnContext {
    pub plugin: Arc<str>,
    pub job_id: String,
    pub call_id: String,
    /// 0 for the first spawn of this call, 1 for the next, …: with the call id, a key that
    /// stays the same when a call is run again, so a spawner can make spawning idempotent.
    pub index: u32,
}

/// Subtasks one call may start.
pub const MAX_SPAWNS_PER_CALL: u32 = 64;

/// The capability state of one call.
pub struct Capabilities {
    pub plugin: Arc<str>,
    pub job_id: String,
    pub call_id: String,
    pub spawn_granted: bool,
    pub spawner: Option<Arc<dyn SubtaskSpawner>>,
    log_budget: usize,
    log_dropped: bool,
    spawned: u32,
    /// Bytes a subtask's input may have: what the plugin may hand out at all.
    max_input_bytes: usize,
}

impl Capabilities {
    pub fn new(
        plugin: Arc<str>,
        job_id: String,
        call_id: String,
        spawn_granted: bool,
        spawner: Option<Arc<dyn SubtaskSpawner>>,
        log_budget: usize,
        max_input_bytes: usize,
    ) -> Self {
        Self {
            plugin,
            job_id,
            call_id,
            spawn_granted,
            spawner,
            log_budget,
            log_dropped: false,
            spawned: 0,
            max_input_bytes,
        }
    }

    /// Gives an instance made ahead of its call (with no ids and no spawner) the call it serves.
    /// Spawns refused before do not count: the call's first subtask has index 0, as it would
    /// on an instance made on the call's path.
    pub fn assign(
        &mut self,
        job_id: String,
        call_id: String,
        spawner: Option<Arc<dyn SubtaskSpawner>>,
    ) {
        self.job_id = job_id;
        self.call_id = call_id;
        self.spawner = spawner;
        self.spawned = 0;
    }
}

/// `host.log` and `host.spawn-subtask`, served the same to every contract version: each
/// binding module's `Host` implementation calls these.
impl Capabilities {
    pub fn log(&mut self, level: LogLevel, message: String) {
        let caps = self;
        if message.len() > caps.log_budget {
            if !caps.log_dropped {
                caps.log_dropped = true;
                tracing::warn!(plugin = %caps.plugin, call = %caps.call_id, "log budget of this call is spent; further messages dropped");
            }
            return;
        }
        caps.log_budget -= message.len();
        let (plugin, call) = (&*caps.plugin, caps.call_id.as_str());
        match level {
            LogLevel::Trace => tracing::trace!(target: "maestro::guest", plugin, call, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "maestro::guest", plugin, call, "{message}"),
            LogLevel::Info => tracing::info!(target: "maestro::guest", plugin, call, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "maestro::guest", plugin, call, "{message}"),
            LogLevel::Error => tracing::error!(target: "maestro::guest", plugin, call, "{message}"),
        }
    }

    pub fn spawn_subtask(
        &mut self,
        piece: String,
        input: String,
    ) -> impl Future<Output = Result<String, String>> + Send + use<> {
        let caps = self;
        let index = caps.spawned;
        caps.spawned += 1;
        let decision = if !caps.spawn_granted {
            Err(format!(
                "spawn-subtask denied: the policy of plugin `{}` does not grant spawn_subtasks",
                caps.plugin
            ))
        } else if index >= MAX_SPAWNS_PER_CALL {
            Err(format!(
                "spawn-subtask refused: this call has started {MAX_SPAWNS_PER_CALL} subtasks, \
                 the most one call may"
            ))
        } else if input.len() > caps.max_input_bytes {
            Err(format!(
                "spawn-subtask refused: the input has {} bytes, more than the {} the policy of \
                 plugin `{}` allows (max_output_bytes)",
                input.len(),
                caps.max_input_bytes,
                caps.plugin
            ))
        } else if let Some(spawner) = caps.spawner.clone() {
            Ok((
                spawner,
                SpawnContext {
                    plugin: caps.plugin.clone(),
                    job_id: caps.job_id.clone(),
                    call_id: caps.call_id.clone(),
                    index,
                },
            ))
        } else {
            Err("spawn-subtask unavailable: this host runs no jobs (use `maestro run` or `maestro serve`)".to_string())
        };
        async move {
            let (spawner, parent) = decision?;
            spawner.spawn(parent, piece, input).await
        }
    }
}
