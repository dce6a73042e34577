//! The thread spare instances are made on: one per runtime, at the operating system's idle
//! priority (`SCHED_IDLE` on Linux), running the jobs it is given on a runtime of its own.
//!
//! Invariant: making a spare never takes a core from anything else that wants one: not the call
//! the used store came from, not the response on its way back, not the client waiting for it on
//! the same machine. A busy machine gets its spares late, and calls make their instances on their
//! own path meanwhile; an idle-priority thread still gets a small share of a busy core, so its
//! jobs end and what they hold (one used store and one spare slot per plugin) is given back.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

/// Work for the thread: drop a used store, make a spare, keep it until it is taken or idle.
pub(super) type SpareJob = Pin<Box<dyn Future<Output = ()> + Send>>;

pub(super) struct SpareMaker {
    jobs: mpsc::UnboundedSender<SpareJob>,
    #[cfg(test)]
    handle: tokio::runtime::Handle,
}

impl SpareMaker {
    /// Starts the thread; it ends once the maker is dropped and its last job is done.
    pub fn start() -> std::io::Result<Self> {
        let (jobs, mut next) = mpsc::unbounded_channel::<SpareJob>();
        // Timers only: a spare's instantiation is bounded by its policy's wall clock, and an
        // unused spare is dropped after its idle time.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        #[cfg(test)]
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("maestro-spares".into())
            .spawn(move || {
                at_idle_priority();
                runtime.block_on(async {
                    while let Some(job) = next.recv().await {
                        tokio::spawn(job);
                    }
                });
            })?;
        Ok(Self {
            jobs,
            #[cfg(test)]
            handle,
        })
    }

    /// Runs `job` on the thread.
    pub fn make(&self, job: SpareJob) {
        // The thread ends only once this sender is gone, so the send cannot fail.
        let _ = self.jobs.send(job);
    }

    /// Jobs and timers on the thread not yet ended.
    #[cfg(test)]
    pub fn tasks_alive(&self) -> usize {
        self.handle.metrics().num_alive_tasks()
    }
}

/// Moves the calling thread to the idle scheduling class, where it runs only on a core nothing
/// else wants. Where that cannot be done, spares are still made, at normal priority.
fn at_idle_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` reads `param` during the call only; pid 0 is this thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
            tracing::debug!(
                "spare instances are made at normal priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the calling thread runs at idle priority.
    #[cfg(target_os = "linux")]
    fn on_idle_priority() -> bool {
        // SAFETY: no arguments; pid 0 is this thread.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn jobs_run_on_a_thread_at_idle_priority() {
        let maker = SpareMaker::start().unwrap();
        let (told, heard) = std::sync::mpsc::channel();
        maker.make(Box::pin(async move {
            let name = std::thread::current().name().map(str::to_owned);
            told.send((name, on_idle_priority())).unwrap();
        }));
        let (name, idle) = heard.recv().unwrap();
        assert_eq!(name.as_deref(), Some("maestro-spares"));
        assert!(idle, "the spares' thread runs in the idle scheduling class");
        assert!(!on_idle_priority(), "the caller's thread keeps its class");
    }
}
