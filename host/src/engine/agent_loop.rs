//! The agent loop of one movement: the model gets the movement's tools (plus a transition tool
//! built from its rules), its tool calls run through the plugin runtime, and the movement
//! finishes when a call settles it.
//!
//! Invariant: a movement finishes only through [`MovementResult`]: a transition picks a rule's
//! `next`; a control-flow outcome of any tool becomes its sentinel — terminal outcomes end the
//! job, parks record the call (and the content hash of the plugin that made it) so that the
//! resume re-invokes that very call with `resume` set, in the same movement; a policy that
//! wants approval (or the piece's `approve`) parks the call before it runs. The job's session is
//! asked before a tool runs: a call it refuses does not run, and the model is told why. Nothing
//! a model or a tool does can make the loop spin forever: model turns, consecutive text-only
//! replies and the piece's movements are all bounded, and each guard names itself. Every tool
//! call the model made gets exactly one answer in the conversation (parked calls get theirs on
//! resume).

use tracing::Instrument;

use super::answer::Answer;
use super::events::{JobEvent, Observer};
use super::job::{GateOwner, JobState, PinnedPlugin, ResumePoint, Wait};
use super::piece_runner::{Guard, MovementResult};
use super::prompt;
use super::tools::{TRANSITION_TOOL, ToolCatalog};
use super::wait::{WaitReason, WaitRequest};
use super::{CancelFlag, ChildJobs, EngineLimits};
use super::{artifacts, resume, workers};
use crate::llm::{ChatRequest, Message, Model, ToolCall};
use crate::phase::{RuntimePhase, TransitionError};
use crate::piece::{DefaultNext, Movement, Next, Piece, Sentinel};
use crate::plugin::{CallRequest, Outcome, Park, Plugin, Terminal};

/// Everything a movement runs against; one per job run.
pub(crate) struct LoopContext<'a> {
    pub model: &'a dyn Model,
    pub catalog: &'a ToolCatalog,
    pub limits: &'a EngineLimits,
    pub piece: &'a Piece,
    pub observer: &'a dyn Observer,
    pub cancel: &'a CancelFlag,
    pub child_jobs: Option<&'a dyn ChildJobs>,
}

impl LoopContext<'_> {
    /// Records an event the phase machine has no rule for (a model reply, a tool's answer, a
    /// movement entered): the session takes it without a step.
    pub fn emit(&self, job: &mut JobState, event: JobEvent) {
        if let Err(refused) = super::record(self.observer, job, event) {
            tracing::error!(job = %job.id, "the job's session refused an event it has no rule for: {refused}");
        }
    }

    /// Records `event` once the job's session accepts it; refused, nothing is recorded.
    pub fn record(&self, job: &mut JobState, event: JobEvent) -> Result<(), TransitionError> {
        super::record(self.observer, job, event)
    }
}

/// Whether a tool call leaves the movement running.
// Made once per tool call and consumed at once: boxing the result would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Flow {
    Continue,
    Finish(MovementResult),
}

