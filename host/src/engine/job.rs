//! The state of one job, as the engine reads and writes it between runs.
//!
//! Invariant: a `JobState` is everything needed to continue a job in another process: it holds
//! no handle, no plugin and no model, only data (serde), so a parked job is a row in a store.
//! `wait` is `Some` exactly when the status is `waiting_human` or `waiting_subtasks`, and then
//! `movement` is the movement the job resumes at. `session` is the phase machine's session of
//! the job, stepped through exactly the events of its log, so it is the fold of that log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::conversation::Conversation;
use super::session::JobSession;
use super::wait::{WaitReason, WaitRequest};
use crate::llm::{Message, ToolCall};
use crate::plugin::{CallRequest, Resume};

/// Where a job is in its life. `completed`, `aborted`, `cancelled` and `error` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Ready to run (new, or a wait was answered).
    Pending,
    Running,
    WaitingHuman,
    WaitingSubtasks,
    Completed,
    Aborted,
    Cancelled,
    Error,
}

impl JobStatus {
    pub const ALL: [JobStatus; 8] = [
        JobStatus::Pending,
        JobStatus::Running,
        JobStatus::WaitingHuman,
        JobStatus::WaitingSubtasks,
        JobStatus::Completed,
        JobStatus::Aborted,
        JobStatus::Cancelled,
        JobStatus::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::WaitingHuman => "waiting_human",
            JobStatus::WaitingSubtasks => "waiting_subtasks",
            JobStatus::Completed => "completed",
            JobStatus::Aborted => "aborted",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Aborted | JobStatus::Cancelled | JobStatus::Error
        )
    }

    pub fn is_waiting(self) -> bool {
        matches!(self, JobStatus::WaitingHuman | JobStatus::WaitingSubtasks)
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name of a resume kind as the WIT spells it.
pub fn resume_name(resume: &Resume) -> &'static str {
    match resume {
        Resume::Answered(_) => "answered",
        Resume::Approved => "approved",
        Resume::Denied(_) => "denied",
        Resume::LoggedIn(_) => "logged-in",
        Resume::SubtasksDone(_) => "subtasks-done",
        Resume::Expired => "expired",
        Resume::Reviewed(_) => "reviewed",
        Resume::WorkerDone(_) => "worker-done",
    }
}

pub(super) fn default_max_burst() -> u32 {
    crate::phase::DEFAULT_MAX_BURST
}

/// Who holds a call at the approval gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateOwner {
    /// The operator's policy (`require_approval`).
    #[default]
    Policy,
    /// The piece (`approve` in the movement).
    Piece,
}

/// How a parked job continues once its wait is answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResumePoint {
    /// A tool parked: re-invoke this call with `resume` set, on the plugin version that made it.
    ParkedCall {
        call: CallRequest,
        plugin: PinnedPlugin,
    },
    /// The operator's policy wants a human to approve this call before it runs: run it once
    /// approved, tell the model it was denied otherwise.
    ApprovalGate {
        call: CallRequest,
        plugin: PinnedPlugin,
        #[serde(default)]
        by: GateOwner,
    },
    /// A rule chose `WAIT_SUBTASKS`: enter the resume movement with the children's results.
    EnterMovement,
    /// The burst limit stopped the agent before this call: run it once a human says go on.
    /// The model's call as it made it (the arguments may not even be JSON), not yet checked.
    BurstGate { call: ToolCall },
    /// The job has not entered its piece yet: a piece is chosen, or its intake filled in.
    EnterPiece,
}

/// What a human approved through a tool's `tool-request`: one call of `tool`, on the plugin
/// version that served it then, with exactly these arguments. It is used up by that call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub tool: String,
    pub content_hash: String,
    pub arguments: serde_json::Value,
}

/// The exact plugin version a parked call belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedPlugin {
    pub name: String,
    pub content_hash: String,
}

/// A pending wait of a parked job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// Which park of the job this is (1, 2, …; 0 until the runner parks the job): an answer
    /// given for one wait can be refused once the job waits on another.
    #[serde(default)]
    pub id: u32,
    /// `None` for `waiting_subtasks`.
    pub reason: Option<WaitReason>,
    pub request: WaitRequest,
    pub resume: ResumePoint,
}

