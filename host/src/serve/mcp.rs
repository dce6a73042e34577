//! `/mcp`: the tools of this server's plugins over MCP's streamable HTTP, behind the API's
//! guard and tokens; every client connected hears when hot loading changes the tools.
//!
//! Invariant: a request reaches the MCP endpoint only through the same `Host` / `Origin` guard
//! and token check as the API: a call needs the `answer` scope (it runs a tool, as a job does),
//! a listening stream `read`.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::broadcast;

use super::api::AppState;
use super::auth::{bearer_token, require_token};
use super::live::{Hub, Notice};
use crate::mcp::{Caller, ToolServer};

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

/// Tells the MCP clients of each change of the plugins that serve, until the hub closes.
pub(super) async fn announce_tool_changes(hub: Arc<Hub>, server: ToolServer) {
    let mut notices = hub.subscribe();
    drop(hub);
    loop {
        match notices.recv().await {
            Ok(Notice::Plugin(_)) | Err(broadcast::error::RecvError::Lagged(_)) => {
                server.tools_changed().await;
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