/// Runs `movement` until something settles it. `resume` is the answer to the call this job
/// parked in this movement.
pub(crate) async fn run_movement(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    resume: Option<(Wait, Answer)>,
) -> MovementResult {
    if let Some((wait, answer)) = resume {
        if answer.is_human() {
            // A human answered: the model gets a fresh budget to act on the answer (the
            // session starts a new burst of tool calls itself).
            job.turns = 0;
            job.text_only_streak = 0;
        }
        if let Flow::Finish(result) = resume::settle_resume(cx, movement, job, wait, answer).await {
            return result;
        }
    }
    let tools = prompt::tool_definitions(cx.catalog, movement);
    loop {
        if cx.cancel.is_cancelled() {
            return MovementResult::cancelled(cx.cancel.reason());
        }
        if job.turns >= cx.limits.max_iterations {
            return MovementResult::guard(
                Guard::MaxIterations,
                format!(
                    "movement `{}` used its {} model turns without settling",
                    job.movement, cx.limits.max_iterations
                ),
            );
        }
        job.turns += 1;
        let request = ChatRequest {
            system: prompt::system_prompt(cx.piece, movement, job, cx.limits),
            messages: job.conversation.to_vec(),
            tools: tools.clone(),
        };
        let span = tracing::info_span!(
            "model.request",
            maestro.turn = job.turns,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty
        );
        let reply = match cx.model.reply(&request).instrument(span.clone()).await {
            Ok(reply) => {
                if let Some(usage) = &reply.usage {
                    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
                    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
                }
                reply
            }
            Err(error) => {
                return MovementResult::unsettled(format!(
                    "the model gave no reply in movement `{}`: {error}",
                    job.movement
                ));
            }
        };
        job.conversation.push(reply.to_message());
        cx.emit(
            job,
            JobEvent::ModelReplied {
                movement: job.movement.clone(),
                text: reply.text.clone(),
                tool_calls: reply.tool_calls.iter().map(|c| c.name.clone()).collect(),
            },
        );
        if reply.tool_calls.is_empty() {
            if let Some(result) = text_only_reply(cx, movement, job, reply.text.as_deref()) {
                return result;
            }
            continue;
        }
        job.text_only_streak = 0;
        for (index, call) in reply.tool_calls.iter().enumerate() {
            if let Flow::Finish(result) = run_call(cx, movement, job, call).await {
                for skipped in &reply.tool_calls[index + 1..] {
                    let note = format!(
                        "Not run: the job stopped at call `{}` ({}); call this tool again if it \
                         is still needed.",
                        call.id, call.name
                    );
                    answer(cx, job, &skipped.id, &skipped.name, note, true);
                }
                return result;
            }
        }
    }
}

/// A reply without tool calls: the movement's `default_next` when it has one ("no rule fired"),
/// otherwise a nudge — and the text-only guard once the nudges run out.
fn text_only_reply(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    text: Option<&str>,
) -> Option<MovementResult> {
    match movement.default_target() {
        Some(Ok(DefaultNext::Movement(next))) => return Some(MovementResult::goto(next)),
        Some(Ok(DefaultNext::Complete)) => {
            return Some(MovementResult::complete(text.unwrap_or_default()));
        }
        Some(Ok(DefaultNext::Abort)) => {
            return Some(MovementResult::abort(format!(
                "movement `{}` ended without a transition and its default_next is ABORT",
                job.movement
            )));
        }
        Some(Err(sentinel)) => {
            return Some(MovementResult::unsettled(format!(
                "movement `{}` has default_next {sentinel}, which cannot be followed",
                job.movement
            )));
        }
        None => {}
    }
    job.text_only_streak += 1;
    if job.text_only_streak >= cx.limits.max_text_only {
        return Some(MovementResult::guard(
            Guard::TextOnlyLimit,
            format!(
                "the model replied {} times in a row without calling a tool in movement `{}`",
                job.text_only_streak, job.movement
            ),
        ));
    }
    let mut nudge = String::from(
        "(maestro) This movement only moves on through a tool call. Call one of the tools \
         offered",
    );
    if !movement.rules.is_empty() {
        nudge.push_str(&format!(", or `{TRANSITION_TOOL}` to go to the next step"));
    }
    nudge.push('.');
    job.conversation.push(Message::User { text: nudge });
    None
}

async fn run_call(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    call: &ToolCall,
) -> Flow {
    let called = JobEvent::ToolCalled {
        movement: job.movement.clone(),
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments: call.arguments.clone(),
    };
    if let Err(refused) = cx.record(job, called) {
        let note = format!(
            "Not run: the job's session refuses it ({}).",
            refused.violation
        );
        answer(cx, job, &call.id, &call.name, note, true);
        return Flow::Continue;
    }
    if cx.cancel.is_cancelled() {
        return Flow::Finish(MovementResult::cancelled(cx.cancel.reason()));
    }
    if call.name == TRANSITION_TOOL && !movement.rules.is_empty() {
        return transition(cx, movement, job, call);
    }
    // The call that reaches the burst limit moved the session to waiting for the user.
    let burst_reached = job
        .phase_session()
        .is_some_and(|session| session.phase() == RuntimePhase::WaitingUser);
    if call.name != TRANSITION_TOOL && burst_reached {
        return Flow::Finish(burst_gate(job, call));
    }
    dispatch(cx, movement, job, call).await
}

