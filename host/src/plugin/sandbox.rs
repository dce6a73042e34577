//! The per-call sandbox: the data of one `Store`, built from the plugin's
//! compiled policy, and the limits it enforces while the guest runs.
//!
//! Invariant: a `CallState` is built for exactly one call and dropped with
//! its `Store`; it grants only what the policy lists (no inherited env,
//! stdio, sockets, or directories) and records the first limit the guest
//! breaks in `limits.exceeded`, so the caller can name it whatever shape the
//! resulting trap takes.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::capabilities::Capabilities;
use super::error::Limit;
use super::http::{HttpGate, HttpPolicy};
use super::policy::PluginPolicy;

/// A plugin's policy, prepared once at load and shared by its calls.
#[derive(Debug)]
pub struct CompiledPolicy {
    pub policy: PluginPolicy,
    pub http: Arc<HttpPolicy>,
    /// Epoch ticks of guest execution allowed per call.
    pub cpu_ticks: u64,
}

impl CompiledPolicy {
    pub fn new(policy: PluginPolicy, tick: std::time::Duration) -> Self {
        let cpu_ticks = (policy.cpu.as_nanos() / tick.as_nanos().max(1)).max(1) as u64;
        Self {
            http: Arc::new(policy.http.clone()),
            policy,
            cpu_ticks,
        }
    }
}

/// The `T` of every `Store<T>` the runtime creates.
pub struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    gate: HttpGate,
    table: ResourceTable,
    pub limits: CallLimits,
    pub capabilities: Capabilities,
    pub console: Console,
}

impl CallState {
    pub fn new(
        compiled: &CompiledPolicy,
        plugin: &Arc<str>,
        capabilities: Capabilities,
    ) -> wasmtime::Result<Self> {
        let policy = &compiled.policy;
        let console = Console::new(policy.max_log_bytes);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(console.clone())
            .stderr(console.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for (name, value) in &policy.env {
            wasi.env(name, value);
        }
        for dir in &policy.dirs {
            let perms = if dir.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&dir.host, &dir.guest, perms)?;
        }
        Ok(Self {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            gate: HttpGate {
                policy: compiled.http.clone(),
                plugin: plugin.clone(),
            },
            table: ResourceTable::new(),
            limits: CallLimits {
                memory_cap: policy.memory_bytes,
                memory_used: 0,
                cpu_ticks_cap: compiled.cpu_ticks,
                cpu_ticks: 0,
                cpu: policy.cpu,
                deadline: Instant::now() + policy.timeout,
                timeout: policy.timeout,
                exceeded: None,
            },
            capabilities,
            console,
        })
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

/// Memory, CPU and wall-clock accounting of one call.
pub struct CallLimits {
    memory_cap: u64,
    memory_used: u64,
    cpu_ticks_cap: u64,
    cpu_ticks: u64,
    cpu: std::time::Duration,
    deadline: Instant,
    timeout: std::time::Duration,
    /// The first limit the guest broke.
    pub exceeded: Option<Limit>,
}

/// The error a limit check raises inside the guest; the trap it causes is
/// classified through `CallLimits::exceeded`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LimitExceeded(pub Limit);

impl CallLimits {
    fn breach(&mut self, limit: Limit) -> wasmtime::Error {
        self.exceeded.get_or_insert(limit.clone());
        wasmtime::Error::new(LimitExceeded(limit))
    }

    /// Called by the epoch callback about once per tick while guest code
    /// runs (a host call that blocks for many ticks counts as one): a count
    /// of ticks spent executing the guest, plus the wall-clock deadline.
    pub fn on_epoch(&mut self) -> wasmtime::Result<()> {
        self.cpu_ticks += 1;
        if self.cpu_ticks > self.cpu_ticks_cap {
            return Err(self.breach(Limit::Cpu { cap: self.cpu }));
        }
        if Instant::now() >= self.deadline {
            return Err(self.breach(Limit::WallClock { cap: self.timeout }));
        }
        Ok(())
    }

    /// Records that the wall-clock cap ended the call while it waited in the host.
    pub fn timed_out(&mut self) -> Limit {
        self.exceeded
            .get_or_insert(Limit::WallClock { cap: self.timeout })
            .clone()
    }
}

impl wasmtime::ResourceLimiter for CallLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory_used + (desired - current) as u64;
        if total > self.memory_cap {
            return Err(self.breach(Limit::Memory {
                cap_bytes: self.memory_cap,
            }));
        }
        self.memory_used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Table elements are pointers in host memory: bound them by the same
        // cap so a guest cannot use tables to get around it.
        Ok((desired as u64).saturating_mul(8) <= self.memory_cap)
    }
}

/// The guest's stdout and stderr, kept (up to a cap) for error reports and
/// the log; past the cap bytes are dropped, never a trap.
#[derive(Clone)]
pub struct Console {
    buffer: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl Console {
    fn new(cap: usize) -> Self {
        Self {
            buffer: Arc::default(),
            cap,
        }
    }

    /// The captured text, lossily decoded.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().expect("console lock")).into_owned()
    }
}

impl IsTerminal for Console {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Console {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for Console {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut buffer = self.buffer.lock().expect("console lock");
        let room = self.cap.saturating_sub(buffer.len());
        buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
