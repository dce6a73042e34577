//! The plugin runtime: one wasmtime `Engine` (pooling allocator, epoch
//! interruption, optional fuel), two `Linker`s with WASI 0.2 and the
//! `maestro:tool/host` capabilities of every contract version (one with
//! `wasi:http` for plugins granted
//! HTTP, one without for the rest), the compiled-code cache, and the epoch
//! ticker that drives CPU and wall-clock limits.
//!
//! Invariant: the engine configuration is fixed at construction, so every
//! compiled artifact and every `InstancePre` made from it stays valid for the
//! runtime's life; the ticker runs while a call is active and for [`LINGER`] after the last one
//! ended, and rests otherwise.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::cache::CompiledCache;
use super::capabilities::SubtaskSpawner;
use super::error::LoadError;
use super::http::OwnAddresses;
use super::instances::SpareBudget;
use super::loaded::Plugin;
use super::policy::{MAX_MEMORY_MIB, PluginPolicy};
use super::sandbox::CallState;
use super::spare_maker::SpareMaker;

/// Length of one epoch tick: the granularity of the CPU and wall-clock caps.
pub const TICK: Duration = Duration::from_millis(1);

/// How long the ticker keeps ticking once no call is active: calls that follow one another (an
/// MCP client's, a busy worker's) find it running, instead of each waking it from its rest with a
/// system call and a context switch.
pub const LINGER: Duration = Duration::from_millis(100);

/// How the engine is built. Changing any field changes the compiled-code
/// cache key.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// Meter fuel, so policies can set deterministic `fuel` budgets. Costs a
    /// little speed on every call.
    pub fuel: bool,
    /// Component instances calls may have at once (concurrent calls); the pool holds a quarter
    /// more for spare instances when they are on.
    pub max_instances: u32,
    /// Bytes of each linear memory (and async stack) kept resident between
    /// calls and reset in place instead of being returned to the kernel.
    pub keep_resident: usize,
    /// Instantiate each plugin's next instance between calls, so that a call finds it ready
    /// (see [`SpareBudget`] for how many may wait); `false` instantiates each on its call's path.
    pub spare_instances: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            fuel: false,
            max_instances: 256,
            keep_resident: 1 << 20,
            spare_instances: true,
        }
    }
}

/// `$MAESTRO_CACHE_DIR`, else `$XDG_CACHE_HOME/maestro/compiled`, else
/// `~/.cache/maestro/compiled`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MAESTRO_CACHE_DIR") {
        return Some(dir.into());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("maestro").join("compiled"))
}

/// Shared by every plugin loaded into it; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(super) inner: Arc<RuntimeInner>,
}

pub(super) struct RuntimeInner {
    pub engine: Engine,
    /// WASI, `wasi:http` and the host interface.
    pub linker: Linker<CallState>,
    /// WASI and the host interface: a plugin whose policy grants no HTTP never
    /// reaches the host's `wasi:http` code (its header blocks and bodies).
    pub linker_without_http: Linker<CallState>,
    pub cache: Option<CompiledCache>,
    pub ticker: EpochTicker,
    pub fuel: bool,
    pub spawner: Mutex<Option<Arc<dyn SubtaskSpawner>>>,
    /// The server this host runs, which no plugin may reach over HTTP.
    pub own_addresses: Arc<OwnAddresses>,
    /// The instances that may wait, instantiated, for their plugin's next call.
    pub spares: SpareBudget,
    /// The idle-priority thread spares are made on.
    pub spare_maker: SpareMaker,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Self> {
        let calls = config.max_instances.max(1);
        let spares = SpareBudget::new(config.spare_instances, calls);
        let engine = Engine::new(&engine_config(&config, spares.pool_instances(calls)))?;
        let mut linker_without_http = Linker::<CallState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker_without_http)?;
        super::wit::add_to_linker(&mut linker_without_http)?;
        let mut linker = linker_without_http.clone();
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        let cache = match &config.cache_dir {
            Some(dir) => Some(CompiledCache::new(dir.clone(), &engine).map_err(|err| {
                anyhow::anyhow!("cannot use cache directory {}: {err}", dir.display())
            })?),
            None => None,
        };
        let ticker = EpochTicker::start(engine.clone());
        Ok(Self {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                linker_without_http,
                cache,
                ticker,
                fuel: config.fuel,
                spawner: Mutex::new(None),
                own_addresses: Arc::new(OwnAddresses::default()),
                spares,
                spare_maker: SpareMaker::start()?,
            }),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Where compiled components are cached, if anywhere.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.inner.cache.as_ref().map(CompiledCache::dir)
    }

    /// Keeps every plugin's HTTP away from `addr`, where this host serves its API: a plugin
    /// allowed `127.0.0.1` must not answer its own job's waits through it.
    pub fn forbid_destination(&self, addr: std::net::SocketAddr) {
        self.inner.own_addresses.add(addr);
    }

    /// Lets `host.spawn-subtask` start jobs (for plugins whose policy grants it).
    pub fn set_subtask_spawner(&self, spawner: Arc<dyn SubtaskSpawner>) {
        *self.inner.spawner.lock().expect("spawner lock") = Some(spawner);
    }

    /// Loads the component at `path`; the plugin is named after the file stem.
    pub async fn load_file(&self, path: &Path, policy: PluginPolicy) -> Result<Plugin, LoadError> {
        let bytes = super::read_component(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into());
        let mut plugin = self.load(&name, &bytes, policy).await?;
        plugin.source = Some(path.to_path_buf());
        Ok(plugin)
    }

    /// Loads a component: checks it, compiles it (or takes it from the
    /// cache), links it against the world, and calls `describe`.
    pub async fn load(
        &self,
        name: &str,
        bytes: &[u8],
        policy: PluginPolicy,
    ) -> Result<Plugin, LoadError> {
        self.load_owned(name, bytes.to_vec(), None, policy).await
    }

    /// [`Runtime::load`] for bytes the caller hands over, with their [`content_hash`] when the
    /// caller already has it: a large component is then neither copied nor hashed again.
    ///
    /// [`content_hash`]: super::content_hash
    pub async fn load_owned(
        &self,
        name: &str,
        bytes: Vec<u8>,
        content_hash: Option<String>,
        policy: PluginPolicy,
    ) -> Result<Plugin, LoadError> {
        if policy.fuel.is_some() && !self.inner.fuel {
            return Err(LoadError::Policy(format!(
                "the policy of `{name}` sets a fuel budget but this runtime does not meter fuel"
            )));
        }
        Plugin::load(self.clone(), name, bytes, content_hash, policy).await
    }
}

