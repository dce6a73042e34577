//! What the worker tells the metrics of its runs.
//!
//! Invariant: a run's parks, resumes, ends and guard aborts are counted once its save stood, so
//! a run whose save failed (and which another runner repeats from the last save) is not
//! counted twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::engine::{JobState, PieceRunResult};
use crate::telemetry;

/// The reason a job waits, in the metrics' words: a human's wait by its reason, else subtasks.
pub(super) fn wait_reason(state: &JobState) -> &'static str {
    match state.wait.as_ref().and_then(|wait| wait.reason) {
        Some(reason) => reason.as_str(),
        None => "subtasks",
    }
}

/// A claimed job's resume, noted when the run starts and counted when it is saved.
pub(super) struct Resuming {
    reason: &'static str,
    waited: Option<Duration>,
}

impl Resuming {
    /// The resume `state` is claimed for, if it was parked and answered.
    pub(super) fn of(state: &JobState, resumed: bool, now_ms: i64) -> Option<Self> {
        if !resumed || state.wait.is_none() {
            return None;
        }
        let waited = state
            .parked_at_ms
            .map(|parked| Duration::from_millis(now_ms.saturating_sub(parked).max(0) as u64));
        Some(Self {
            reason: wait_reason(state),
            waited,
        })
    }
}

/// Counts a run whose save stood: the resume it started with, and how it stopped.
pub(super) fn count_saved_run(
    resuming: Option<Resuming>,
    state: &JobState,
    result: Option<&PieceRunResult>,
) {
    if let Some(resuming) = resuming {
        telemetry::resumed(resuming.reason, resuming.waited);
    }
    if state.status.is_waiting() {
        telemetry::parked(wait_reason(state));
    } else if state.status.is_final() {
        telemetry::job_ended(state.status.as_str());
        if let Some(PieceRunResult::Aborted {
            guard: Some(guard), ..
        }) = result
        {
            telemetry::guard_abort(guard.as_str());
        }
    }
}

/// The runners of a worker that hold a job.
#[derive(Default)]
pub(super) struct Busy {
    busy: AtomicUsize,
}

impl Busy {
    /// Marks one more runner busy until the returned guard drops.
    pub(super) fn start(&self, runners: usize) -> BusyGuard<'_> {
        let busy = self.busy.fetch_add(1, Ordering::Relaxed) + 1;
        telemetry::runners(busy, runners.saturating_sub(busy));
        BusyGuard {
            busy: &self.busy,
            runners,
        }
    }
}

pub(super) struct BusyGuard<'a> {
    busy: &'a AtomicUsize,
    runners: usize,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        let busy = self.busy.fetch_sub(1, Ordering::Relaxed) - 1;
        telemetry::runners(busy, self.runners.saturating_sub(busy));
    }
}
