//! `maestro:tool@0.1.0`, frozen: its bindings, its `host` interface served from the
//! version-independent capabilities, and its types converted from and to `types.rs`.
//!
//! Invariant: every 0.1.0 value has a version-independent twin; a version-independent value
//! that 0.1.0 cannot carry (a resume of a 0.2.0 park) is refused by name, never approximated.

wasmtime::component::bindgen!({
    path: "../wit/since_v0.1.0",
    world: "plugin",
    imports: { "maestro:tool/host.spawn-subtask": async },
    exports: { default: async },
});

use wasmtime::Store;

use self::maestro::tool::types as wit;
use super::{GuestCall, GuestError, ResumeTooNew, WitVersion};
use crate::plugin::sandbox::CallState;
use crate::plugin::types::{LoginRequest, Outcome, Park, Resume, Terminal, ToolRequest};

pub const TOOL_INTERFACE: &str = "maestro:tool/tool@0.1.0";

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
        resume: call.resume.map(resume).transpose()?,
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
        }),
    }
}

fn resume(resume: Resume) -> Result<wit::Resume, ResumeTooNew> {
    let too_new = |resume| ResumeTooNew {
        version: WitVersion::V0_1_0,
        resume,
    };
    Ok(match resume {
        Resume::Answered(answer) => wit::Resume::Answered(answer),
        Resume::Approved => wit::Resume::Approved,
        Resume::Denied(reason) => wit::Resume::Denied(reason),
        Resume::LoggedIn(session) => wit::Resume::LoggedIn(session),
        // A 0.1.0 tool reads no facts: they were added in 0.2.0.
        Resume::SubtasksDone(results) => wit::Resume::SubtasksDone(
            results
                .into_iter()
                .map(|result| wit::SubtaskResult {
                    job_id: result.job_id,
                    status: status(result.status),
                    output: result.output,
                })
                .collect(),
        ),
        Resume::Expired => wit::Resume::Expired,
        Resume::Reviewed(_) => return Err(too_new("reviewed")),
        Resume::WorkerDone(_) => return Err(too_new("worker-done")),
    })
}
