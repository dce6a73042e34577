//! Bearer-token authentication of the API and of `/metrics`, and what each token may do.
//!
//! Invariant: with tokens configured, every `/v1` call and every scrape of `/metrics` must carry
//! one of them (`Authorization: Bearer <token>`), on any address, and the token must hold the
//! scope the call needs: `metrics` to scrape, `read` to look, `answer` to start jobs and answer,
//! approve, deny, log in or cancel them, `admin` to install or remove plugins (code that runs
//! with a name's grants). Without tokens the server only ever listens on loopback (checked when
//! it starts). Tokens are compared in constant time and never written to a log, an error or a
//! `Debug` output.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::{ApiError, AppState};

/// What a token may do; each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Only `GET /metrics`: a token for a metrics scraper.
    Metrics,
    Read,
    Answer,
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Metrics, Scope::Read, Scope::Answer, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Metrics => "metrics",
            Scope::Read => "read",
            Scope::Answer => "answer",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|scope| scope.as_str() == text)
    }

    /// The scope a call needs: the metrics need `metrics`, looking needs `read`, plugin
    /// changes `admin`, any other change `answer`.
    fn needed(method: &Method, path: &str) -> Self {
        if path == "/metrics" && (method == Method::GET || method == Method::HEAD) {
            Scope::Metrics
        } else if method == Method::GET || method == Method::HEAD {
            Scope::Read
        } else if path.starts_with("/v1/plugins") {
            Scope::Admin
        } else {
            Scope::Answer
        }
    }
}

/// One accepted token and the widest scope it holds.
#[derive(Clone)]
pub struct Token {
    pub secret: String,
    pub scope: Scope,
}

#[derive(Clone, Default)]
pub struct Auth {
    tokens: Vec<Token>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth({} token(s))", self.tokens.len())
    }
}

impl Auth {
    /// Refuses an open server on a non-loopback address, and tokens too short to be secret.
    pub fn new(tokens: Vec<Token>, listen: SocketAddr) -> Result<Self, String> {
        if let Some(index) = tokens
            .iter()
            .position(|token| token.secret.trim().len() < 16)
        {
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

    /// The scope of the token presented, if it is one of ours.
    fn admits(&self, presented: &str) -> Option<Scope> {
        // Every token is compared in full, so the time taken says nothing about any of them.
        self.tokens.iter().fold(None, |found, token| {
            let equal = constant_time_eq(token.secret.as_bytes(), presented.as_bytes());
            if equal { Some(token.scope) } else { found }
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
    match state.auth.refusal(&request) {
        None => next.run(request).await,
        Some(refusal) => refusal,
    }
}

impl Auth {
    /// The refusal of `request`, unless it carries a token of ours with the scope it needs.
    pub(super) fn refusal(&self, request: &Request) -> Option<Response> {
        if self.is_open() {
            return None;
        }
        let presented = bearer_token(request.headers());
        // Inside `/v1` the router sees the path without its prefix; the original one is kept.
        let path = request
            .extensions()
            .get::<axum::extract::OriginalUri>()
            .map_or_else(
                || request.uri().path().to_owned(),
                |uri| uri.path().to_owned(),
            );
        let needed = Scope::needed(request.method(), &path);
        match presented.map(|token| self.admits(token)) {
            Some(Some(scope)) if scope >= needed => None,
            Some(Some(scope)) => Some(
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden_scope",
                    format!(
                        "this token holds the `{}` scope; this call needs `{}`",
                        scope.as_str(),
                        needed.as_str()
                    ),
                )
                .into_response(),
            ),
            Some(None) => Some(refuse("the bearer token is not valid for this server")),
            None => Some(refuse("this server needs `Authorization: Bearer <token>`")),
        }
    }
}

/// The token of `Authorization: Bearer <token>`, if the request carries one.
pub(super) fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
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
        assert!(Auth::new(vec![admin(&"x".repeat(16))], anywhere).is_ok());
    }

    #[test]
    fn short_tokens_are_refused_without_echoing_them() {
        let error = Auth::new(
            vec![admin(&"a".repeat(16)), admin("hunter2")],
            "[::1]:1".parse().unwrap(),
        )
        .unwrap_err();
        assert!(error.starts_with("server.tokens[1]"), "{error}");
        assert!(!error.contains("hunter2"));
    }

    fn admin(secret: &str) -> Token {
        Token {
            secret: secret.into(),
            scope: Scope::Admin,
        }
    }

    #[test]
    fn only_a_configured_token_is_admitted_with_its_scope() {
        let reader = Token {
            secret: "second-token-012345".into(),
            scope: Scope::Read,
        };
        let auth = Auth::new(
            vec![admin("first-token-0123456"), reader],
            "127.0.0.1:1".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(auth.admits("first-token-0123456"), Some(Scope::Admin));
        assert_eq!(auth.admits("second-token-012345"), Some(Scope::Read));
        assert_eq!(auth.admits("second-token-01234"), None);
        assert_eq!(auth.admits(""), None);
        assert_eq!(format!("{auth:?}"), "Auth(2 token(s))");
    }

    #[test]
    fn each_call_needs_its_scope() {
        assert_eq!(Scope::needed(&Method::GET, "/v1/jobs"), Scope::Read);
        assert_eq!(Scope::needed(&Method::GET, "/v1/plugins"), Scope::Read);
        assert_eq!(Scope::needed(&Method::POST, "/v1/jobs"), Scope::Answer);
        assert_eq!(
            Scope::needed(&Method::POST, "/v1/jobs/j/approve"),
            Scope::Answer
        );
        assert_eq!(Scope::needed(&Method::PUT, "/v1/plugins/x"), Scope::Admin);
        assert_eq!(
            Scope::needed(&Method::DELETE, "/v1/plugins/x"),
            Scope::Admin
        );
        assert_eq!(Scope::needed(&Method::GET, "/metrics"), Scope::Metrics);
        assert_eq!(Scope::needed(&Method::POST, "/metrics"), Scope::Answer);
        assert!(Scope::Admin > Scope::Answer && Scope::Answer > Scope::Read);
        assert!(
            Scope::Read > Scope::Metrics,
            "a scrape token must not read jobs"
        );
    }
}
