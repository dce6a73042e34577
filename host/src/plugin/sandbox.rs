//! The per-call sandbox: the data of one `Store`, built from the plugin's
//! compiled policy, and the limits it enforces while the guest runs.
//!
//! Invariant: a `CallState` is built for exactly one call and dropped with
//! its `Store`; it grants only what the policy lists (no inherited env,
//! stdio, sockets, or directories) and records the first limit the guest
//! breaks in `limits.exceeded`, so the caller can name it whatever shape the
//! resulting trap takes. The limits cover the host's own work for the call
//! too: host resources are capped in number and in size in proportion to the
//! memory cap, and the CPU cap counts the time host calls take, not only guest
//! code.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::capabilities::{Capabilities, SubtaskSpawner};
use super::error::Limit;
use super::http::{HttpGate, HttpPolicy, OwnAddresses};
use super::policy::PluginPolicy;

/// Host memory one live resource (an HTTP header block, a buffered outgoing
/// body, a stream) may pin at most: `FIELD_BYTES` and two `BODY_CHUNK_BYTES`
/// chunks both fit.
const HOST_BYTES_PER_RESOURCE: u64 = 128 << 10;
/// Bytes of one header block (`wasi:http` fields) in host memory.
pub const FIELD_BYTES: usize = 64 << 10;
/// Bytes of one write to an outgoing HTTP body; one more chunk may wait in
/// the host's buffer.
pub const BODY_CHUNK_BYTES: usize = 64 << 10;
/// Largest `get-random-bytes` answer, allocated by the host before the guest
/// sees it.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;
/// Bounds of the live-resource cap, whatever the memory cap: enough for a
/// CPython or JavaScript guest's streams and pollables, few enough that a
/// full table stays small.
const MIN_RESOURCES: usize = 256;
const MAX_RESOURCES: usize = 32_768;
/// Fuel one host call costs when the policy sets a fuel budget: without it a
/// guest could spend the host's time in a loop of cheap wasm around costly
/// host calls.
pub const HOST_CALL_FUEL: u64 = 1_000;

/// A plugin's policy, prepared once at load and shared by its calls.
#[derive(Debug)]
pub struct CompiledPolicy {
    pub policy: PluginPolicy,
    pub http: Arc<HttpPolicy>,
    /// Host resources a call may hold at once: the memory cap divided by what
    /// one resource may pin, so host memory stays within about that cap too.
    pub max_resources: usize,
    /// Largest random block the guest may ask the host for.
    pub max_random_bytes: u64,
}

impl CompiledPolicy {
    pub fn new(policy: PluginPolicy) -> Self {
        let max_resources = usize::try_from(policy.memory_bytes / HOST_BYTES_PER_RESOURCE)
            .unwrap_or(MAX_RESOURCES)
            .clamp(MIN_RESOURCES, MAX_RESOURCES);
        Self {
            http: Arc::new(policy.http.clone()),
            max_random_bytes: MAX_RANDOM_BYTES.min(policy.memory_bytes),
            max_resources,
            policy,
        }
    }

    /// Whether the policy lets the plugin reach anything over HTTP; without
    /// it `wasi:http` is not linked at all.
    pub fn grants_http(&self) -> bool {
        !self.http.allow.is_empty()
    }
}

/// The `T` of every `Store<T>` the runtime creates.
pub struct CallState {
    /// Built when the guest first reaches WASI: a call that never does pays nothing for it.
    /// At once when the policy preopens directories, so that one that cannot be opened fails
    /// the call before the guest runs.
    wasi: Option<WasiCtx>,
    compiled: Arc<CompiledPolicy>,
    http: WasiHttpCtx,
    gate: HttpGate,
    table: ResourceTable,
    pub limits: CallLimits,
    pub capabilities: Capabilities,
    pub console: Console,
}

