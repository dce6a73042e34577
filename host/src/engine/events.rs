//! What happens in a job, as events: the job's log, the CLI's step printout and (later) the
//! live stream all read the same values.
//!
//! Invariant: events are facts that already happened, emitted in order; observing them cannot
//! change the run.

use serde::{Deserialize, Serialize};

use super::job::{JobStatus, WaitReason, WaitRequest};
use crate::plugin::Resume;

/// One thing that happened in a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JobEvent {
    Started {
        piece: String,
        input: String,
        parent: Option<String>,
        /// The tool-call burst the job may make before a human must say go on.
        #[serde(default = "super::job::default_max_burst")]
        max_burst: u32,
    },
    MovementEntered {
        movement: String,
        /// 1-based count of movements entered so far in this job.
        count: u32,
    },
    ModelReplied {
        movement: String,
        text: Option<String>,
        tool_calls: Vec<String>,
    },
    ToolCalled {
        movement: String,
        call_id: String,
        tool: String,
        arguments: String,
    },
    ToolAnswered {
        movement: String,
        call_id: String,
        tool: String,
        content: String,
        is_error: bool,
    },
    Transition {
        from: String,
        to: String,
    },
    Parked {
        /// The wait's id (the job's park count): its `resumed` event names it too.
        #[serde(default)]
        wait: u32,
        status: JobStatus,
        resume_movement: String,
        reason: Option<WaitReason>,
        request: WaitRequest,
    },
    Resumed {
        /// The id of the wait this answers.
        #[serde(default)]
        wait: u32,
        movement: String,
        resume: Resume,
    },
    Finished {
        status: JobStatus,
        detail: String,
    },
}

/// Receives a job's events as they happen.
pub trait Observer: Send + Sync {
    fn on_event(&self, job_id: &str, event: &JobEvent);

    /// The job and the events of its run are now durable (a worker saved them), with `status`.
    fn on_saved(&self, _job_id: &str, _status: JobStatus) {}
}

/// Ignores every event.
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&self, _job_id: &str, _event: &JobEvent) {}
}

/// Keeps every event, for tests and for callers that store them after the run.
#[derive(Default)]
pub struct RecordingObserver {
    events: std::sync::Mutex<Vec<(String, JobEvent)>>,
}

impl RecordingObserver {
    pub fn events(&self) -> Vec<(String, JobEvent)> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The events of one job, oldest first.
    pub fn of(&self, job_id: &str) -> Vec<JobEvent> {
        self.events()
            .into_iter()
            .filter(|(job, _)| job == job_id)
            .map(|(_, event)| event)
            .collect()
    }
}

impl Observer for RecordingObserver {
    fn on_event(&self, job_id: &str, event: &JobEvent) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((job_id.to_owned(), event.clone()));
    }
}
