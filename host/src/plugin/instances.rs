//! The instances calls run in: a fresh `Store` under the plugin's policy for every call,
//! instantiated from the shared `InstancePre`, and a spare one instantiated between calls, so
//! that the next call finds its instance ready instead of making it on its own path.
//!
//! Invariant: an instance serves one call and is dropped after it. A spare is instantiated in a
//! fresh store after a call ended, on the runtime's idle-priority thread
//! ([`SpareMaker`](super::spare_maker::SpareMaker)), with the epoch ticker running, under the
//! limits of the call that will take it: the memory, fuel and processor time its instantiation
//! used, and the wall-clock time it took, count against that call. It gets its job and call ids,
//! the subtask spawner and its HTTP only when a call takes it, so nothing it runs before can
//! start a job or send a request. Spares have pool slots of their own ([`SpareBudget`]), so they
//! never take one from a call; a plugin has one spare at a time, drops it after [`SPARE_IDLE`]
//! unused, makes none after one failed until a call instantiated on its own path succeeds, and
//! none at all when its policy grants directories (those are opened when a call starts, so that
//! the call sees the directory as it is then).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use wasmtime::{CallHook, PoolConcurrencyLimitError, Store, StoreContextMut, Trap, UpdateDeadline};

use super::capabilities::{Capabilities, SubtaskSpawner};
use super::error::CallError;
use super::runtime::Runtime;
use super::sandbox::{CallState, CompiledPolicy, HOST_CALL_FUEL, Metered};
use super::wit::{ToolInstance, ToolPre};

/// How long a spare waits for a call before it is dropped: a plugin called now and then keeps
/// one, a version no longer called (an older one kept for its parked calls) gives its slot back.
pub const SPARE_IDLE: Duration = Duration::from_secs(60);

/// How a plugin's calls get their instances.
pub(super) struct Instances {
    pub pre: ToolPre,
    policy: Arc<CompiledPolicy>,
    runtime: Runtime,
    plugin: Arc<str>,
    spare: Mutex<Option<Spare>>,
    /// False for a plugin granted directories.
    spares_allowed: bool,
    /// Set when a spare failed to instantiate, cleared when a call instantiated on its own path
    /// succeeds: a plugin whose instantiation fails makes no spare for every call.
    paused: AtomicBool,
    /// A spare is on its way: a call that ends meanwhile starts none.
    refilling: AtomicBool,
    /// A timer watches the waiting spare, to drop it once idle; set and cleared under the
    /// `spare` lock, so a spare published while it is set is seen by that timer.
    watched: AtomicBool,
    /// [`SPARE_IDLE`] in milliseconds; tests shorten it.
    idle_ms: AtomicU64,
    /// Calls that took a spare.
    taken: AtomicUsize,
}

/// An instance made ahead of the call that will take it.
struct Spare {
    store: Store<CallState>,
    instance: ToolInstance,
    /// Wall-clock time from the start of its store to its instance: spent of the call's cap.
    took: Duration,
    /// When it began to wait for a call.
    ready: Instant,
    _held: SpareHeld,
}

/// Clears `refilling` however the task that makes a spare ends, dropped or panicking included.
struct Refilling(Arc<Instances>);

impl Drop for Refilling {
    fn drop(&mut self) {
        self.0.refilling.store(false, Ordering::Release);
    }
}

impl Instances {
    pub fn new(
        pre: ToolPre,
        policy: Arc<CompiledPolicy>,
        runtime: Runtime,
        plugin: Arc<str>,
    ) -> Self {
        let spares_allowed = policy.policy.dirs.is_empty();
        Self {
            pre,
            policy,
            runtime,
            plugin,
            spare: Mutex::new(None),
            spares_allowed,
            paused: AtomicBool::new(false),
            refilling: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            idle_ms: AtomicU64::new(SPARE_IDLE.as_millis() as u64),
            taken: AtomicUsize::new(0),
        }
    }

    /// Whether a spare waits for the next call.
    pub fn spare_waiting(&self) -> bool {
        self.spare.lock().expect("spare lock").is_some()
    }

    /// A fresh store for the call `call_id` of job `job_id`.
    pub fn fresh_store(&self, job_id: &str, call_id: &str) -> Result<Store<CallState>, CallError> {
        self.store(job_id, call_id, self.spawner())
    }

