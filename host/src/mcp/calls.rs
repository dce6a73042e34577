//! One tool call, run to its end or to a question for the person at the client. Up to
//! revision 2025-11-25 the question is asked in the middle of the call, on its connection; from
//! 2026-07-28 the call returns it (`input_required`) with a sealed state, and the client calls
//! again with the answer.
//!
//! Invariant: a call runs on the plugin version that served the tool when the call began, also
//! when it is resumed after a question; a tool under the operator's approval gate runs only
//! after a person at the client approved that exact call; a park is asked only of a client
//! that declared it answers forms, and otherwise (or when it cannot be asked at all) the call
//! ends with a result that says what it waited for. A browser login, on `maestro serve`, sends
//! the person to a page of the server that takes the session (`login_links`), never through
//! the client. A call parks at most [`MAX_PARKS`] times. A
//! tool's failure is a result with `isError`, never a protocol error: the model reads it.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitResult, InputRequest, InputRequiredResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::parks::{self, Question, Reply};
use super::rounds::{Asked, Binding, Caller, Refusal, Round};
use super::server::ToolServer;
use crate::plugin::{CallRequest, Outcome, Park, Plugin, Resume, Terminal};

/// How many times one call may park: a tool that parks again on every answer would otherwise
/// ask for ever.
pub const MAX_PARKS: usize = 8;

/// The key of the one question an `input_required` result carries.
pub(super) const QUESTION: &str = "question";

/// How far a run of the tool got.
enum Ran {
    Ended(CallToolResult),
    Parked(Park),
}

async fn run(plugin: &Plugin, request: CallRequest) -> Ran {
    match plugin.invoke(request).await {
        Ok(Outcome::Output(text)) | Ok(Outcome::Terminal(Terminal::Complete(text))) => {
            Ran::Ended(CallToolResult::success(vec![ContentBlock::text(text)]))
        }
        Ok(Outcome::Terminal(Terminal::Abort(text))) => Ran::Ended(failed(text)),
        Ok(Outcome::Park(park)) => Ran::Parked(park),
        Err(error) => Ran::Ended(failed(error.to_json().to_string())),
    }
}

impl ToolServer {
    /// Runs `tool` to its end, asking the person at the client what its parks wait for in the
    /// middle of the call (revisions up to 2025-11-25).
    pub(super) async fn call_live(
        &self,
        plugin: Arc<Plugin>,
        tool: String,
        arguments: Value,
        cx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if plugin.policy().require_approval {
            let gate = parks::gate_question(plugin.name(), &tool, &arguments);
            let reply = ask_live(cx, &gate).await;
            if let Some(refused) = gate_refusal(&plugin, reply) {
                return refused;
            }
        }
        let mut request = CallRequest::new(tool, arguments);
        for parks in 0.. {
            let park = match run(&plugin, request.clone()).await {
                Ran::Ended(result) => return result,
                Ran::Parked(park) => park,
            };
            if parks == MAX_PARKS {
                break;
            }
            if let Park::BrowserLogin(login) = &park
                && let Some(logins) = self.logins.as_deref()
                && let Some(server) = self.address(cx)
            {
                match super::login_links::login_live(logins, &server, &request.tool, login, cx)
                    .await
                {
                    Ok(session) => request.resume = Some(Resume::LoggedIn(session)),
                    Err(ended) => return ended,
                }
                continue;
            }
            let question = match parks::question_for(&park) {
                Ok(question) => question,
                Err(why) => return failed(why),
            };
            match ask_live(cx, &question).await {
                Reply::Resume(resume) => request.resume = Some(resume),
                Reply::Ended(why) => return failed(why),
            }
        }
        too_many_parks()
    }

