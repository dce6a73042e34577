//! Bearer-token authentication of the API.
//!
//! Invariant: with tokens configured, every `/v1` call must carry one of them
//! (`Authorization: Bearer <token>`), on any address; without tokens the server only ever
//! listens on loopback (checked when it starts). Tokens are compared in constant time and never
//! written to a log, an error or a `Debug` output.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::{ApiError, AppState};

#[derive(Clone, Default)]
pub struct Auth {
    tokens: Vec<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth({} token(s))", self.tokens.len())
    }
}

impl Auth {
    /// Refuses an open server on a non-loopback address, and tokens too short to be secret.
    pub fn new(tokens: Vec<String>, listen: SocketAddr) -> Result<Self, String> {
        if let Some(index) = tokens.iter().position(|token| token.trim().len() < 16) {
            return Err(format!(
                "server.tokens[{index}]: a token must have at least 16 characters"
            ));
        }
        if tokens.is_empty() && !listen.ip().is_loopback() {
            return Err(format!(
                "server.listen = {listen} is reachable from other machines: set server.tokens \
                 (or MAESTRO_API_TOKEN), or listen on 127.0.0.1"
            ));
        }
        Ok(Self { tokens })
    }

    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    fn admits(&self, presented: &str) -> bool {
        // Every token is compared in full, so the time taken says nothing about any of them.
        self.tokens.iter().fold(false, |found, token| {
            found | constant_time_eq(token.as_bytes(), presented.as_bytes())
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

pub async fn require_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if state.auth.is_open() {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(token) if state.auth.admits(token) => next.run(request).await,
        Some(_) => refuse("the bearer token is not valid for this server"),
        None => refuse("this server needs `Authorization: Bearer <token>`"),
    }
}

fn refuse(message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_server_must_be_on_loopback() {
        let anywhere: SocketAddr = "0.0.0.0:7070".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:7070".parse().unwrap();
        let error = Auth::new(Vec::new(), anywhere).unwrap_err();
        assert!(error.contains("server.tokens"), "{error}");
        assert!(Auth::new(Vec::new(), local).unwrap().is_open());
        assert!(Auth::new(vec!["x".repeat(16)], anywhere).is_ok());
    }

    #[test]
    fn short_tokens_are_refused_without_echoing_them() {
        let error = Auth::new(
            vec!["a".repeat(16), "hunter2".into()],
            "[::1]:1".parse().unwrap(),
        )
        .unwrap_err();
        assert!(error.starts_with("server.tokens[1]"), "{error}");
        assert!(!error.contains("hunter2"));
    }

    #[test]
    fn only_a_configured_token_is_admitted() {
        let auth = Auth::new(
            vec!["first-token-0123456".into(), "second-token-012345".into()],
            "127.0.0.1:1".parse().unwrap(),
        )
        .unwrap();
        assert!(auth.admits("second-token-012345"));
        assert!(!auth.admits("second-token-01234"));
        assert!(!auth.admits(""));
        assert_eq!(format!("{auth:?}"), "Auth(2 token(s))");
    }
}
