//! The MCP server: every tool of the plugins loaded, listed with its description and JSON
//! Schema, and called through the same sandbox, policy and limits as in a job (`calls`).
//!
//! Invariant: a client hears of every change of the tools, on its session (up to 2025-11-25)
//! or on its `subscriptions/listen` stream (2026-07-28). A call of revision 2026-07-28 is
//! never interrupted by a request to the client (the revision forbids it): it returns its
//! questions instead.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, SubscriptionFilter, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::broadcast;
use tracing::Instrument as _;

use super::jobs::Jobs;
use super::logins::Logins;
use super::rounds::{Caller, Sealer};
use super::waits::JobPages;
use crate::engine::CatalogSlot;
use crate::plugin::Plugin;
use crate::worker::Versions;

/// The server of every connection (stdio) and session or request (HTTP); a clone serves
/// each, sharing the catalog, who is connected and the sealing key.
#[derive(Clone)]
pub struct ToolServer {
    pub(super) catalog: Arc<CatalogSlot>,
    /// The clients connected with a session, to tell when the tools change.
    clients: Arc<Mutex<Vec<Peer<RoleServer>>>>,
    /// Each change of the tools, for the clients listening without a session.
    changes: broadcast::Sender<()>,
    pub(super) sealer: Arc<Sealer>,
    /// Where a version that a resumed call is pinned to is found when this process lacks it.
    pub(super) versions: Option<Arc<dyn Versions>>,
    /// The jobs of the process, whose pieces are tools too (only where jobs run: `serve`,
    /// `mcp --jobs`).
    jobs: Option<Arc<Jobs>>,
    /// The browser logins calls wait for, done on pages of this server (only in `serve`).
    pub(super) logins: Option<Arc<Logins>>,
    /// The address people reach this server's pages at (`https://host[/prefix]`), when the
    /// operator gave one: else the request's `Host`, over `http://`.
    public_url: Option<Arc<str>>,
}

impl ToolServer {
    /// A server of the tools of `catalog`, whose calls' states `sealer` seals.
    pub fn new(catalog: Arc<CatalogSlot>, sealer: Sealer) -> Self {
        Self {
            catalog,
            clients: Arc::default(),
            changes: broadcast::channel(16).0,
            sealer: Arc::new(sealer),
            versions: None,
            jobs: None,
            logins: None,
            public_url: None,
        }
    }

    /// Links people to pages at `url` (`https://host[/prefix]`, checked by
    /// [`public_url`](super::public_url)) rather than at the address a request named: a server
    /// behind a TLS proxy, or `maestro mcp` on stdio pointing at a `maestro serve` of its store.
    pub fn with_public_url(mut self, url: Option<String>) -> Self {
        self.public_url = url.map(Arc::from);
        self
    }

    /// Has a call that waits for a browser login send the person to a page of this server,
    /// which gives the session to `logins`.
    pub fn with_logins(mut self, logins: Arc<Logins>) -> Self {
        self.logins = Some(logins);
        self
    }

    /// Offers the pieces of `jobs` as tools, and their jobs as tasks.
    pub fn with_jobs(mut self, jobs: Arc<Jobs>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// The process saved `job`, or heard that another node did: calls that follow it look again.
    pub fn job_saved(&self, job: &str) {
        if let Some(jobs) = &self.jobs {
            jobs.saved(job);
        }
    }

    /// Resumes calls on versions this process never loaded, from `versions`.
    pub fn with_versions(mut self, versions: Arc<dyn Versions>) -> Self {
        self.versions = Some(versions);
        self
    }

    /// Tells every connected client that the tools changed (a plugin loaded, reloaded or was
    /// removed), so it lists them again.
    pub async fn tools_changed(&self) {
        // No listener is no error: a listener that comes later lists the tools anew anyway.
        let _ = self.changes.send(());
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
        if let Some(jobs) = &self.jobs {
            tools.extend(jobs.tools(|name| catalog.spec(name).is_some()));
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// The plugin serving `tool` now.
    pub(super) fn plugin_for(&self, tool: &str) -> Result<Arc<Plugin>, ErrorData> {
        self.catalog
            .current()
            .plugin_for(tool)
            .cloned()
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("no tool `{tool}`: tools/list names the tools there are"),
                    None,
                )
            })
    }
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        let builder = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed();
        // A task is a job: only a process that runs jobs offers them.
        let capabilities = match self.jobs {
            Some(_) => builder.enable_tasks().build(),
            None => builder.build(),
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("maestro", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Sandboxed WebAssembly tools. A tool may ask a question or ask for approval \
                 while it runs: answer the elicitation to let it go on.",
            )
    }