/// The call that reaches the burst limit waits for a human before it runs: the phase machine
/// moves to waiting_user/input at that call, and the call runs only once a human says go on.
fn burst_gate(job: &JobState, call: &ToolCall) -> MovementResult {
    let wait = Wait {
        id: 0,
        reason: Some(WaitReason::Input),
        request: WaitRequest::BurstConfirmation {
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            calls: job.burst(),
        },
        resume: ResumePoint::BurstGate { call: call.clone() },
    };
    MovementResult::park(Sentinel::Ask, job.movement.clone(), wait)
}

/// A call that may run now: a tool of the movement with JSON arguments, held for approval when
/// the policy says so, otherwise invoked.
pub(super) async fn dispatch(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    call: &ToolCall,
) -> Flow {
    let offered = movement.tools.iter().any(|tool| tool.value == call.name);
    let plugin = cx.catalog.plugin_for(&call.name).filter(|_| offered);
    let Some(plugin) = plugin else {
        let note = format!(
            "Tool `{}` is not available in movement `{}`. Available: {}.",
            call.name,
            job.movement,
            prompt::available_tools(movement)
        );
        answer(cx, job, &call.id, &call.name, note, true);
        return Flow::Continue;
    };
    let arguments = match serde_json::from_str::<serde_json::Value>(&call.arguments) {
        Ok(arguments) => arguments,
        Err(error) => {
            let note = format!("The arguments are not valid JSON ({error}); call the tool again.");
            answer(cx, job, &call.id, &call.name, note, true);
            return Flow::Continue;
        }
    };
    let request = CallRequest {
        call_id: call.id.clone(),
        job_id: job.id.clone(),
        movement: job.movement.clone(),
        tool: call.name.clone(),
        arguments,
        resume: None,
    };
    let pin = PinnedPlugin {
        name: plugin.name().to_owned(),
        content_hash: plugin.content_hash().to_owned(),
    };
    let gate = if plugin.policy().require_approval {
        Some(GateOwner::Policy)
    } else if movement.needs_approval(&call.name) {
        Some(GateOwner::Piece)
    } else {
        None
    };
    let granted = match use_grant(job, &request, plugin.content_hash()) {
        GrantUse::Granted => true,
        GrantUse::NoGrant => false,
        GrantUse::OtherCall(approved) if gate.is_none() => {
            let note = format!(
                "Not run: a human approved `{}` only with the arguments {approved}; call it with \
                 exactly those, or ask again with RequestTool.",
                call.name
            );
            answer(cx, job, &call.id, &call.name, note, true);
            return Flow::Continue;
        }
        GrantUse::OtherCall(_) => false,
    };
    if let Some(by) = gate.filter(|_| !granted) {
        let reason = match by {
            GateOwner::Policy => format!(
                "the operator's policy requires a human to approve every call of plugin `{}`",
                plugin.name()
            ),
            GateOwner::Piece => format!(
                "piece `{}` requires a human to approve every call of `{}` in movement `{}`",
                cx.piece.name.value, call.name, job.movement
            ),
        };
        let wait = Wait {
            id: 0,
            reason: Some(WaitReason::ToolRequest),
            request: WaitRequest::ToolApproval {
                tool: call.name.clone(),
                reason,
                arguments: call.arguments.clone(),
            },
            resume: ResumePoint::ApprovalGate {
                call: request,
                plugin: pin,
                by,
            },
        };
        let resume_movement = job.movement.clone();
        return Flow::Finish(MovementResult::park(
            Sentinel::WaitingHumanToolRequest,
            resume_movement,
            wait,
        ));
    }
    invoke(cx, movement, job, plugin, request, pin).await
}

/// What the job's grants say of a call.
enum GrantUse {
    /// No grant names this tool.
    NoGrant,
    /// A grant matched the call exactly and is used up by it.
    Granted,
    /// Grants name this tool, but for other arguments (shown) or another version.
    OtherCall(String),
}

fn use_grant(job: &mut JobState, request: &CallRequest, content_hash: &str) -> GrantUse {
    let matches = |grant: &super::job::Grant| {
        grant.tool == request.tool
            && grant.content_hash == content_hash
            && grant.arguments == request.arguments
    };
    if let Some(index) = job.grants.iter().position(matches) {
        job.grants.remove(index);
        return GrantUse::Granted;
    }
    match job.grants.iter().find(|grant| grant.tool == request.tool) {
        Some(grant) => GrantUse::OtherCall(grant.arguments.to_string()),
        None => GrantUse::NoGrant,
    }
}

