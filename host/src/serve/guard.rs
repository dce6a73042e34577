//! Requests a web page could make a browser send: DNS rebinding and cross-site requests.
//!
//! Invariant: on every route, a request whose `Origin` is not this server's own is refused, and
//! an open server (no tokens, so loopback only) serves only a `Host` that names a loopback
//! address and the port it listens on, so a page whose name rebinds to 127.0.0.1 gets nothing.
//! Every `POST` route takes only `Content-Type: application/json` ([`require_json`]), which a
//! cross-site form cannot send without a CORS preflight this server never grants; `PUT` and
//! `DELETE` always need one.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::{ApiError, AppState};

/// What the guard knows of the server: the port it listens on, and whether it needs tokens.
#[derive(Debug, Clone, Copy)]
pub struct Guard {
    port: u16,
    open: bool,
}

impl Guard {
    pub fn new(listening: SocketAddr, open: bool) -> Self {
        Self {
            port: listening.port(),
            open,
        }
    }

    /// Why a request with `headers` must be refused, if it must.
    pub(super) fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let host = headers
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        if self.open && !self.is_loopback_host(host) {
            return Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "wrong_host",
                format!(
                    "Host: this server needs no token, so it serves only its loopback address \
                     (e.g. 127.0.0.1:{}), not {host:?}",
                    self.port
                ),
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            if !same_origin(origin, host) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "foreign_origin",
                    format!(
                        "Origin: {origin:?} is not this server; cross-site requests are refused"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `localhost`, `127.x.y.z` or `[::1]`, with this server's port.
    fn is_loopback_host(&self, host: &str) -> bool {
        let Some((name, port)) = host.rsplit_once(':') else {
            return false;
        };
        if port.parse() != Ok(self.port) {
            return false;
        }
        let name = name.trim_start_matches('[').trim_end_matches(']');
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// Whether `origin` (`scheme://host[:port]`) names the authority the request was sent to.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme {
        "http" => ":80",
        "https" => ":443",
        _ => return false,
    };
    let with_port = |text: &str| {
        if text
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.contains(']'))
        {
            text.to_ascii_lowercase()
        } else {
            format!("{}{default_port}", text.to_ascii_lowercase())
        }
    };
    !host.is_empty() && with_port(authority) == with_port(host)
}

/// The layer of every `POST` route: refuses a request not sent as JSON, whatever its body. On
/// the route only, so a `POST` to a route that takes none is still `405`.
pub async fn require_json(request: Request, next: Next) -> Response {
    match json_refusal(request.method(), request.headers()) {
        Some(refusal) => refusal.into_response(),
        None => next.run(request).await,
    }
}

fn json_refusal(method: &Method, headers: &HeaderMap) -> Option<ApiError> {
    (method == Method::POST && !is_json(headers)).then(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "Content-Type: a POST must be sent as `application/json`",
        )
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

pub async fn guard_requests(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0");
    let mut response = match state.guard.check(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    };
    // A refusal may come before the body was read (a token without the scope for an upload):
    // the connection cannot be used again, and the client must not try.
    let status = response.status();
    if has_body && (status.is_client_error() || status.is_server_error()) {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    // No response is ever to be read as another type than the one it says.
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (name.clone(), value.parse().unwrap()))
            .collect()
    }

    fn open() -> Guard {
        Guard::new("127.0.0.1:7070".parse().unwrap(), true)
    }

    #[test]
    fn an_open_server_serves_only_loopback_hosts_on_its_port() {
        for host in [
            "127.0.0.1:7070",
            "localhost:7070",
            "[::1]:7070",
            "127.0.0.2:7070",
        ] {
            let request = headers(&[(header::HOST, host)]);
            assert!(open().check(&request).is_ok(), "{host}");
        }
        for host in [
            "evil.example:7070",
            "127.0.0.1:80",
            "localhost",
            "",
            "127.0.0.1.nip.io:7070",
        ] {
            let request = headers(&[(header::HOST, host)]);
            let refusal = open().check(&request).unwrap_err();
            assert_eq!(refusal.code(), "wrong_host", "{host}");
        }
        let with_tokens = Guard::new("0.0.0.0:7070".parse().unwrap(), false);
        let request = headers(&[(header::HOST, "maestro.internal:7070")]);
        assert!(with_tokens.check(&request).is_ok());
    }

    #[test]
    fn only_this_servers_own_origin_is_served() {
        let own = headers(&[
            (header::HOST, "127.0.0.1:7070"),
            (header::ORIGIN, "http://127.0.0.1:7070"),
        ]);
        assert!(open().check(&own).is_ok());
        for origin in [
            "http://evil.example",
            "null",
            "http://localhost:7070",
            "ftp://127.0.0.1:7070",
        ] {
            let request = headers(&[(header::HOST, "127.0.0.1:7070"), (header::ORIGIN, origin)]);
            let refusal = open().check(&request).unwrap_err();
            assert_eq!(refusal.code(), "foreign_origin", "{origin}");
        }
        assert!(same_origin(
            "https://maestro.example",
            "maestro.example:443"
        ));
        assert!(same_origin("http://Maestro.example", "maestro.example"));
        assert!(!same_origin(
            "http://maestro.example",
            "maestro.example:8080"
        ));
    }

    #[test]
    fn a_post_must_be_json() {
        let host = (header::HOST, "127.0.0.1:7070");
        for content_type in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let mut request = headers(std::slice::from_ref(&host));
            if let Some(value) = content_type {
                request.insert(header::CONTENT_TYPE, value.parse().unwrap());
            }
            let refusal = json_refusal(&Method::POST, &request).unwrap();
            assert_eq!(refusal.code(), "unsupported_media_type", "{content_type:?}");
        }
        let json = headers(&[
            host,
            (header::CONTENT_TYPE, "application/json; charset=utf-8"),
        ]);
        assert!(json_refusal(&Method::POST, &json).is_none());
    }
}
