//! What a run writes to its job's trace.
//!
//! Invariant: a run's span is a child of its job's root span, whichever process runs it; the
//! spans over time already past (the park a run resumes from, the job as a whole) are written
//! only once the run's save stood, so a run that is repeated elsewhere writes them once.

use std::time::SystemTime;

use super::metrics::wait_reason;
use crate::engine::{Answer, JobState};
use crate::telemetry::JobTrace;

/// The park a run resumes from, written to the trace once the run is saved.
pub(super) struct Resumed {
    wait: u64,
    reason: &'static str,
    answer: &'static str,
    parked_ms: i64,
    resumed: SystemTime,
}

/// Gives `state` its trace if it has none and this process exports traces; the park it
/// resumes from with `answer`, if any.
pub(super) fn begin(state: &mut JobState, answer: Option<&Answer>, now_ms: i64) -> Option<Resumed> {
    if state.trace.is_none() {
        state.trace = JobTrace::begin(now_ms);
    }
    state.trace.as_ref()?;
    let (answer, wait) = (answer?, state.wait.as_ref()?);
    Some(Resumed {
        wait: u64::from(wait.id),
        reason: wait_reason(state),
        answer: answer.name(),
        parked_ms: state.parked_at_ms.unwrap_or(now_ms),
        resumed: SystemTime::now(),
    })
}

/// The span of this run of `state`: a child of the job's root span if the job has a trace.
/// Its fields name the job on every log line of the run (`--log-format json`).
pub(super) fn run_span(state: &JobState, resumed: bool) -> tracing::Span {
    let span = tracing::info_span!("run", maestro.job.id = %state.id,
        maestro.piece = %state.piece, maestro.resumed = resumed,
        maestro.status = tracing::field::Empty, maestro.trace_id = tracing::field::Empty);
    if let Some(trace) = &state.trace {
        trace.join(&span);
    }
    span
}

/// Writes what the saved run ended in the trace: the park it resumed from, and the job if it
/// ended.
pub(super) fn saved(state: &JobState, resumed: Option<Resumed>) {
    let Some(trace) = &state.trace else { return };
    if let Some(park) = resumed {
        trace.park(
            park.wait,
            park.reason,
            park.answer,
            park.parked_ms,
            park.resumed,
        );
    }
    if state.status.is_final() {
        trace.end(
            &state.id,
            &state.piece,
            state.status.as_str(),
            SystemTime::now(),
        );
    }
}