    /// Runs a call of revision 2026-07-28 to its end or to its next question, from its start
    /// or from the state and answer the client sent back.
    pub(super) async fn call_in_rounds(
        &self,
        request: CallToolRequestParams,
        caller: &Caller,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let binding = Binding::new(caller, &tool, &arguments);
        let Some(state) = request.request_state.as_deref() else {
            let plugin = self.plugin_for(&tool)?;
            if plugin.policy().require_approval {
                let gate = parks::gate_question(plugin.name(), &tool, &arguments);
                let round = Round::new(plugin.name(), plugin.content_hash(), Asked::Gate, 0);
                return Ok(self.ask_in_round(cx, &gate, &round, &binding));
            }
            let call = CallRequest::new(tool, arguments);
            return self.run_round(plugin, call, 0, caller, &binding, cx).await;
        };
        let round = self.sealer.open(state, &binding).map_err(refused)?;
        let responses = request.input_responses.as_ref();
        let reply = match &round.asked {
            Asked::Gate => Some(parks::gate_question(&round.plugin, &tool, &arguments)),
            Asked::Park(park) => {
                Some(parks::question_for(park).map_err(|_| refused(Refusal::Invalid))?)
            }
            Asked::Login { .. } => None,
        };
        let reply = match reply {
            Some(question) => {
                let answer = answer_in(responses)?;
                let reply = question.reply(&answer.action, answer.content.as_ref());
                self.sealer.spend(&round).await.map_err(refused)?;
                reply
            }
            None => match self
                .session_for_retry(&round, responses, caller, &binding)
                .await?
            {
                Ok(session) => Reply::Resume(Resume::LoggedIn(session)),
                Err(response) => return Ok(response),
            },
        };
        let plugin = match self.version(&round.plugin, &round.version).await {
            Ok(plugin) => plugin,
            Err(why) => return Ok(failed(why).into()),
        };
        let mut call = CallRequest::new(tool, arguments);
        match round.asked {
            Asked::Gate => {
                if let Some(refused) = gate_refusal(&plugin, reply) {
                    return Ok(refused.into());
                }
            }
            Asked::Park(_) | Asked::Login { .. } => match reply {
                Reply::Resume(resume) => call.resume = Some(resume),
                Reply::Ended(why) => return Ok(failed(why).into()),
            },
        }
        self.run_round(plugin, call, round.parks, caller, &binding, cx)
            .await
    }

    /// Runs `call` (after `parks` parks) to its end or to its next question.
    async fn run_round(
        &self,
        plugin: Arc<Plugin>,
        call: CallRequest,
        parks: usize,
        caller: &Caller,
        binding: &Binding,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = call.tool.clone();
        let park = match run(&plugin, call).await {
            Ran::Ended(result) => return Ok(result.into()),
            Ran::Parked(park) => park,
        };
        if parks == MAX_PARKS {
            return Ok(too_many_parks().into());
        }
        if let Park::BrowserLogin(login) = &park {
            let on = (plugin.name(), plugin.content_hash(), parks + 1);
            if let Some(link) = self.login_round(cx, caller, &tool, login, on, binding) {
                return Ok(link);
            }
        }
        let question = match parks::question_for(&park) {
            Ok(question) => question,
            Err(why) => return Ok(failed(why).into()),
        };
        let round = Round::new(
            plugin.name(),
            plugin.content_hash(),
            Asked::Park(park),
            parks + 1,
        );
        Ok(self.ask_in_round(cx, &question, &round, binding))
    }

    /// The result that asks `question` and carries `round`, sealed, for the retry; or, for a
    /// client that cannot be asked, the result that says what the call waited for.
    fn ask_in_round(
        &self,
        cx: &RequestContext<RoleServer>,
        question: &Question,
        round: &Round,
        binding: &Binding,
    ) -> CallToolResponse {
        if !answers_forms(cx) {
            return failed(parks::unanswerable(question)).into();
        }
        let state = self.sealer.seal(round, binding);
        let ask = InputRequest::Elicitation(ElicitRequest::new(parks::form(
            &question.message,
            &question.schema,
        )));
        InputRequiredResult::new(
            Some(BTreeMap::from([(QUESTION.to_owned(), ask)])),
            Some(state),
        )
        .into()
    }

