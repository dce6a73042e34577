//! `/mcp`: the tools of this server's plugins over MCP's streamable HTTP, behind the API's
//! guard and tokens, with the pieces as tools and their jobs as tasks; every client connected
//! hears when hot loading changes the tools.
//!
//! Invariant: a request reaches the MCP endpoint only through the same `Host` / `Origin` guard
//! and token check as the API: a call needs the `answer` scope (it runs a tool, as a job does),
//! a listening stream `read`.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::{Notify, broadcast};

use super::api::AppState;
use super::auth::{bearer_token, require_token};
use super::live::{Hub, Notice};
use crate::mcp::{Caller, Changed, ToolServer};

pub(super) fn routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    let service = crate::mcp::http_service(state.mcp.clone(), state.mcp_stop.clone());
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(identify_caller))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
}

/// Names the caller of a request the token check let through, for the states its calls are
/// bound to: by a digest of its token, never the token itself.
async fn identify_caller(mut request: Request, next: Next) -> Response {
    let caller = bearer_token(request.headers()).map_or_else(Caller::anonymous, Caller::with_token);
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// What the MCP server's piece calls and tasks tell the process of a job they changed.
pub(super) fn job_changes(hub: Arc<Hub>, wake: Arc<Notify>) -> Changed {
    Arc::new(move |job, status| super::answers::publish_change(&hub, &wake, job, status))
}

/// Tells the MCP clients of each change of the plugins that serve, and the calls that follow a
/// job of each save, until the hub closes.
pub(super) async fn tell_mcp(hub: Arc<Hub>, server: ToolServer) {
    let mut notices = hub.subscribe();
    drop(hub);
    loop {
        match notices.recv().await {
            Ok(Notice::Plugin(_)) => server.tools_changed().await,
            Ok(Notice::Saved { job, .. }) => server.job_saved(&job),
            // What was missed may have been a change of the tools; a follower reads again soon.
            Err(broadcast::error::RecvError::Lagged(_)) => server.tools_changed().await,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
