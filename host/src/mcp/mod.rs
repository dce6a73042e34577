//! MCP: the tools of the loaded plugins served over the Model Context Protocol, on stdio
//! (`maestro mcp`) and as streamable HTTP (`/mcp` of `maestro serve`), with the official Rust
//! SDK (`rmcp`), in revision 2026-07-28 (a park returned as `input_required` with a sealed
//! state, `rounds`) and in the revisions before it (a park asked in the middle of the call).
//!
//! In `maestro serve` and `maestro mcp --jobs`, every piece is a tool too, whose call is a job
//! (`jobs`): a task for a client of the tasks extension (`tasks`), whose waits are asked as
//! forms (`waits`).
//!
//! Invariant: this layer only translates. What runs, under which policy and limits, is the
//! plugin layer's; what a park asks and what an answer resumes with is decided in `parks`,
//! which has no I/O; who may resume a call, and only once, is decided in `rounds`.

mod calls;
mod jobs;
mod login_links;
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

/// `text` checked as the address people reach `maestro serve`'s pages at: `http` or `https`,
/// a host, maybe a path prefix (a proxy's), no user, query or fragment; without a trailing `/`.
pub fn public_url(text: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(text).map_err(|error| {
        format!("`{text}` is not a URL ({error}): give one like https://maestro.example.com")
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "`{text}` is not an http:// or https:// address with a host"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("`{text}` names a user: links must not carry one"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "`{text}` has a query or fragment: give the address the pages sit under"
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// Serves `server` on this process's stdin and stdout until the client goes. Where they are
/// pipes (as a client that starts maestro makes them) they are read and written on the
/// runtime's reactor, on file descriptions of their own: no hand-off to a blocking thread for
/// each message.
pub async fn serve_stdio(server: ToolServer) -> Result<(), String> {
    use rmcp::ServiceExt as _;
    let running = server
        .serve(rmcp::transport::stdio_pipes())
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

#[cfg(test)]
mod tests {
    use super::public_url;

    #[test]
    fn a_public_url_is_an_http_address_without_user_query_or_trailing_slash() {
        assert_eq!(
            public_url("https://maestro.example.com/").unwrap(),
            "https://maestro.example.com"
        );
        assert_eq!(
            public_url("https://example.com/maestro/").unwrap(),
            "https://example.com/maestro"
        );
        assert_eq!(
            public_url("http://127.0.0.1:7070").unwrap(),
            "http://127.0.0.1:7070"
        );
        for bad in [
            "maestro.example.com",
            "ftp://example.com",
            "https://user:secret@example.com",
            "https://example.com/?a=1",
            "https://example.com/#x",
        ] {
            assert!(public_url(bad).is_err(), "{bad} was taken");
        }
    }
}
