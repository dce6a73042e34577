//! What a run writes to its job's trace.
//!
//! Invariant: a run's span is a child of its job's root span, whichever process runs it; the
//! spans over time already past (the park a run resumes from, the job as a whole) are written
//! only once the run's save stood, so a run that is repeated elsewhere writes them once.

use std::time::SystemTime;

use super::metrics::Resumed;
use crate::engine::JobState;
use crate::telemetry::JobTrace;

/// Gives `state` its trace if it has none and this process exports traces.
pub(super) fn begin(state: &mut JobState, now_ms: i64) {
    if state.trace.is_none() {
        state.trace = JobTrace::begin(now_ms);
    }
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
pub(super) fn saved(state: &JobState, resumed: Option<&Resumed>) {
    let Some(trace) = &state.trace else { return };
    if let Some(park) = resumed {
        let parked_ms = park.parked_ms.unwrap_or(park.resumed_ms);
        trace.park(park.wait, park.reason, park.answer, parked_ms, park.resumed);
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
