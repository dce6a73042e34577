//! MCP: the tools of the loaded plugins served over the Model Context Protocol, on stdio
//! (`maestro mcp`) and as streamable HTTP (`/mcp` of `maestro serve`), with the official Rust
//! SDK (`rmcp`), in revision 2026-07-28 (a park returned as `input_required` with a sealed
//! state, `rounds`) and in the revisions before it (a park asked in the middle of the call).
//!
//! In `maestro serve`, every piece is a tool too, whose call is a job (`jobs`): a task for a
//! client of the tasks extension (`tasks`), whose waits are asked as forms (`waits`).
//!
//! Invariant: this layer only translates. What runs, under which policy and limits, is the
//! plugin layer's; what a park asks and what an answer resumes with is decided in `parks`,
//! which has no I/O; who may resume a call, and only once, is decided in `rounds`.

mod calls;
mod jobs;
mod logins;
mod parks;
mod rounds;
mod server;
mod tasks;
mod waits;

pub use jobs::{Changed, FOLLOW_FOR, Jobs};
pub use logins::{LoginRefusal, LoginView, Logins};
pub use rounds::{Caller, Sealer};
pub use server::ToolServer;

/// Serves `server` on this process's stdin and stdout until the client goes.
pub async fn serve_stdio(server: ToolServer) -> Result<(), String> {
    use rmcp::ServiceExt as _;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|error| format!("the MCP client's handshake failed: {error}"))?;
    running
        .waiting()
        .await
        .map_err(|error| format!("the MCP connection failed: {error}"))?;
    Ok(())
}

/// The streamable HTTP endpoint of `server`, with a session per client (a client of the
/// 2025-11-25 revision is asked in the middle of a call on its session's stream). The caller
/// checks tokens, `Host` and `Origin` before a request reaches it; `stop` ends every session.
pub fn http_service(
    server: ToolServer,
    stop: tokio_util::sync::CancellationToken,
) -> rmcp::transport::StreamableHttpService<
    ToolServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let config = rmcp::transport::StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_cancellation_token(stop);
    rmcp::transport::StreamableHttpService::new(
        move || Ok(server.clone()),
        Default::default(),
        config,
    )
}