/// The engine of `config`, its pool holding `instances` component instances.
fn engine_config(config: &RuntimeConfig, instances: u32) -> Config {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(instances)
        // Components from componentize-py and componentize-js have many
        // core instances, memories and tables each.
        .max_core_instances_per_component(64)
        .max_memories_per_component(16)
        .max_tables_per_component(16)
        .total_core_instances(instances * 8)
        .total_memories(instances * 2)
        .total_tables(instances * 4)
        .total_stacks(instances)
        .table_elements(200_000)
        .max_core_instance_size(4 << 20)
        .max_memory_size((MAX_MEMORY_MIB << 20) as usize)
        .linear_memory_keep_resident(config.keep_resident)
        .table_keep_resident(config.keep_resident / 16)
        .async_stack_keep_resident(config.keep_resident / 4)
        .pagemap_scan(Enabled::Auto)
        .decommit_batch_size(32);

    let mut wasm = Config::new();
    wasm.epoch_interruption(true)
        .consume_fuel(config.fuel)
        .memory_init_cow(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasm
}

/// Increments the engine epoch every `TICK` while calls are active and for [`LINGER`] after,
/// and rests otherwise.
pub(super) struct EpochTicker {
    active: Arc<AtomicUsize>,
    /// The thread rests (or is about to): a call that starts must wake it.
    resting: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Keeps the ticker running for the life of one call.
pub(super) struct ActiveCall(Arc<AtomicUsize>);

impl Drop for ActiveCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl EpochTicker {
    fn start(engine: Engine) -> Self {
        let active = Arc::new(AtomicUsize::new(0));
        let resting = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (active, resting, stop) = (active.clone(), resting.clone(), stop.clone());
            let linger_ticks = (LINGER.as_micros() / TICK.as_micros()) as u32;
            std::thread::Builder::new()
                .name("maestro-epoch".into())
                .spawn(move || {
                    let mut idle_ticks = 0u32;
                    while !stop.load(Ordering::Acquire) {
                        if active.load(Ordering::SeqCst) > 0 {
                            idle_ticks = 0;
                        } else if idle_ticks >= linger_ticks {
                            // Announced before the last look at `active`, which `enter` bumps
                            // before it looks at `resting`: one of the two sees the other.
                            resting.store(true, Ordering::SeqCst);
                            if active.load(Ordering::SeqCst) == 0 {
                                std::thread::park_timeout(Duration::from_millis(250));
                            }
                            // A call that woke it cleared `resting`: it lingers after that call
                            // too, however short. The timeout of the rest does not.
                            if !resting.swap(false, Ordering::SeqCst) {
                                idle_ticks = 0;
                            }
                            continue;
                        } else {
                            idle_ticks += 1;
                        }
                        std::thread::sleep(TICK);
                        engine.increment_epoch();
                    }
                })
                .expect("spawn epoch ticker thread")
        };
        Self {
            active,
            resting,
            stop,
            thread: Some(thread),
        }
    }

    pub fn enter(&self) -> ActiveCall {
        if self.active.fetch_add(1, Ordering::SeqCst) == 0
            && self.resting.swap(false, Ordering::SeqCst)
            && let Some(thread) = &self.thread
        {
            thread.thread().unpark();
        }
        ActiveCall(self.active.clone())
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Waits for the ticker to be (or not be) resting; false after ten seconds.
    fn wait_until_resting(ticker: &EpochTicker, resting: bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if ticker.resting.load(Ordering::SeqCst) == resting {
                return true;
            }
            std::thread::sleep(TICK);
        }
        false
    }

    #[test]
    fn the_ticker_rests_when_no_call_is_active_and_never_during_a_call() {
        let ticker = EpochTicker::start(Engine::default());
        assert!(wait_until_resting(&ticker, true), "an idle ticker rests");
        let call = ticker.enter();
        assert!(wait_until_resting(&ticker, false), "a call wakes it");
        // Longer than the linger: a ticker that rested during a call would be seen here.
        std::thread::sleep(LINGER * 3);
        assert!(
            !ticker.resting.load(Ordering::SeqCst),
            "it never rests during a call"
        );
        drop(call);
        assert!(
            wait_until_resting(&ticker, true),
            "it rests once no call is active"
        );
    }
}
