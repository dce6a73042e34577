//! What the worker tells the metrics of its runs, and the park a run resumes from, which the
//! metrics and the trace both record.
//!
//! Invariant: a run's parks, resumes, ends and guard aborts are counted once its save stood, so
//! a run whose save failed (and which another runner repeats from the last save) is not
//! counted twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::engine::{Answer, JobState, PieceRunResult};
use crate::telemetry;

/// The reason a job waits, in the metrics' words: a human's wait by its reason, else subtasks.
pub(super) fn wait_reason(state: &JobState) -> &'static str {
    match state.wait.as_ref().and_then(|wait| wait.reason) {
        Some(reason) => reason.as_str(),
        None => "subtasks",
    }
}

/// The park a run resumes from, noted as the run starts; counted, and written to the job's
/// trace, once the run's save stood.
pub(super) struct Resumed {
    pub(super) wait: u64,
    pub(super) reason: &'static str,
    pub(super) answer: &'static str,
    /// When the job parked (Unix ms), if it was parked by a release that kept it.
    pub(super) parked_ms: Option<i64>,
    pub(super) resumed_ms: i64,
    pub(super) resumed: SystemTime,
}

impl Resumed {
    /// The park `state` resumes from with `answer`, if it waits for one.
    pub(super) fn of(state: &JobState, answer: Option<&Answer>, now_ms: i64) -> Option<Self> {
        let (answer, wait) = (answer?, state.wait.as_ref()?);
        Some(Self {
            wait: u64::from(wait.id),
            reason: wait_reason(state),
            answer: answer.name(),
            parked_ms: state.parked_at_ms,
            resumed_ms: now_ms,
            resumed: SystemTime::now(),
        })
    }
}

/// Counts a run whose save stood: the resume it started with, and how it stopped.
pub(super) fn count_saved_run(
    resumed: Option<&Resumed>,
    state: &JobState,
    result: Option<&PieceRunResult>,
) {
    if let Some(resumed) = resumed {
        let waited = resumed.parked_ms.map(|parked| {
            Duration::from_millis(resumed.resumed_ms.saturating_sub(parked).max(0) as u64)
        });
        telemetry::resumed(resumed.reason, waited);
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
