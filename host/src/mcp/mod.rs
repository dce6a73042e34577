//! MCP: the tools of the loaded plugins served over the Model Context Protocol (`maestro mcp`
//! on stdio), with the official Rust SDK (`rmcp`).
//!
//! Invariant: this layer only translates. What runs, under which policy and limits, is the
//! plugin layer's; what a park asks and what an answer resumes with is decided in `parks`,
//! which has no I/O.

mod parks;
mod server;

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