    /// Every revision up to 2026-07-28: a client of 2025-11-25 or before is asked in the middle
    /// of a call, one of 2026-07-28 gets its questions as results.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cx.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, cx: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.changes.subscribe();
        loop {
            tokio::select! {
                () = cx.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if cx.accepted().tools_list_changed == Some(true)
                            && let Err(error) = cx.sink().notify_tool_list_changed().await
                        {
                            tracing::debug!("an MCP listener went away: {error}");
                            return Ok(());
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
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
        catalog
            .spec(name)
            .map(tool_of)
            .or_else(|| self.jobs.as_ref()?.piece(name))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let in_rounds = cx
            .protocol_version()
            .is_some_and(|version| !version.has_initialize());
        let caller = caller(&cx);
        let span = call_span(&request.name, &cx);
        let call = async {
            let name = request.name.to_string();
            if let Some(jobs) = self.piece_jobs(&name) {
                let job = jobs
                    .start(&name, request.arguments.unwrap_or_default())
                    .await?;
                let page = self.page_of(&cx, &job);
                if cx
                    .client_capabilities()
                    .is_some_and(|capabilities| capabilities.supports_tasks())
                {
                    return Ok(jobs.task(&job, &caller, &page).await?.into());
                }
                // Up to 2025-11-25 a client may be asked in the middle of the call.
                let live = (!in_rounds).then_some(&cx);
                return Ok(jobs.follow(&job, &page, live).await.into());
            }
            if in_rounds {
                self.call_in_rounds(request, &caller, &cx).await
            } else {
                let tool = request.name.to_string();
                let plugin = self.plugin_for(&tool)?;
                let arguments = Value::Object(request.arguments.unwrap_or_default());
                Ok(self.call_live(plugin, tool, arguments, &cx).await.into())
            }
        };
        tokio::select! {
            result = call.instrument(span) => result,
            () = cx.ct.cancelled() => Err(ErrorData::internal_error("the client cancelled the call", None)),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let jobs = self.task_jobs()?;
        let task = jobs
            .get(request, &caller(&cx), |job| self.page_of(&cx, job))
            .await?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_jobs()?
            .update(request, &caller(&cx), |job| self.page_of(&cx, job))
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_jobs()?.cancel(request, &caller(&cx)).await
    }
}

impl ToolServer {
    /// The jobs that run `name`, if it names a piece and no plugin's tool.
    fn piece_jobs(&self, name: &str) -> Option<&Arc<Jobs>> {
        let jobs = self.jobs.as_ref()?;
        let catalog = self.catalog.current();
        (catalog.spec(name).is_none() && jobs.piece(name).is_some()).then_some(jobs)
    }

    fn task_jobs(&self) -> Result<&Arc<Jobs>, ErrorData> {
        // rmcp answers `tasks/*` only where the capability is declared, which needs jobs.
        self.jobs
            .as_ref()
            .ok_or_else(|| ErrorData::internal_error("this server has no tasks", None))
    }

    /// Where people reach this server's pages: the operator's public address, else the
    /// request's `Host` over `http://` (checked by the guard on a server without tokens; with
    /// tokens, the caller's own choice, sent back to it); `None` over stdio without one.
    pub(super) fn address(&self, cx: &RequestContext<RoleServer>) -> Option<String> {
        if let Some(url) = &self.public_url {
            return Some(url.to_string());
        }
        cx.extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get(http::header::HOST))
            .and_then(|host| host.to_str().ok())
            .map(|host| format!("http://{host}"))
    }

    /// Where a person settles what job `job` waits for: pages at [`Self::address`], or only its
    /// id.
    fn page_of(&self, cx: &RequestContext<RoleServer>, job: &str) -> JobPages {
        JobPages::new(self.address(cx), job)
    }
}

/// The span of one `tools/call`, named and described as OpenTelemetry's conventions for MCP
/// have it, under the client's span when its `_meta` carries a `traceparent`: the sandboxed
/// call's own span is a child of it.
fn call_span(tool: &str, cx: &RequestContext<RoleServer>) -> tracing::Span {
    let span = tracing::info_span!("mcp.tools/call", otel.name = tracing::field::Empty,
        otel.kind = "server", mcp.method.name = "tools/call", gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool, jsonrpc.request.id = %cx.id,
        mcp.protocol.version = tracing::field::Empty);
    if crate::telemetry::tracing_on() {
        span.record("otel.name", format!("tools/call {tool}"));
        if let Some(version) = cx.protocol_version() {
            span.record("mcp.protocol.version", version.as_str());
        }
        crate::telemetry::continue_trace(
            &span,
            cx.meta.get_traceparent(),
            cx.meta.get_tracestate(),
        );
    }
    span
}

/// Who makes the request: whom the HTTP layer identified, else the client of the connection.
pub(super) fn caller(cx: &RequestContext<RoleServer>) -> Caller {
    cx.extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .unwrap_or_else(Caller::anonymous)
}

fn tool_of(spec: &crate::plugin::ToolSpec) -> Tool {
    let schema = match &spec.parameters {
        Value::Object(schema) => schema.clone(),
        // `describe` checks every schema is an object; this keeps a list from failing anyway.
        _ => serde_json::Map::from_iter([("type".to_owned(), Value::from("object"))]),
    };
    Tool::new(spec.name.clone(), spec.description.clone(), schema)
}