    /// The spare instance, if one waits, given to the call `call_id` of job `job_id`: its clock
    /// starts now, less the time the instance took to make.
    pub fn take_spare(
        &self,
        job_id: &str,
        call_id: &str,
    ) -> Option<(Store<CallState>, ToolInstance)> {
        let Spare {
            mut store,
            instance,
            took,
            ..
        } = self.spare.lock().expect("spare lock").take()?;
        let state = store.data_mut();
        state.serve(job_id.to_string(), call_id.to_string(), self.spawner());
        state.limits.start_clock(took);
        store.set_epoch_deadline(1);
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some((store, instance))
    }

    /// A call that instantiated on its own path succeeded: spares may be made again.
    pub fn instantiated_on_call_path(&self) {
        if self.paused.load(Ordering::Relaxed) {
            self.paused.store(false, Ordering::Relaxed);
        }
    }

    /// Drops the store of a call that ended. When a spare is wanted and the budget allows it, the
    /// runtime's [`SpareMaker`](super::spare_maker::SpareMaker) drops the store and makes the
    /// next spare, away from what is left of the call; else the store is dropped here. One such
    /// job per plugin at most, so that a maker that gets no core for a while holds one store, not
    /// one per call.
    pub fn recycle(self: &Arc<Self>, used: Store<CallState>) {
        if !self.spares_allowed || self.paused.load(Ordering::Relaxed) {
            return;
        }
        {
            // Under the lock, where the job publishes its spare and clears `refilling`.
            let slot = self.spare.lock().expect("spare lock");
            if slot.is_some() || self.refilling.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        let refilling = Refilling(self.clone());
        let Some(held) = self.runtime.inner.spares.reserve() else {
            return;
        };
        self.runtime.inner.spare_maker.make(Box::pin(async move {
            drop(used);
            let instances = refilling.0.clone();
            let Some(spare) = instances.make_spare(held).await else {
                return;
            };
            let mut slot = instances.spare.lock().expect("spare lock");
            if slot.is_none() {
                *slot = Some(spare);
            }
            let watch = slot.is_some() && !instances.watched.swap(true, Ordering::AcqRel);
            // Under the lock: a call that takes this spare must see the next one wanted.
            drop(refilling);
            drop(slot);
            if watch {
                tokio::spawn(Self::drop_when_idle(Arc::downgrade(&instances)));
            }
        }));
    }

    /// Drops the waiting spare once it has waited [`SPARE_IDLE`], and ends when no spare waits.
    /// One such timer per plugin at most, however many spares are made and taken meanwhile.
    async fn drop_when_idle(instances: Weak<Self>) {
        loop {
            let wait = {
                let Some(instances) = instances.upgrade() else {
                    return;
                };
                let idle = Duration::from_millis(instances.idle_ms.load(Ordering::Relaxed));
                let mut slot = instances.spare.lock().expect("spare lock");
                match slot.as_ref().map(|spare| spare.ready.elapsed()) {
                    Some(waited) if waited < idle => idle - waited,
                    waiting => {
                        if waiting.is_some() {
                            *slot = None;
                        }
                        instances.watched.store(false, Ordering::Release);
                        return;
                    }
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    async fn make_spare(&self, held: SpareHeld) -> Option<Spare> {
        let started = Instant::now();
        let mut store = match self.store("", "", None) {
            Ok(store) => store,
            Err(error) => {
                self.pause(&error.to_string());
                return None;
            }
        };
        store.data_mut().wait_for_call();
        let _active = self.runtime.inner.ticker.enter();
        let meter = store.data().limits.cpu_meter.clone();
        let timeout = self.policy.policy.timeout;
        let made = {
            let instantiate = std::pin::pin!(self.pre.instantiate(&mut store));
            tokio::time::timeout(
                timeout,
                Metered {
                    inner: instantiate,
                    meter,
                },
            )
            .await
        };
        let took = started.elapsed();
        match made {
            Ok(Ok(_)) if took >= timeout => self.pause("its instantiation took the whole timeout"),
            Ok(Ok(instance)) => {
                return Some(Spare {
                    store,
                    instance,
                    took,
                    ready: Instant::now(),
                    _held: held,
                });
            }
            // The pool is full for now: a later call tries again.
            Ok(Err(error)) if error.downcast_ref::<PoolConcurrencyLimitError>().is_some() => {}
            Ok(Err(error)) => self.pause(&format!("{error:#}")),
            Err(_elapsed) => self.pause("its instantiation outlasted the wall-clock cap"),
        }
        None
    }

    fn pause(&self, why: &str) {
        self.paused.store(true, Ordering::Relaxed);
        tracing::info!(plugin = %self.plugin, "a spare instance failed, so calls instantiate on \
            their own path until one succeeds: {why}");
    }

    fn spawner(&self) -> Option<Arc<dyn SubtaskSpawner>> {
        (self.runtime.inner.spawner.lock().expect("spawner lock")).clone()
    }

    /// A store under this plugin's policy, its clock started.
    fn store(
        &self,
        job_id: &str,
        call_id: &str,
        spawner: Option<Arc<dyn SubtaskSpawner>>,
    ) -> Result<Store<CallState>, CallError> {
        let policy = &self.policy.policy;
        let capabilities = Capabilities::new(
            self.plugin.clone(),
            job_id.to_string(),
            call_id.to_string(),
            policy.spawn_subtasks,
            spawner,
            policy.max_log_bytes,
            policy.max_output_bytes,
        );
        let state = CallState::new(
            &self.policy,
            &self.plugin,
            capabilities,
            &self.runtime.inner.own_addresses,
        )
        .map_err(|err| CallError::Host(format!("cannot build the sandbox: {err:#}")))?;
        let mut store = Store::new(self.runtime.engine(), state);
        store.limiter(|state| &mut state.limits);
        if self.runtime.inner.fuel {
            store
                .set_fuel(policy.fuel.unwrap_or(u64::MAX))
                .map_err(|err| CallError::Host(err.to_string()))?;
            if policy.fuel.is_some() {
                store.call_hook(charge_host_calls);
            }
        }
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            ctx.data_mut().limits.on_epoch()?;
            Ok(UpdateDeadline::Yield(1))
        });
        Ok(store)
    }
}

/// Charges [`HOST_CALL_FUEL`] for every call into the host, so a fuel budget
/// bounds the host work a guest asks for as well as its own instructions.
fn charge_host_calls(
    mut store: StoreContextMut<'_, CallState>,
    hook: CallHook,
) -> wasmtime::Result<()> {
    if !matches!(hook, CallHook::CallingHost) {
        return Ok(());
    }
    let left = store.get_fuel()?;
    if left < HOST_CALL_FUEL {
        store.set_fuel(0)?;
        return Err(Trap::OutOfFuel.into());
    }
    store.set_fuel(left - HOST_CALL_FUEL)
}

/// How many spare instances may wait in one runtime: a quarter of the instances calls may
/// have at once, in slots the pool holds for them beyond those ([`SpareBudget::pool_instances`]),
/// so that spares never stand between a call and the pool.
pub(super) struct SpareBudget {
    cap: usize,
    waiting: Arc<AtomicUsize>,
}

/// One spare's place in the budget, given back when it is dropped.
pub(super) struct SpareHeld(Arc<AtomicUsize>);

impl Drop for SpareHeld {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SpareBudget {
    /// The spares of a runtime whose calls may have `calls` instances at once.
    pub fn new(enabled: bool, calls: u32) -> Self {
        Self {
            cap: if enabled { calls as usize / 4 } else { 0 },
            waiting: Arc::default(),
        }
    }

    /// Component instances the pool must hold: the calls' and the spares'.
    pub fn pool_instances(&self, calls: u32) -> u32 {
        calls.saturating_add(self.cap as u32)
    }

    /// A place for one more spare.
    pub fn reserve(&self) -> Option<SpareHeld> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                (waiting < self.cap).then_some(waiting + 1)
            })
            .ok()?;
        Some(SpareHeld(self.waiting.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::path::Path;
    use std::pin::Pin;

    use serde_json::json;

    use super::*;
    use crate::plugin::{
        CallRequest, DirGrant, Limit, Outcome, Plugin, PluginPolicy, RuntimeConfig, SpawnContext,
    };

    fn runtime(spare_instances: bool) -> Runtime {
        Runtime::new(RuntimeConfig {
            cache_dir: None,
            spare_instances,
            ..RuntimeConfig::default()
        })
        .unwrap()
    }

    async fn hostile(runtime: &Runtime, policy: PluginPolicy) -> Plugin {
        runtime
            .load_file(Path::new(maestro_plugins::HOSTILE), policy)
            .await
            .unwrap()
    }

    fn request(tool: &str, arguments: serde_json::Value, job: &str, call: &str) -> CallRequest {
        CallRequest {
            job_id: job.into(),
            call_id: call.into(),
            ..CallRequest::new(tool, arguments)
        }
    }

    /// Whether a spare waits for `plugin`'s next call, once the one on its way is made.
    async fn spare_made(plugin: &Plugin) -> bool {
        let instances = &plugin.instances;
        let deadline = Instant::now() + Duration::from_secs(30);
        while instances.refilling.load(Ordering::Acquire) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        instances.spare_waiting()
    }

    /// The parents of the subtasks the hostile plugin asks for.
    #[derive(Default)]
    struct Parents(Mutex<Vec<(String, String)>>);

    impl SubtaskSpawner for Parents {
        fn spawn(
            &self,
            parent: SpawnContext,
            _piece: String,
            _input: String,
        ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> {
            (self.0.lock().unwrap()).push((parent.job_id, parent.call_id));
            Box::pin(async { Ok("child".to_string()) })
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_call_runs_in_the_spare_made_after_the_last_one_and_it_serves_that_call_alone() {
        let runtime = runtime(true);
        let parents = Arc::new(Parents::default());
        runtime.set_subtask_spawner(parents.clone());
        let policy = PluginPolicy {
            spawn_subtasks: true,
            ..PluginPolicy::default()
        };
        let plugin = hostile(&runtime, policy).await;
        assert!(!spare_made(&plugin).await, "no spare after describe");
        let spawn = json!({"piece": "p", "input": "i"});
        for (job, call) in [
            ("job-1", "call-1"),
            ("job-2", "call-2"),
            ("job-3", "call-3"),
        ] {
            let outcome = plugin.invoke(request("spawn_subtask", spawn.clone(), job, call));
            assert_eq!(outcome.await.unwrap(), Outcome::Output("child".into()));
            assert!(spare_made(&plugin).await, "a spare after {call}");
        }
        // A spare is as fresh as any instance: nothing the call before it kept is there.
        for text in ["first secret", "second secret"] {
            assert!(spare_made(&plugin).await);
            let remember = request("remember", json!({"text": text}), "job-4", text);
            let Ok(Outcome::Output(kept)) = plugin.invoke(remember).await else {
                panic!("remember answers")
            };
            let kept: serde_json::Value = serde_json::from_str(&kept).unwrap();
            assert_eq!(kept, json!({"calls": 1, "before": null}), "{text}");
        }
        assert_eq!(plugin.instances.taken.load(Ordering::Relaxed), 4);
        // The host's capabilities of a spare act for the call that took it.
        let seen = parents.0.lock().unwrap().clone();
        let expected = [
            ("job-1", "call-1"),
            ("job-2", "call-2"),
            ("job-3", "call-3"),
        ];
        let expected: Vec<_> = (expected.iter())
            .map(|(job, call)| (job.to_string(), call.to_string()))
            .collect();
        assert_eq!(seen, expected);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_time_a_spare_took_to_make_counts_against_the_call_that_takes_it() {
        let runtime = runtime(true);
        let policy = PluginPolicy {
            timeout: Duration::from_secs(2),
            ..PluginPolicy::default()
        };
        let plugin = hostile(&runtime, policy).await;
        let sleep = |call: &str| request("sleep", json!({"ms": 600}), "job", call);
        assert!(plugin.invoke(sleep("first")).await.is_ok());
        assert!(spare_made(&plugin).await);
        {
            let mut slot = plugin.instances.spare.lock().unwrap();
            let spare = slot.as_mut().unwrap();
            let meter = &spare.store.data().limits.cpu_meter;
            assert!(
                meter.used() > Duration::ZERO,
                "the processor time of its instantiation is on the call's meter"
            );
            // As if its instantiation had taken 1.7 s of the call's 2 s.
            spare.took = Duration::from_millis(1_700);
        }
        match plugin.invoke(sleep("second")).await {
            Err(CallError::Limit(Limit::WallClock { cap })) => {
                assert_eq!(cap, Duration::from_secs(2))
            }
            other => panic!("expected the wall-clock limit, got {other:?}"),
        }
        assert_eq!(plugin.instances.taken.load(Ordering::Relaxed), 1);
        // The control: a spare that took no such time runs the same call to its end.
        assert!(spare_made(&plugin).await);
        assert!(plugin.invoke(sleep("third")).await.is_ok());
        assert_eq!(plugin.instances.taken.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn no_spare_waits_when_spares_are_off_or_the_policy_grants_directories() {
        let call = || request("read_env", json!({}), "job", "call");
        let off = runtime(false);
        let plugin = hostile(&off, PluginPolicy::default()).await;
        assert!(plugin.invoke(call()).await.is_ok());
        assert!(!spare_made(&plugin).await, "spares off");

        let on = runtime(true);
        let dir = tempfile::tempdir().unwrap();
        let policy = PluginPolicy {
            dirs: vec![DirGrant {
                host: dir.path().to_path_buf(),
                guest: "/data".into(),
                writable: false,
                origin: ("test".into(), "dirs".into()),
            }],
            ..PluginPolicy::default()
        };
        let plugin = hostile(&on, policy).await;
        assert!(plugin.invoke(call()).await.is_ok());
        assert!(
            !spare_made(&plugin).await,
            "directories are opened for each call"
        );

        let plugin = hostile(&on, PluginPolicy::default()).await;
        assert!(plugin.invoke(call()).await.is_ok());
        assert!(
            spare_made(&plugin).await,
            "the control: a spare without directories"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn after_a_spare_failed_none_is_made_until_a_call_instantiates_on_its_own_path() {
        let runtime = runtime(true);
        let plugin = hostile(&runtime, PluginPolicy::default()).await;
        let call = |call: &str| request("read_env", json!({}), "job", call);
        assert!(plugin.invoke(call("first")).await.is_ok());
        assert!(
            spare_made(&plugin).await,
            "the control: a spare after a call"
        );
        plugin.instances.pause("as if the last spare had failed");
        assert!(plugin.invoke(call("second")).await.is_ok());
        assert_eq!(plugin.instances.taken.load(Ordering::Relaxed), 1);
        assert!(
            !spare_made(&plugin).await,
            "a call that took a spare makes none while spares are paused"
        );
        assert!(plugin.invoke(call("third")).await.is_ok());
        assert!(
            spare_made(&plugin).await,
            "an instance made on the call's path resumes them"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_spare_no_call_takes_gives_its_slot_back() {
        let runtime = runtime(true);
        let plugin = hostile(&runtime, PluginPolicy::default()).await;
        plugin.instances.idle_ms.store(300, Ordering::Relaxed);
        let waiting = || runtime.inner.spares.waiting.load(Ordering::Acquire);
        assert!(
            plugin
                .invoke(request("read_env", json!({}), "job", "call"))
                .await
                .is_ok()
        );
        assert!(spare_made(&plugin).await);
        assert_eq!(waiting(), 1, "the spare holds a slot");
        let deadline = Instant::now() + Duration::from_secs(30);
        while plugin.instances.spare_waiting() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!plugin.instances.spare_waiting(), "dropped once idle");
        assert_eq!(waiting(), 0, "its slot is back");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn one_timer_watches_a_plugins_spares_however_many_calls_take_them() {
        let runtime = runtime(true);
        let plugin = hostile(&runtime, PluginPolicy::default()).await;
        for n in 0..40 {
            let call = request("read_env", json!({}), "job", &format!("call-{n}"));
            assert!(plugin.invoke(call).await.is_ok());
            assert!(spare_made(&plugin).await);
        }
        assert!(plugin.instances.taken.load(Ordering::Relaxed) >= 39);
        assert_eq!(
            runtime.inner.spare_maker.tasks_alive(),
            1,
            "the idle timer of the waiting spare, and nothing left of the 40 spares before it"
        );
    }

    #[test]
    fn spares_wait_in_pool_slots_of_their_own_a_quarter_of_the_calls_at_most() {
        let budget = SpareBudget::new(true, 16);
        assert_eq!(budget.pool_instances(16), 20, "16 calls and 4 spares");
        let held: Vec<SpareHeld> = (0..4).map(|_| budget.reserve().unwrap()).collect();
        assert!(budget.reserve().is_none(), "a quarter of 16 is 4");
        drop(held);
        assert!(
            budget.reserve().is_some(),
            "a dropped spare gives its place back"
        );

        let off = SpareBudget::new(false, 256);
        assert!(off.reserve().is_none(), "spares off");
        assert_eq!(off.pool_instances(256), 256);
        assert!(
            SpareBudget::new(true, 3).reserve().is_none(),
            "3 calls have none"
        );
    }
}