/// Runs one call on `plugin` and turns its outcome into the movement's next step.
pub(super) async fn invoke(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    plugin: &Plugin,
    request: CallRequest,
    pin: PinnedPlugin,
) -> Flow {
    let (call_id, tool) = (request.call_id.clone(), request.tool.clone());
    match plugin.invoke(request.clone()).await {
        Ok(Outcome::Output(output)) => {
            answer(cx, job, &call_id, &tool, output, false);
            Flow::Continue
        }
        Err(error) => {
            answer(cx, job, &call_id, &tool, error.to_json().to_string(), true);
            Flow::Continue
        }
        Ok(Outcome::Terminal(Terminal::Complete(output))) => {
            answer(
                cx,
                job,
                &call_id,
                &tool,
                "The job is complete.".into(),
                false,
            );
            Flow::Finish(MovementResult::complete(output))
        }
        Ok(Outcome::Terminal(Terminal::Abort(reason))) => {
            answer(
                cx,
                job,
                &call_id,
                &tool,
                "The job is aborted.".into(),
                false,
            );
            Flow::Finish(MovementResult::abort(reason))
        }
        Ok(Outcome::Park(park)) => {
            if let Park::Subtasks(job_ids) = &park
                && let Err(problem) = awaitable(cx, job, job_ids)
            {
                let error = crate::plugin::CallError::BadOutcome(problem);
                answer(cx, job, &call_id, &tool, error.to_json().to_string(), true);
                return Flow::Continue;
            }
            if let Some(result) = park_limit(cx, job, &call_id, &tool) {
                return Flow::Finish(result);
            }
            let call = CallRequest {
                resume: None,
                ..request
            };
            let (sentinel, reason, wait_request) = match park {
                Park::Artifact(draft) => {
                    return artifacts::hand_in(cx, movement, job, plugin, call, pin, draft).await;
                }
                Park::Worker(worker) => {
                    return workers::start_worker(cx, movement, job, plugin, call, pin, worker)
                        .await;
                }
                Park::Ask(question) => (
                    Sentinel::Ask,
                    Some(WaitReason::Input),
                    WaitRequest::Question { question },
                ),
                Park::BrowserLogin(login) => (
                    Sentinel::WaitingHumanBrowser,
                    Some(WaitReason::BrowserLogin),
                    WaitRequest::BrowserLogin {
                        url: login.url,
                        reason: login.reason,
                    },
                ),
                Park::ToolRequest(tool_request) => (
                    Sentinel::WaitingHumanToolRequest,
                    Some(WaitReason::ToolRequest),
                    WaitRequest::ToolApproval {
                        tool: tool_request.tool,
                        reason: tool_request.reason,
                        arguments: tool_request.arguments,
                    },
                ),
                Park::Subtasks(job_ids) => (
                    Sentinel::WaitSubtasks,
                    None,
                    WaitRequest::Subtasks { job_ids },
                ),
            };
            let wait = Wait {
                id: 0,
                reason,
                request: wait_request,
                resume: ResumePoint::ParkedCall { call, plugin: pin },
            };
            // Iron rule: a tool park resumes in the movement it interrupted.
            let resume_movement = job.movement.clone();
            Flow::Finish(MovementResult::park(sentinel, resume_movement, wait))
        }
    }
}

/// Whether a job may wait for `job_ids`: only its own children, never itself or another job
/// (whose result is not its to read).
fn awaitable(cx: &LoopContext<'_>, job: &mut JobState, job_ids: &[String]) -> Result<(), String> {
    learn_children(cx, job);
    let strangers: Vec<&str> = job_ids
        .iter()
        .filter(|id| !job.children.contains(id))
        .map(String::as_str)
        .collect();
    if strangers.is_empty() {
        return Ok(());
    }
    let (verb, noun) = if strangers.len() == 1 {
        ("is", "a subtask")
    } else {
        ("are", "subtasks")
    };
    Err(format!(
        "park subtasks: {} {verb} not {noun} of this job; a job may wait only for the \
         subtasks it started",
        strangers.join(", ")
    ))
}

/// Adds the children the job layer has started for `job` to its list.
fn learn_children(cx: &LoopContext<'_>, job: &mut JobState) {
    if let Some(lookup) = cx.child_jobs {
        for child in lookup.children(&job.id) {
            if !job.children.contains(&child) {
                job.children.push(child);
            }
        }
    }
}