/// One run of a piece.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    pub id: String,
    pub piece: String,
    /// The file the piece was read from when the job started, so a resume in another process
    /// runs the same piece.
    #[serde(default)]
    pub piece_origin: String,
    pub input: String,
    pub parent: Option<String>,
    pub status: JobStatus,
    /// The movement being run, or the one the job resumes at while it waits.
    pub movement: String,
    /// Movements entered so far (the `max_movements` guard counts these).
    pub movements_entered: u32,
    /// Whether `movement` has been entered; false while the job stands before it.
    pub entered: bool,
    /// Model turns in the current movement (the `max_iterations` guard).
    pub turns: u32,
    /// Consecutive text-only replies in the current movement (the text-only guard).
    pub text_only_streak: u32,
    /// Questions asked so far (`ASK` parks past the limit abort the job).
    pub asks: u32,
    /// Parks so far; the current wait's id.
    #[serde(default)]
    pub parks: u32,
    /// Parks by tools (and rule waits) in the current movement: the park-limit guard, which
    /// stops a tool that parks again each time it is resumed.
    #[serde(default)]
    pub movement_parks: u32,
    /// The phase machine's session of this job: who may act, the burst of tool calls since a
    /// human acted (its limit fixed when the job started), the intake's slots, the artifacts.
    /// `None` only in a job stored before sessions were kept with jobs: whoever runs it folds
    /// the session from its log first.
    #[serde(default)]
    pub session: Option<JobSession>,
    /// A worker: a child job whose questions and drafts are answered at its parent.
    #[serde(default)]
    pub reviewed_by_parent: bool,
    /// Intake values given when the job was started, shown filled in for a human to confirm.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prefill: BTreeMap<String, String>,
    /// Kept apart from the rest by the store, which appends to it (see [`Conversation`]).
    #[serde(default)]
    pub conversation: Conversation,
    pub wait: Option<Wait>,
    /// When the current wait expires (Unix ms); the job is then resumed with `expired`. Set by
    /// whoever keeps the job (the engine has no clock).
    #[serde(default)]
    pub wait_expires_at_ms: Option<i64>,
    /// When the job parked for its current wait (Unix ms, the keeper's clock), for the metric
    /// of how long parks last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_at_ms: Option<i64>,
    /// The job's trace, from its first run in a process that exports traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::telemetry::JobTrace>,
    /// Child jobs spawned by this job, oldest first.
    pub children: Vec<String>,
    /// Approvals not used yet.
    #[serde(default)]
    pub grants: Vec<Grant>,
    /// The final output (completed) or reason (aborted, cancelled, error).
    pub result: Option<String>,
}

impl JobState {
    /// The plugin version the call this job waits on is pinned to, if it waits on a call.
    pub fn parked_plugin(&self) -> Option<&PinnedPlugin> {
        match &self.wait.as_ref()?.resume {
            ResumePoint::ParkedCall { plugin, .. } | ResumePoint::ApprovalGate { plugin, .. } => {
                Some(plugin)
            }
            ResumePoint::EnterMovement
            | ResumePoint::BurstGate { .. }
            | ResumePoint::EnterPiece => None,
        }
    }

    /// A new job of `piece`, about to enter `initial_movement` with the user's input.
    pub fn new(id: String, piece: &str, initial_movement: &str, input: String) -> Self {
        Self {
            id,
            piece: piece.to_owned(),
            piece_origin: String::new(),
            conversation: Conversation::from(vec![Message::User {
                text: input.clone(),
            }]),
            input,
            parent: None,
            status: JobStatus::Pending,
            movement: initial_movement.to_owned(),
            movements_entered: 0,
            entered: false,
            turns: 0,
            text_only_streak: 0,
            asks: 0,
            parks: 0,
            movement_parks: 0,
            session: Some(JobSession::default()),
            reviewed_by_parent: false,
            prefill: BTreeMap::new(),
            wait: None,
            wait_expires_at_ms: None,
            parked_at_ms: None,
            trace: None,
            children: Vec::new(),
            grants: Vec::new(),
            result: None,
        }
    }