impl CallState {
    pub fn new(
        compiled: &Arc<CompiledPolicy>,
        plugin: &Arc<str>,
        capabilities: Capabilities,
        own: &Arc<OwnAddresses>,
    ) -> wasmtime::Result<Self> {
        let policy = &compiled.policy;
        let console = Console::new(policy.max_log_bytes);
        let wasi = if policy.dirs.is_empty() {
            None
        } else {
            let mut wasi = wasi_builder(compiled, &console);
            for dir in &policy.dirs {
                let perms = if dir.writable {
                    FsPerms::ReadWrite
                } else {
                    FsPerms::ReadOnly
                };
                wasi.preopened_dir(&dir.host, &dir.guest, perms)?;
            }
            Some(wasi.build())
        };
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(FIELD_BYTES);
        let mut table = ResourceTable::new();
        table.set_max_capacity(compiled.max_resources);
        Ok(Self {
            wasi,
            compiled: compiled.clone(),
            http,
            gate: HttpGate {
                policy: compiled.http.clone(),
                plugin: plugin.clone(),
                own: own.clone(),
                serving: true,
            },
            table,
            limits: CallLimits {
                memory_cap: policy.memory_bytes,
                memory_used: 0,
                cpu_meter: Arc::new(CpuMeter::default()),
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

impl CallState {
    /// Made ahead of its call: until [`CallState::serve`], no HTTP request leaves and (with no
    /// spawner given to its capabilities) no subtask starts.
    pub fn wait_for_call(&mut self) {
        self.gate.serving = false;
    }

    /// Acts for the call `call_id` of job `job_id` from now on.
    pub fn serve(
        &mut self,
        job_id: String,
        call_id: String,
        spawner: Option<Arc<dyn SubtaskSpawner>>,
    ) {
        self.capabilities.assign(job_id, call_id, spawner);
        self.gate.serving = true;
    }
}

/// WASI as the policy grants it, directories aside: the console for stdout and stderr, the
/// granted variables, no sockets, random blocks capped.
fn wasi_builder(compiled: &CompiledPolicy, console: &Console) -> WasiCtxBuilder {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(console.clone())
        .stderr(console.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .max_random_size(compiled.max_random_bytes);
    for (name, value) in &compiled.policy.env {
        wasi.env(name, value);
    }
    wasi
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let (compiled, console) = (&self.compiled, &self.console);
        // A policy with directories built its context in `new`.
        let ctx = self
            .wasi
            .get_or_insert_with(|| wasi_builder(compiled, console).build());
        WasiCtxView {
            ctx,
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
    /// Shared with the [`Metered`] future that runs the call.
    pub cpu_meter: Arc<CpuMeter>,
    cpu: Duration,
    deadline: Instant,
    timeout: Duration,
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
    /// runs: the processor time of the call so far (guest code and the host
    /// calls it made, however long each took), plus the wall-clock deadline.
    pub fn on_epoch(&mut self) -> wasmtime::Result<()> {
        if self.cpu_meter.used() > self.cpu {
            return Err(self.breach(Limit::Cpu { cap: self.cpu }));
        }
        if Instant::now() >= self.deadline {
            return Err(self.breach(Limit::WallClock { cap: self.timeout }));
        }
        Ok(())
    }

    /// Starts the call's clock now, `spent` of it already used: the time its instance took to
    /// instantiate before the call came.
    pub fn start_clock(&mut self, spent: Duration) {
        self.deadline = Instant::now() + self.timeout.saturating_sub(spent);
    }

    /// Wall-clock time the call has left.
    pub fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
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

/// The time a call has spent running on a thread: the sum of the polls of
/// its future. Guest code and synchronous host work happen inside a poll;
/// waits (an HTTP response, a blocking file read, a yield to the executor)
/// return `Pending` and are not counted.
#[derive(Debug)]
pub struct CpuMeter {
    origin: Instant,
    /// Nanoseconds of finished polls.
    used: AtomicU64,
    /// When the poll in progress started, in nanoseconds after `origin` plus
    /// one; 0 while no poll runs.
    running_since: AtomicU64,
}

impl Default for CpuMeter {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            used: AtomicU64::new(0),
            running_since: AtomicU64::new(0),
        }
    }
}

impl CpuMeter {
    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64 + 1
    }

    /// Time used so far, the poll in progress included.
    pub fn used(&self) -> Duration {
        let mut used = self.used.load(Ordering::Relaxed);
        let since = self.running_since.load(Ordering::Relaxed);
        if since != 0 {
            used += self.now().saturating_sub(since);
        }
        Duration::from_nanos(used)
    }

    fn enter(&self) {
        self.running_since.store(self.now(), Ordering::Relaxed);
    }

    fn leave(&self) {
        let since = self.running_since.swap(0, Ordering::Relaxed);
        self.used
            .fetch_add(self.now().saturating_sub(since), Ordering::Relaxed);
    }
}

/// A call's future, timed by its [`CpuMeter`].
pub struct Metered<F> {
    pub inner: F,
    pub meter: Arc<CpuMeter>,
}

impl<F: Future + Unpin> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.meter.enter();
        let result = Pin::new(&mut self.inner).poll(cx);
        self.meter.leave();
        result
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
