//! A small blocking HTTP client over `wasi:http/outgoing-handler`.
//!
//! Tools run one call per fresh instance and have nothing else to do while a
//! request is in flight, so blocking on the response pollable is simpler than
//! any async runtime and costs nothing. Redirects are not followed here: what
//! to do with them (and with cookies across them) is the calling tool's policy.

use std::fmt;

pub use url::Url;
pub use wasi::http::types::ErrorCode;

use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

/// Bytes asked of the body stream per read; large enough that a 5 MiB page
/// takes few round trips through the host.
const READ_CHUNK: u64 = 64 * 1024;

/// A response whose body has been read (up to the caller's cap).
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// Header names as the host gave them (lowercase in practice), values raw.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, cut at the cap given to [`get`].
    pub body: Vec<u8>,
    /// True when the body was longer than the cap and was cut.
    pub body_truncated: bool,
}

impl Response {
    /// The first header called `name` (ASCII case-insensitive), if it is
    /// valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    /// The media type of `content-type`, lowercased, without parameters
    /// (`"text/html"` for `text/html; charset=utf-8`).
    pub fn media_type(&self) -> Option<String> {
        let value = self.header("content-type")?;
        let media = value.split(';').next().unwrap_or("").trim();
        (!media.is_empty()).then(|| media.to_ascii_lowercase())
    }
}

/// Why a request produced no response.
#[derive(Debug, Clone)]
pub enum Error {
    /// The URL cannot be sent through wasi:http (wrong scheme, no host).
    InvalidUrl(String),
    /// A header was refused by wasi:http (forbidden or malformed).
    InvalidHeader(String),
    /// wasi:http reported an error: the host denied the request, DNS
    /// failed, the connection broke...
    Http(ErrorCode),
    /// The host returned something the wasi:http contract does not allow
    /// (a response future that resolves twice, a body taken twice...).
    Protocol(String),
}

impl Error {
    /// Whether trying the same request later might succeed: transport
    /// failures may, a denied or malformed request will not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Http(code) => !matches!(
                code,
                ErrorCode::HttpRequestDenied
                    | ErrorCode::HttpRequestUriInvalid
                    | ErrorCode::HttpRequestMethodInvalid
                    | ErrorCode::HttpRequestHeaderSize(_)
                    | ErrorCode::HttpRequestHeaderSectionSize(_)
                    | ErrorCode::HttpRequestBodySize(_)
                    | ErrorCode::HttpRequestTrailerSize(_)
                    | ErrorCode::HttpRequestTrailerSectionSize(_)
                    | ErrorCode::TlsCertificateError
                    | ErrorCode::TlsAlertReceived(_)
                    | ErrorCode::LoopDetected
                    | ErrorCode::ConfigurationError
            ),
            Error::InvalidUrl(_) | Error::InvalidHeader(_) | Error::Protocol(_) => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidUrl(msg) => write!(f, "invalid URL: {msg}"),
            Error::InvalidHeader(msg) => write!(f, "invalid request header: {msg}"),
            Error::Http(code) => write!(f, "HTTP request failed: {}", error_code_text(code)),
            Error::Protocol(msg) => write!(f, "HTTP request failed: {msg}"),
        }
    }
}

impl std::error::Error for Error {}

/// The `Debug` text of a wasi:http error code without the `ErrorCode::`
/// prefix the generated bindings put in front (`HttpRequestDenied`,
/// `DnsError(DnsErrorPayload { .. })`), so messages name the code as the WIT
/// and the host's logs do.
pub fn error_code_text(code: &ErrorCode) -> String {
    let text = format!("{code:?}");
    match text.strip_prefix("ErrorCode::") {
        Some(rest) => rest.to_owned(),
        None => text,
    }
}

/// Parses `url` and checks that it is an absolute http or https URL with a
/// host: the only kind wasi:http can send.
pub fn parse_url(url: &str) -> Result<Url, Error> {
    let parsed = Url::parse(url).map_err(|err| Error::InvalidUrl(format!("{url:?}: {err}")))?;
    check_url(&parsed)?;
    Ok(parsed)
}

fn check_url(url: &Url) -> Result<(), Error> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::InvalidUrl(format!(
            "{url}: only http and https URLs are supported"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::InvalidUrl(format!("{url}: no host")));
    }
    Ok(())
}

/// Sends a GET for `url` with `headers` and reads at most `max_body` bytes
/// of the body, blocking until done.
pub fn get(url: &Url, headers: &[(&str, &str)], max_body: usize) -> Result<Response, Error> {
    check_url(url)?;
    let scheme = if url.scheme() == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let host = url.host_str().unwrap_or_default();
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let path_with_query = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };

    let entries: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    let fields = Fields::from_list(&entries).map_err(|err| {
        let names: Vec<&str> = headers.iter().map(|(name, _)| *name).collect();
        Error::InvalidHeader(format!("{err:?} (headers: {})", names.join(", ")))
    })?;

    let request = OutgoingRequest::new(fields);
    request
        .set_method(&Method::Get)
        .map_err(|()| Error::Protocol("the host refused the GET method".into()))?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| Error::InvalidUrl(format!("{url}: scheme refused by the host")))?;
    request
        .set_authority(Some(&authority))
        .map_err(|()| Error::InvalidUrl(format!("{url}: authority refused by the host")))?;
    request
        .set_path_with_query(Some(&path_with_query))
        .map_err(|()| Error::InvalidUrl(format!("{url}: path refused by the host")))?;

    let future = outgoing_handler::handle(request, None).map_err(Error::Http)?;
    let response = loop {
        if let Some(result) = future.get() {
            break result
                .map_err(|()| Error::Protocol("the response was already taken".into()))?
                .map_err(Error::Http)?;
        }
        future.subscribe().block();
    };

    let status = response.status();
    let headers = {
        let fields = response.headers();
        fields.entries()
    };

    let body = response
        .consume()
        .map_err(|()| Error::Protocol("the response body was already taken".into()))?;
    let stream = body
        .stream()
        .map_err(|()| Error::Protocol("the body stream was already taken".into()))?;
    let mut bytes = Vec::new();
    let mut body_truncated = false;
    loop {
        // Ask for one byte past the cap so a body of exactly `max_body`
        // bytes is not reported as cut.
        let room = (max_body + 1).saturating_sub(bytes.len()) as u64;
        match stream.blocking_read(room.min(READ_CHUNK)) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() > max_body {
                    bytes.truncate(max_body);
                    body_truncated = true;
                    break;
                }
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(err)) => {
                return Err(match wasi::http::types::http_error_code(&err) {
                    Some(code) => Error::Http(code),
                    None => Error::Protocol(format!("reading the body: {}", err.to_debug_string())),
                });
            }
        }
    }
    // wasi:http resources are children of one another: the stream must go
    // before the body, and the body before the response.
    drop(stream);
    drop(body);
    drop(response);

    Ok(Response {
        status,
        headers,
        body: bytes,
        body_truncated,
    })
}
