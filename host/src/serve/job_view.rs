//! A job as the API and the pages show it: its stored state with the phase, waiting reason and
//! artifact under review folded from its log.
//!
//! Invariant: nothing here is a separate record: the phase and waiting reason are the fold of
//! the job's stored log (the session kept with it, or its events for a job stored before
//! sessions were kept), as `maestro jobs show` prints them.

use serde_json::{Value, json};

use crate::engine::{JobEvent, JobState, WaitRequest, artifact_view, job_session};
use crate::store::{JobStore, StoreError};

/// A job as the API shows it.
pub(super) struct JobView {
    pub state: JobState,
    pub summary: Value,
}

impl JobView {
    /// `children`: every job started by this one, subtasks and workers, oldest first.
    pub(super) fn detail(mut self, children: Vec<String>) -> Value {
        if let Value::Object(fields) = &mut self.summary {
            fields.insert("input".into(), json!(self.state.input));
            fields.insert("result".into(), json!(self.state.result));
            fields.insert("children".into(), json!(children));
            let trace = self
                .state
                .trace
                .as_ref()
                .map(|trace| trace.trace_id.as_str());
            fields.insert("trace_id".into(), json!(trace));
            let artifacts: Vec<Value> = self
                .state
                .phase_session()
                .map(|session| session.artifacts().iter().map(artifact_view).collect())
                .unwrap_or_default();
            fields.insert("artifacts".into(), json!(artifacts));
        }
        self.summary
    }
}

/// Who holds a tool call for approval: the operator's policy (`policy`: approving runs that
/// very call) or a tool's own `tool-request` (`tool`: approving grants one call with exactly
/// those arguments). `None` for other waits.
fn asked_by(wait: &crate::engine::Wait) -> Option<&'static str> {
    match (&wait.request, &wait.resume) {
        (
            crate::engine::WaitRequest::ToolApproval { .. },
            crate::engine::ResumePoint::ApprovalGate { by, .. },
        ) => Some(match by {
            crate::engine::GateOwner::Policy => "policy",
            crate::engine::GateOwner::Piece => "piece",
        }),
        (crate::engine::WaitRequest::ToolApproval { .. }, _) => Some("tool"),
        _ => None,
    }
}

pub(super) fn job_view(store: &dyn JobStore, id: &str) -> Result<JobView, StoreError> {
    let (state, status) = store.load(id)?;
    let row = store.summary(id)?;
    // The session kept with the job is the fold of its log; only a job stored before sessions
    // were kept has its log folded here.
    let session = match state.phase_session() {
        Some(session) => Ok(session.clone()),
        None => {
            let log: Vec<JobEvent> = store
                .events(id, 0)?
                .into_iter()
                .map(|stored| stored.event)
                .collect();
            job_session(&state.id, &log)
        }
    };
    let under_review = state.wait.as_ref().and_then(|wait| match &wait.request {
        WaitRequest::ArtifactReview { artifact_id, .. }
        | WaitRequest::RevisionInstruction { artifact_id, .. } => session
            .as_ref()
            .ok()
            .and_then(|session| session.artifact(artifact_id))
            .map(artifact_view),
        _ => None,
    });
    let mut summary = json!({
        "id": state.id,
        "piece": state.piece,
        "status": status,
        "movement": state.movement,
        "parent": state.parent,
        "created_at_ms": row.created_at_ms,
        "updated_at_ms": row.updated_at_ms,
        "wait": state.wait.as_ref().map(|wait| json!({
            "id": wait.id,
            "reason": wait.reason.map(|reason| reason.as_str()),
            "request": wait.request,
            "asked_by": asked_by(wait),
            "artifact": under_review,
        })),
        "expires_at_ms": state.wait_expires_at_ms,
    });
    let fields = summary.as_object_mut().expect("an object");
    match &session {
        Ok(session) => {
            fields.insert("phase".into(), json!(session.phase()));
            fields.insert("waiting_reason".into(), json!(session.waiting_reason()));
            fields.insert("worker".into(), json!(session.current_worker_id()));
        }
        Err(error) => {
            fields.insert("phase".into(), Value::Null);
            fields.insert("waiting_reason".into(), Value::Null);
            fields.insert("phase_error".into(), json!(error.to_string()));
        }
    }
    Ok(JobView { state, summary })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{PinnedPlugin, ResumePoint, Wait, WaitReason, WaitRequest};
    use crate::plugin::CallRequest;

    fn wait(request: WaitRequest, resume: ResumePoint) -> Wait {
        Wait {
            id: 1,
            reason: Some(WaitReason::ToolRequest),
            request,
            resume,
        }
    }

    #[test]
    fn a_tool_approval_says_whether_the_policy_or_a_tool_asks() {
        let approval = WaitRequest::ToolApproval {
            tool: "RotateKey".into(),
            reason: "r".into(),
            arguments: "{}".into(),
        };
        let call = CallRequest::new("RotateKey", json!({}));
        let plugin = PinnedPlugin {
            name: "keys".into(),
            content_hash: "h".into(),
        };
        let gate = ResumePoint::ApprovalGate {
            call: call.clone(),
            plugin: plugin.clone(),
            by: crate::engine::GateOwner::Policy,
        };
        let parked = ResumePoint::ParkedCall { call, plugin };
        assert_eq!(asked_by(&wait(approval.clone(), gate)), Some("policy"));
        assert_eq!(asked_by(&wait(approval, parked.clone())), Some("tool"));
        let question = WaitRequest::Question {
            question: "?".into(),
        };
        assert_eq!(asked_by(&wait(question, parked)), None);
    }
}
