//! The instances calls run in: a fresh `Store` under the plugin's policy for every call,
//! instantiated from the shared `InstancePre`, and a spare one instantiated between calls, so
//! that the next call finds its instance ready instead of making it on its own path.
//!
//! Invariant: an instance serves one call and is dropped after it, off that call's path. A spare
//! is instantiated in a fresh store after a call ended, with the epoch ticker running, under the
//! limits of the call that will take it: the memory, fuel and processor time its instantiation
//! used, and the wall-clock time it took, count against that call. It gets its job and call ids,
//! the subtask spawner and its HTTP only when a call takes it, so nothing it runs while
//! instantiated can start a job or reach out. At most a quarter of the runtime's pool waits as spares and none is made while
//! half of the pool is in use ([`SpareBudget`]); a plugin makes one spare at a time, none after
//! one failed, and none when its policy grants directories (those are opened when a call starts,
//! so that the call sees the directory as it is then).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{CallHook, PoolConcurrencyLimitError, Store, StoreContextMut, Trap, UpdateDeadline};

use super::capabilities::{Capabilities, SubtaskSpawner};
use super::error::CallError;
use super::runtime::Runtime;
use super::sandbox::{CallState, CompiledPolicy, HOST_CALL_FUEL, Metered};
use super::wit::{ToolInstance, ToolPre};

/// How a plugin's calls get their instances.
pub(super) struct Instances {
    pub pre: ToolPre,
    policy: Arc<CompiledPolicy>,
    runtime: Runtime,
    plugin: Arc<str>,
    spare: Mutex<Option<Spare>>,
    /// Cleared for good when a spare fails to instantiate: each call's own path then says why.
    spares_work: AtomicBool,
    /// A spare is on its way: a call that ends meanwhile starts none.
    refilling: AtomicBool,
    /// Calls that took a spare.
    taken: AtomicUsize,
}

/// An instance made ahead of the call that will take it.
struct Spare {
    store: Store<CallState>,
    instance: ToolInstance,
    /// Wall-clock time from the start of its store to its instance: spent of the call's cap.
    took: Duration,
    _held: SpareHeld,
}

impl Instances {
    pub fn new(
        pre: ToolPre,
        policy: Arc<CompiledPolicy>,
        runtime: Runtime,
        plugin: Arc<str>,
    ) -> Self {
        let spares_work = policy.policy.dirs.is_empty();
        Self {
            pre,
            policy,
            runtime,
            plugin,
            spare: Mutex::new(None),
            spares_work: AtomicBool::new(spares_work),
            refilling: AtomicBool::new(false),
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
            _held,
        } = self.spare.lock().expect("spare lock").take()?;
        let state = store.data_mut();
        state.serve(job_id.to_string(), call_id.to_string(), self.spawner());
        state.limits.start_clock(took);
        store.set_epoch_deadline(1);
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some((store, instance))
    }

    /// Drops the store of a call that ended, and makes the next spare if one is wanted and the
    /// budget allows it, both after the call's result is on its way.
    pub fn recycle(self: &Arc<Self>, used: Store<CallState>) {
        if !self.spares_work.load(Ordering::Relaxed)
            || self.spare.lock().expect("spare lock").is_some()
            || self.refilling.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let reserved = tokio::runtime::Handle::try_current()
            .ok()
            .and_then(|handle| {
                let held =
                    (self.runtime.inner.spares).reserve(self.runtime.inner.ticker.active())?;
                Some((handle, held))
            });
        let Some((handle, held)) = reserved else {
            self.refilling.store(false, Ordering::Release);
            return;
        };
        let instances = self.clone();
        handle.spawn(async move {
            drop(used);
            let spare = instances.make_spare(held).await;
            let mut slot = instances.spare.lock().expect("spare lock");
            if slot.is_none() {
                *slot = spare;
            }
            // Under the lock: a call that takes this spare must see the next one wanted.
            instances.refilling.store(false, Ordering::Release);
        });
    }

    async fn make_spare(&self, held: SpareHeld) -> Option<Spare> {
        let started = Instant::now();
        let mut store = match self.store("", "", None) {
            Ok(store) => store,
            Err(error) => {
                self.give_up(&error.to_string());
                return None;
            }
        };
        store.data_mut().wait_for_call();
        let _active = self.runtime.inner.ticker.enter();
        let meter = store.data().limits.cpu_meter.clone();
        let made = {
            let instantiate = std::pin::pin!(self.pre.instantiate(&mut store));
            tokio::time::timeout(
                self.policy.policy.timeout,
                Metered {
                    inner: instantiate,
                    meter,
                },
            )
            .await
        };
        match made {
            Ok(Ok(instance)) => {
                return Some(Spare {
                    store,
                    instance,
                    took: started.elapsed(),
                    _held: held,
                });
            }
            // The pool is full for now: a later call tries again.
            Ok(Err(error)) if error.downcast_ref::<PoolConcurrencyLimitError>().is_some() => {}
            Ok(Err(error)) => self.give_up(&format!("{error:#}")),
            Err(_elapsed) => self.give_up("its instantiation outlasted the wall-clock cap"),
        }
        None
    }

    fn give_up(&self, why: &str) {
        self.spares_work.store(false, Ordering::Relaxed);
        tracing::debug!(plugin = %self.plugin, "no more spare instances: {why}");
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

/// How many spare instances may wait in one runtime: a quarter of its pool, and none made while
/// half of the pool is in use, so that spares never stand between a burst of calls and the pool.
pub(super) struct SpareBudget {
    cap: usize,
    pool: usize,
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
    pub fn new(enabled: bool, pool: u32) -> Self {
        let pool = pool as usize;
        Self {
            cap: if enabled { pool / 4 } else { 0 },
            pool,
            waiting: Arc::default(),
        }
    }

    /// A place for one more spare, while `active` calls run.
    pub fn reserve(&self, active: usize) -> Option<SpareHeld> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                (waiting < self.cap && active + waiting < self.pool / 2).then_some(waiting + 1)
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

    #[test]
    fn spares_take_at_most_a_quarter_of_the_pool_and_none_while_half_of_it_is_busy() {
        let budget = SpareBudget::new(true, 16);
        let held: Vec<SpareHeld> = (0..4).map(|_| budget.reserve(0).unwrap()).collect();
        assert!(budget.reserve(0).is_none(), "a quarter of 16 is 4");
        drop(held);
        assert!(budget.reserve(8).is_none(), "8 of 16 instances busy");
        let one = budget.reserve(7).expect("7 busy, none waiting");
        assert!(budget.reserve(7).is_none(), "7 busy and 1 waiting: half");
        drop(one);
        assert!(
            budget.reserve(7).is_some(),
            "a dropped spare gives its place back"
        );

        assert!(
            SpareBudget::new(false, 256).reserve(0).is_none(),
            "spares off"
        );
        assert!(
            SpareBudget::new(true, 3).reserve(0).is_none(),
            "a pool of 3 has none"
        );
    }
}
