//! `maestro:tool@0.2.0`: its bindings, its `host` interface served from the version-independent
//! capabilities, and its types converted from and to `types.rs`.
//!
//! Invariant: 0.2.0 and the version-independent types are the same shapes, so every conversion
//! here is total in both directions.

wasmtime::component::bindgen!({
    path: "../wit/since_v0.2.0",
    world: "plugin",
    imports: { "maestro:tool/host.spawn-subtask": async },
    exports: { default: async },
});

use wasmtime::Store;

use self::maestro::tool::types as wit;
use super::{GuestCall, GuestError};
use crate::plugin::sandbox::CallState;
use crate::plugin::types::{
    ArtifactDraft, Fact, LoginRequest, Outcome, Park, Resume, Review, SubtaskResult, Terminal,
    ToolRequest, Verdict, WorkerRequest,
};

pub const TOOL_INTERFACE: &str = "maestro:tool/tool@0.2.0";

shared_bindings!();

/// Calls `invoke` with `call`, converted.
///
/// # Safety
///
/// `exports.check` accepted an instance of the component `instance` is an instance of.
pub(super) async unsafe fn invoke(
    exports: &Exports,
    instance: wasmtime::component::Instance,
    store: &mut Store<CallState>,
    call: GuestCall,
) -> wasmtime::Result<Result<Outcome, GuestError>> {
    let call = wit::Call {
        call_id: call.call_id,
        job_id: call.job_id,
        movement: call.movement,
        tool: call.tool,
        arguments: call.arguments,
        resume: call.resume.map(resume),
    };
    // SAFETY: the caller's contract.
    let result = unsafe { call_invoke(exports, instance, store, &call) }.await?;
    Ok(result.map(outcome).map_err(|error| GuestError {
        message: error.message,
        retryable: error.retryable,
    }))
}

fn outcome(outcome: wit::Outcome) -> Outcome {
    match outcome {
        wit::Outcome::Output(text) => Outcome::Output(text),
        wit::Outcome::Terminal(wit::Terminal::Complete(text)) => {
            Outcome::Terminal(Terminal::Complete(text))
        }
        wit::Outcome::Terminal(wit::Terminal::Abort(text)) => {
            Outcome::Terminal(Terminal::Abort(text))
        }
        wit::Outcome::Park(park) => Outcome::Park(match park {
            wit::Park::Ask(question) => Park::Ask(question),
            wit::Park::BrowserLogin(login) => Park::BrowserLogin(LoginRequest {
                url: login.url,
                reason: login.reason,
            }),
            wit::Park::ToolRequest(request) => Park::ToolRequest(ToolRequest {
                tool: request.tool,
                reason: request.reason,
                arguments: request.arguments,
            }),
            wit::Park::Subtasks(ids) => Park::Subtasks(ids),
            wit::Park::Artifact(draft) => Park::Artifact(ArtifactDraft {
                kind: draft.kind,
                title: draft.title,
                media_type: draft.media_type,
                body: draft.body,
                revises: draft.revises,
            }),
            wit::Park::Worker(worker) => Park::Worker(WorkerRequest {
                piece: worker.piece,
                input: worker.input,
            }),
        }),
    }
}

fn resume(resume: Resume) -> wit::Resume {
    match resume {
        Resume::Answered(answer) => wit::Resume::Answered(answer),
        Resume::Approved => wit::Resume::Approved,
        Resume::Denied(reason) => wit::Resume::Denied(reason),
        Resume::LoggedIn(session) => wit::Resume::LoggedIn(session),
        Resume::SubtasksDone(results) => {
            wit::Resume::SubtasksDone(results.into_iter().map(subtask_result).collect())
        }
        Resume::Expired => wit::Resume::Expired,
        Resume::Reviewed(Review {
            artifact_id,
            verdict,
        }) => wit::Resume::Reviewed(wit::Review {
            artifact_id,
            verdict: match verdict {
                Verdict::Accepted => wit::Verdict::Accepted,
                Verdict::Rejected(reason) => wit::Verdict::Rejected(reason),
                Verdict::RevisionRequested(instruction) => {
                    wit::Verdict::RevisionRequested(instruction)
                }
            },
        }),
        Resume::WorkerDone(result) => wit::Resume::WorkerDone(subtask_result(result)),
    }
}

fn subtask_result(result: SubtaskResult) -> wit::SubtaskResult {
    wit::SubtaskResult {
        job_id: result.job_id,
        status: status(result.status),
        output: result.output,
        facts: result.facts.into_iter().map(fact).collect(),
    }
}

fn fact(fact: Fact) -> wit::Fact {
    wit::Fact {
        artifact_id: fact.artifact_id,
        kind: fact.kind,
        title: fact.title,
        media_type: fact.media_type,
        body: fact.body,
    }
}