/// Counts a park of this movement; past the limit the call is answered and the job aborted.
pub(super) fn park_limit(
    cx: &LoopContext<'_>,
    job: &mut JobState,
    call_id: &str,
    tool: &str,
) -> Option<MovementResult> {
    job.movement_parks += 1;
    if job.movement_parks <= cx.limits.max_parks_per_movement {
        return None;
    }
    let reason = format!(
        "movement `{}` parked {} times, the most allowed ({}): a tool that parks again each \
         time it is resumed would never end",
        job.movement, job.movement_parks, cx.limits.max_parks_per_movement
    );
    answer(
        cx,
        job,
        call_id,
        tool,
        format!("Not parked: {reason}."),
        true,
    );
    Some(MovementResult::guard(Guard::ParkLimit, reason))
}

fn transition(
    cx: &LoopContext<'_>,
    movement: &Movement,
    job: &mut JobState,
    call: &ToolCall,
) -> Flow {
    let targets = prompt::transition_targets(movement);
    let chosen = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|arguments| arguments.get("next")?.as_str().map(str::to_owned))
        .filter(|next| targets.contains(next));
    let Some(chosen) = chosen else {
        let note = format!(
            "`{TRANSITION_TOOL}` needs arguments like {{\"next\": \"…\"}} with `next` one of: {}.",
            targets.join(", ")
        );
        answer(cx, job, &call.id, &call.name, note, true);
        return Flow::Continue;
    };
    match Next::from_rule_next(&chosen) {
        Ok(Next::Movement(next)) => {
            let note = format!("Moving on to `{next}`.");
            answer(cx, job, &call.id, &call.name, note, false);
            Flow::Finish(MovementResult::goto(next))
        }
        Ok(Next::WaitSubtasks) => {
            let Some(resume_at) = movement.default_next.as_ref() else {
                let note = "This movement has no default_next to resume at after the subtasks.";
                answer(cx, job, &call.id, &call.name, note.into(), true);
                return Flow::Continue;
            };
            learn_children(cx, job);
            if job.children.is_empty() {
                // Nothing would ever end the wait: refuse instead of parking forever.
                let note = "This job has started no subtasks, so there is nothing to wait for; \
                            choose another option.";
                answer(cx, job, &call.id, &call.name, note.into(), true);
                return Flow::Continue;
            }
            let note = format!(
                "Waiting for the subtasks; the piece continues at `{}` with their results.",
                resume_at.value
            );
            if let Some(result) = park_limit(cx, job, &call.id, &call.name) {
                return Flow::Finish(result);
            }
            answer(cx, job, &call.id, &call.name, note, false);
            let wait = Wait {
                id: 0,
                reason: None,
                request: WaitRequest::Subtasks {
                    job_ids: job.children.clone(),
                },
                resume: ResumePoint::EnterMovement,
            };
            Flow::Finish(MovementResult::park(
                Sentinel::WaitSubtasks,
                resume_at.value.clone(),
                wait,
            ))
        }
        Err(sentinel) => Flow::Finish(MovementResult::unsettled(format!(
            "rule target {sentinel} is not allowed in rules"
        ))),
    }
}

/// Writes the answer to a tool call right after the block of answers that follows the model
/// message that made it, so a call answered on resume stays next to its siblings.
pub(super) fn answer(
    cx: &LoopContext<'_>,
    job: &mut JobState,
    call_id: &str,
    tool: &str,
    content: String,
    is_error: bool,
) {
    cx.emit(
        job,
        JobEvent::ToolAnswered {
            movement: job.movement.clone(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            content: content.clone(),
            is_error,
        },
    );
    let message = Message::Tool {
        call_id: call_id.to_owned(),
        name: tool.to_owned(),
        content,
        is_error,
    };
    let made_at = job.conversation.iter().rposition(|message| {
        matches!(message, Message::Assistant { tool_calls, .. }
            if tool_calls.iter().any(|call| call.id == call_id))
    });
    let at = match made_at {
        Some(index) => {
            let answers = job.conversation[index + 1..]
                .iter()
                .take_while(|message| matches!(message, Message::Tool { .. }))
                .count();
            index + 1 + answers
        }
        None => job.conversation.len(),
    };
    job.conversation.insert(at, message);
}