    /// Version `content_hash` of plugin `name`: from the catalog, which keeps every version a
    /// call may resume on, or restored from the store where this process never loaded it.
    async fn version(&self, name: &str, content_hash: &str) -> Result<Arc<Plugin>, String> {
        if let Some(plugin) = self.catalog.current().pinned(content_hash) {
            return Ok(plugin.clone());
        }
        if let Some(versions) = &self.versions {
            versions.restore(name, content_hash).await?;
            if let Some(plugin) = self.catalog.current().pinned(content_hash) {
                return Ok(plugin.clone());
            }
        }
        Err(format!(
            "Not run on: plugin `{name}` changed while the call waited for its answer, and \
             version {content_hash} is not here any more; call the tool again."
        ))
    }
}

/// What a reply at the approval gate means: `None` to run the call, or the result that says
/// why it did not run.
fn gate_refusal(plugin: &Plugin, reply: Reply) -> Option<CallToolResult> {
    match reply {
        Reply::Resume(Resume::Approved) => None,
        Reply::Resume(Resume::Denied(reason)) => {
            Some(failed(format!("Not run: the call was denied: {reason}")))
        }
        Reply::Ended(why) => Some(failed(why)),
        Reply::Resume(_) => Some(failed(format!(
            "Not run: the operator's policy requires approval of every call of plugin `{}`, \
             and none was given.",
            plugin.name()
        ))),
    }
}

/// Whether the client declared it answers form elicitations.
pub(super) fn answers_forms(cx: &RequestContext<RoleServer>) -> bool {
    cx.client_capabilities()
        .and_then(|capabilities| capabilities.elicitation)
        // A client that declares elicitation without naming a mode takes forms.
        .is_some_and(|elicitation| elicitation.form.is_some() || elicitation.url.is_none())
}

/// Whether the client declared it opens links (URL elicitations).
pub(super) fn opens_links(cx: &RequestContext<RoleServer>) -> bool {
    cx.client_capabilities()
        .and_then(|capabilities| capabilities.elicitation)
        .is_some_and(|elicitation| elicitation.url.is_some())
}

/// Asks the person at the client `question` in the middle of the call, if the client can be
/// asked.
async fn ask_live(cx: &RequestContext<RoleServer>, question: &Question) -> Reply {
    if !answers_forms(cx) {
        return Reply::Ended(parks::unanswerable(question));
    }
    match cx
        .peer
        .create_elicitation(parks::form(&question.message, &question.schema))
        .await
    {
        Ok(result) => question.reply(&result.action, result.content.as_ref()),
        Err(error) => Reply::Ended(format!(
            "The call waited for a human, and the client could not be asked: {error}"
        )),
    }
}

/// The client's reply to the question of the state it sent back.
pub(super) fn answer_in(
    responses: Option<&BTreeMap<String, Value>>,
) -> Result<ElicitResult, ErrorData> {
    let answer = responses
        .and_then(|responses| responses.get(QUESTION))
        .ok_or_else(|| {
            ErrorData::invalid_params(
                format!(
                    "this call carries a requestState but no inputResponses.{QUESTION}: send \
                     the answer to the question it was given"
                ),
                None,
            )
        })?;
    serde_json::from_value(answer.clone()).map_err(|error| {
        ErrorData::invalid_params(
            format!("inputResponses.{QUESTION} is not an elicitation result: {error}"),
            None,
        )
    })
}

pub(super) fn refused(refusal: Refusal) -> ErrorData {
    match refusal {
        Refusal::Invalid | Refusal::Spent => ErrorData::invalid_params(refusal.to_string(), None),
        Refusal::Store(_) => ErrorData::internal_error(refusal.to_string(), None),
    }
}

fn too_many_parks() -> CallToolResult {
    failed(format!(
        "The call parked {} times in a row; it was stopped there.",
        MAX_PARKS + 1
    ))
}

pub(super) fn failed(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}
