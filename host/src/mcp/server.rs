//! The MCP server: every tool of the plugins loaded, listed with its description and JSON
//! Schema, and called through the same sandbox, policy and limits as in a job.
//!
//! Invariant: a call runs on the plugin version that served the tool when the call began, also
//! when it is resumed after a question; a tool under the operator's approval gate runs only
//! after a person at the client approved that exact call; a park is asked as an elicitation
//! only of a client that declared it can answer forms, and otherwise (or when it cannot be asked
//! at all) the call ends with a result that says what it waited for. A tool's failure is a
//! result with `isError`, never a protocol error: the model reads it.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::Value;

use super::parks::{self, Question, Reply};
use crate::engine::CatalogSlot;
use crate::plugin::{CallRequest, Outcome, Plugin, Terminal};

/// How many times one call may park and be resumed before the server gives up on it: a tool
/// that parks again on every answer would otherwise ask for ever.
const MAX_ROUNDS: usize = 8;

/// The server of every connection (stdio) and session (HTTP); a clone serves each, sharing
/// the catalog and who is connected.
#[derive(Clone)]
pub struct ToolServer {
    catalog: Arc<CatalogSlot>,
    /// The clients connected, to tell when the tools change.
    clients: Arc<Mutex<Vec<Peer<RoleServer>>>>,
}

impl ToolServer {
    pub fn new(catalog: Arc<CatalogSlot>) -> Self {
        Self {
            catalog,
            clients: Arc::default(),
        }
    }

    /// Tells every connected client that the tools changed (a plugin loaded, reloaded or was
    /// removed), so it lists them again.
    pub async fn tools_changed(&self) {
        let clients = {
            let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            clients.retain(|client| !client.is_transport_closed());
            clients.clone()
        };
        for client in clients {
            if let Err(error) = client.notify_tool_list_changed().await {
                tracing::debug!("an MCP client did not take the tool list change: {error}");
            }
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let catalog = self.catalog.current();
        let mut tools: Vec<Tool> = catalog
            .plugins()
            .into_iter()
            .flat_map(|plugin| plugin.specs().iter().map(tool_of))
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// Runs `tool` to its end, asking the person at the client what its parks wait for.
    async fn call(
        &self,
        plugin: Arc<Plugin>,
        tool: String,
        arguments: Value,
        cx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if plugin.policy().require_approval {
            let gate = parks::gate_question(plugin.name(), &tool, &arguments);
            match ask(cx, &gate).await {
                Reply::Resume(crate::plugin::Resume::Approved) => {}
                Reply::Resume(crate::plugin::Resume::Denied(reason)) => {
                    return failed(format!("Not run: the call was denied: {reason}"));
                }
                Reply::Resume(_) | Reply::Ended(_) => {
                    return failed(format!(
                        "Not run: the operator's policy requires approval of every call of \
                         plugin `{}`, and none was given.",
                        plugin.name()
                    ));
                }
            }
        }
        let mut request = CallRequest::new(tool, arguments);
        for _ in 0..MAX_ROUNDS {
            let park = match plugin.invoke(request.clone()).await {
                Ok(Outcome::Output(text)) | Ok(Outcome::Terminal(Terminal::Complete(text))) => {
                    return CallToolResult::success(vec![ContentBlock::text(text)]);
                }
                Ok(Outcome::Terminal(Terminal::Abort(text))) => return failed(text),
                Ok(Outcome::Park(park)) => park,
                Err(error) => return failed(error.to_json().to_string()),
            };
            let question = match parks::question_for(&park) {
                Ok(question) => question,
                Err(why) => return failed(why),
            };
            match ask(cx, &question).await {
                Reply::Resume(resume) => request.resume = Some(resume),
                Reply::Ended(why) => return failed(why),
            }
        }
        failed(format!(
            "The call parked {MAX_ROUNDS} times in a row; it was stopped there."
        ))
    }
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("maestro", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Sandboxed WebAssembly tools. A tool may ask a question or ask for approval \
                 while it runs: answer the elicitation to let it go on.",
            )
    }

    /// Up to 2025-11-25: a client of a later revision negotiates down to it, where a server
    /// may ask the client in the middle of a call.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cx.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let catalog = self.catalog.current();
        catalog.spec(name).map(tool_of)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let Some(plugin) = self.catalog.current().plugin_for(&tool).cloned() else {
            return Err(ErrorData::invalid_params(
                format!("no tool `{tool}`: tools/list names the tools there are"),
                None,
            ));
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = self.call(plugin, tool, arguments, &cx);
        tokio::select! {
            result = call => Ok(result.into()),
            () = cx.ct.cancelled() => Err(ErrorData::internal_error("the client cancelled the call", None)),
        }
    }
}

/// Asks the person at the client `question`, if the client can be asked.
async fn ask(cx: &RequestContext<RoleServer>, question: &Question) -> Reply {
    let answers_forms = cx
        .client_capabilities()
        .and_then(|capabilities| capabilities.elicitation)
        // A client that declares elicitation without naming a mode takes forms.
        .is_some_and(|elicitation| elicitation.form.is_some() || elicitation.url.is_none());
    if !answers_forms {
        return Reply::Ended(parks::unanswerable(question));
    }
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question.message.clone(),
        requested_schema: question.schema.clone(),
    };
    match cx.peer.create_elicitation(params).await {
        Ok(result) => question.reply(&result.action, result.content.as_ref()),
        Err(error) => Reply::Ended(format!(
            "The call waited for a human, and the client could not be asked: {error}"
        )),
    }
}

fn failed(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn tool_of(spec: &crate::plugin::ToolSpec) -> Tool {
    let schema = match &spec.parameters {
        Value::Object(schema) => schema.clone(),
        // `describe` checks every schema is an object; this keeps a list from failing anyway.
        _ => serde_json::Map::from_iter([("type".to_owned(), Value::from("object"))]),
    };
    Tool::new(spec.name.clone(), spec.description.clone(), schema)
}