    /// A job that a human starts by choosing its piece: it waits in skill selection.
    pub fn without_piece(id: String, input: String) -> Self {
        Self::new(id, "", "", input)
    }

    /// Everything but the conversation, serialized as [`JobState`] is: what a store that keeps
    /// the conversation apart writes on each save. Reading it back as a `JobState` gives an
    /// empty conversation.
    pub fn without_conversation(&self) -> impl Serialize + '_ {
        // Destructured without `..`: a field added to `JobState` fails to compile here until it
        // is stored too.
        let JobState {
            id,
            piece,
            piece_origin,
            input,
            parent,
            status,
            movement,
            movements_entered,
            entered,
            turns,
            text_only_streak,
            asks,
            parks,
            movement_parks,
            session,
            reviewed_by_parent,
            prefill,
            conversation: _,
            wait,
            wait_expires_at_ms,
            parked_at_ms,
            trace,
            children,
            grants,
            result,
        } = self;
        JobCore {
            id,
            piece,
            piece_origin,
            input,
            parent,
            status,
            movement,
            movements_entered,
            entered,
            turns,
            text_only_streak,
            asks,
            parks,
            movement_parks,
            session,
            reviewed_by_parent,
            prefill,
            wait,
            wait_expires_at_ms,
            parked_at_ms,
            trace,
            children,
            grants,
            result,
        }
    }

    /// The phase machine's view of the job, once it has one.
    pub fn phase_session(&self) -> Option<&crate::phase::RuntimeSession> {
        self.session.as_ref().map(JobSession::session)
    }

    /// Tool calls since a human last acted, as the session counts them.
    pub fn burst(&self) -> u32 {
        self.phase_session()
            .map_or(0, crate::phase::RuntimeSession::tool_loop_burst_count)
    }
}

/// [`JobState`] without its conversation, field for field as `JobState` serializes.
#[derive(Serialize)]
struct JobCore<'a> {
    id: &'a String,
    piece: &'a String,
    piece_origin: &'a String,
    input: &'a String,
    parent: &'a Option<String>,
    status: &'a JobStatus,
    movement: &'a String,
    movements_entered: &'a u32,
    entered: &'a bool,
    turns: &'a u32,
    text_only_streak: &'a u32,
    asks: &'a u32,
    parks: &'a u32,
    movement_parks: &'a u32,
    session: &'a Option<JobSession>,
    reviewed_by_parent: &'a bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    prefill: &'a BTreeMap<String, String>,
    wait: &'a Option<Wait>,
    wait_expires_at_ms: &'a Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parked_at_ms: &'a Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: &'a Option<crate::telemetry::JobTrace>,
    children: &'a Vec<String>,
    grants: &'a Vec<Grant>,
    result: &'a Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_without_its_conversation_reads_back_whole_but_for_the_conversation() {
        let mut job = JobState::new("j".into(), "chat", "chat", "hi".into());
        job.prefill.insert("city".into(), "Lisbon".into());
        job.children.push("child".into());
        job.result = Some("done".into());
        job.wait_expires_at_ms = Some(7);
        job.parked_at_ms = Some(5);
        job.trace = Some(crate::telemetry::JobTrace {
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: "b7ad6b7169203331".into(),
            started_ms: 3,
            started_by: Some(crate::telemetry::SpanRef {
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                span_id: "00f067aa0ba902b7".into(),
            }),
        });
        let core = serde_json::to_value(job.without_conversation()).unwrap();
        let mut whole = serde_json::to_value(&job).unwrap();
        whole.as_object_mut().unwrap().remove("conversation");
        assert_eq!(core, whole);
        let back: JobState = serde_json::from_value(core).unwrap();
        assert!(back.conversation.is_empty());
        assert_eq!(
            JobState {
                conversation: job.conversation.clone(),
                ..back
            },
            job
        );
    }

    #[test]
    fn status_names_round_trip() {
        for status in JobStatus::ALL {
            assert_eq!(JobStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
    }
}
