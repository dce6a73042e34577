//! Retries and the one HTTP exchange every provider makes: POST a JSON body, retry what a later
//! attempt may fix, classify what it cannot.
//!
//! Invariant: a provider never looks at an HTTP status itself. [`ApiEndpoint`] hands it a 2xx
//! response or a [`ModelError`]: 401/403 → `Auth` and 4xx → `Refused` at once; 429, 5xx and
//! transport failures are retried by the [`RetryPolicy`] and, once it gives up, become
//! `RateLimited` / `Server` / `Transport` with the number of attempts. Error messages carry the
//! server's own words, truncated, and never the API key.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::de::DeserializeOwned;

use super::{ModelConfigError, ModelError, Usage};
use crate::telemetry;

/// How often and how patiently a request is repeated after a rate limit, a server error or a
/// broken connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 0 is treated as 1.
    pub max_attempts: u32,
    /// Wait after the first failed attempt; each further wait doubles.
    pub base_delay: Duration,
    /// No wait is longer, whether doubled or asked for by `Retry-After`.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt number `failed_attempt` (1-based). A server that says when
    /// to come back (`Retry-After`) knows better than our doubling, within `max_delay`.
    pub fn delay_after(&self, failed_attempt: u32, retry_after: Option<Duration>) -> Duration {
        let delay = retry_after.unwrap_or_else(|| {
            let factor = 1u32
                .checked_shl(failed_attempt.saturating_sub(1))
                .unwrap_or(u32::MAX);
            self.base_delay.saturating_mul(factor)
        });
        delay.min(self.max_delay)
    }

    fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }
}

/// Server messages are quoted in errors and logs; a whole HTML error page is not.
const MAX_MESSAGE_CHARS: usize = 300;

/// One provider URL with the headers every request to it carries. Not `Debug`: it holds the
/// key.
pub(super) struct ApiEndpoint {
    provider: &'static str,
    client: reqwest::Client,
    url: Url,
    headers: HeaderMap,
    timeout: Duration,
    retry: RetryPolicy,
    /// Scrubbed from every message, in case a server echoes it back.
    secret: Option<String>,
}

/// A failure that a later attempt may not repeat.
enum Retryable {
    RateLimited { message: String },
    Server { status: StatusCode, message: String },
    Transport { message: String },
}

impl ApiEndpoint {
    /// `timeout` bounds connecting and every wait for bytes; a non-streaming exchange must
    /// also finish within it (see [`ApiEndpoint::post_for_json`]).
    pub(super) fn new(
        provider: &'static str,
        url: Url,
        headers: HeaderMap,
        secret: Option<String>,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("maestro/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(timeout)
            .read_timeout(timeout)
            .build()?;
        Ok(Self {
            provider,
            client,
            url,
            headers,
            timeout,
            retry,
            secret,
        })
    }

    /// A header value that `Debug` output of requests and headers must not show.
    pub(super) fn secret_header(value: &str) -> Option<HeaderValue> {
        let mut value = HeaderValue::from_str(value).ok()?;
        value.set_sensitive(true);
        Some(value)
    }

    /// Counts the tokens a reply reports having used.
    pub(super) fn used(&self, usage: Option<Usage>) -> Option<Usage> {
        if let Some(usage) = usage {
            telemetry::model_tokens(self.provider, usage.input_tokens, usage.output_tokens);
        }
        usage
    }

    /// The URL without user name or password, for messages.
    pub(super) fn shown_url(&self) -> String {
        shown_url(&self.url)
    }

    /// POSTs `body` and parses the whole 2xx answer as `T`; the exchange must finish within
    /// the timeout.
    pub(super) async fn post_for_json<T: DeserializeOwned>(
        &self,
        body: &serde_json::Value,
    ) -> Result<T, ModelError> {
        let response = self.post(body, Some(self.timeout)).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|error| ModelError::Transport {
                provider: self.provider.to_owned(),
                message: self.scrub(&format!(
                    "reading the answer of {}: {}",
                    self.shown_url(),
                    describe_transport_error(&error)
                )),
            })?;
        serde_json::from_slice(&bytes).map_err(|error| ModelError::Malformed {
            provider: self.provider.to_owned(),
            detail: self.scrub(&format!(
                "the body does not follow the wire format ({error}); it starts with: {}",
                excerpt(&String::from_utf8_lossy(&bytes))
            )),
        })
    }

    /// POSTs `body` and returns the 2xx response unread, for a body that streams: only the
    /// silences between reads are bounded, not the whole answer.
    pub(super) async fn post_for_stream(
        &self,
        body: &serde_json::Value,
    ) -> Result<reqwest::Response, ModelError> {
        self.post(body, None).await
    }

    /// A `Transport` error for a failure while the caller reads a streaming body.
    pub(super) fn broken_stream(&self, error: &reqwest::Error) -> ModelError {
        ModelError::Transport {
            provider: self.provider.to_owned(),
            message: self.scrub(&format!(
                "the stream from {} broke: {}",
                self.shown_url(),
                describe_transport_error(error)
            )),
        }
    }

    async fn post(
        &self,
        body: &serde_json::Value,
        total_timeout: Option<Duration>,
    ) -> Result<reqwest::Response, ModelError> {
        // Serialized once: every attempt sends the same bytes.
        let body = bytes_of(body);
        let attempts = self.retry.attempts();
        let mut attempt = 1;
        loop {
            let mut request = self
                .client
                .post(self.url.clone())
                .headers(self.headers.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            if let Some(timeout) = total_timeout {
                request = request.timeout(timeout);
            }
            let sent = request.send().await;
            telemetry::model_request(
                self.provider,
                match &sent {
                    Ok(response) => response.status().as_u16().to_string(),
                    Err(_) => "transport".to_owned(),
                },
            );
            let (failure, retry_after) = match sent {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let retry_after = retry_after(response.headers());
                    let message = self.error_message(response).await;
                    let failure = match status.as_u16() {
                        401 | 403 => return Err(self.auth(status, message)),
                        429 => Retryable::RateLimited { message },
                        500..=599 => Retryable::Server { status, message },
                        _ => return Err(self.refused(status, message)),
                    };
                    (failure, retry_after)
                }
                // A request that could not even be built fails the same way every time.
                Err(error) if error.is_builder() => {
                    return Err(self.transport(describe_transport_error(&error)));
                }
                Err(error) => {
                    let message = format!(
                        "cannot reach {}: {}",
                        self.shown_url(),
                        describe_transport_error(&error)
                    );
                    (Retryable::Transport { message }, None)
                }
            };
            if attempt >= attempts {
                return Err(self.gave_up(failure, attempts));
            }
            tokio::time::sleep(self.retry.delay_after(attempt, retry_after)).await;
            telemetry::model_retry(self.provider);
            attempt += 1;
        }
    }

    /// The server's own explanation of an error status, from the body.
    async fn error_message(&self, response: reqwest::Response) -> String {
        let status = response.status();
        let message = match response.bytes().await {
            Ok(body) => server_message(&body),
            Err(error) => format!(
                "(the error body could not be read: {})",
                describe_transport_error(&error)
            ),
        };
        let message = if message.is_empty() {
            status.canonical_reason().unwrap_or("no message").to_owned()
        } else {
            message
        };
        self.scrub(&message)
    }

    fn auth(&self, status: StatusCode, message: String) -> ModelError {
        ModelError::Auth {
            provider: self.provider.to_owned(),
            status: status.as_u16(),
            message,
        }
    }

    fn refused(&self, status: StatusCode, message: String) -> ModelError {
        ModelError::Refused {
            provider: self.provider.to_owned(),
            status: status.as_u16(),
            message,
        }
    }

    fn transport(&self, message: String) -> ModelError {
        ModelError::Transport {
            provider: self.provider.to_owned(),
            message: self.scrub(&message),
        }
    }

    fn gave_up(&self, failure: Retryable, attempts: u32) -> ModelError {
        let provider = self.provider.to_owned();
        match failure {
            Retryable::RateLimited { message } => ModelError::RateLimited {
                provider,
                attempts,
                message,
            },
            Retryable::Server { status, message } => ModelError::Server {
                provider,
                status: status.as_u16(),
                attempts,
                message,
            },
            Retryable::Transport { message } => {
                let plural = if attempts == 1 { "" } else { "s" };
                self.transport(format!(
                    "{message} (gave up after {attempts} attempt{plural})"
                ))
            }
        }
    }

    fn scrub(&self, text: &str) -> String {
        match &self.secret {
            Some(secret) if !secret.is_empty() => text.replace(secret.as_str(), "<redacted>"),
            _ => text.to_owned(),
        }
    }
}

/// `{base_url}/{path}`, whether or not the base URL ends with a slash.
pub(super) fn endpoint_url(
    provider: &'static str,
    base_url: &str,
    path: &str,
) -> Result<Url, ModelConfigError> {
    let joined = format!("{}/{path}", base_url.trim_end_matches('/'));
    let url = Url::parse(&joined).map_err(|error| ModelConfigError::BaseUrl {
        provider,
        url: base_url.to_owned(),
        reason: error.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ModelConfigError::BaseUrl {
            provider,
            url: base_url.to_owned(),
            reason: "must be an http:// or https:// URL".to_owned(),
        });
    }
    Ok(url)
}

/// `provider:model`, and `@base_url` (without credentials) when it is not the provider's own.
pub(super) fn model_label(provider: &str, model: &str, base_url: &str, default: &str) -> String {
    let base_url = base_url.trim_end_matches('/');
    if base_url == default {
        return format!("{provider}:{model}");
    }
    let shown = Url::parse(base_url).map_or_else(|_| base_url.to_owned(), |url| shown_url(&url));
    format!("{provider}:{model}@{}", shown.trim_end_matches('/'))
}

fn bytes_of(body: &serde_json::Value) -> Vec<u8> {
    // Serializing a `Value` cannot fail: its map keys are strings.
    serde_json::to_vec(body).unwrap_or_default()
}

/// `Retry-After` in seconds; the HTTP-date form is rare from these APIs and falls back to
/// the policy's own backoff.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// `{"error": {"type", "message"}}` (OpenAI, Anthropic), `{"error": "..."}` (Ollama,
/// llama.cpp), `{"detail": "..."}` (FastAPI servers such as vLLM), or else the text itself.
pub(super) fn server_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return excerpt(&text);
    };
    let error = &json["error"];
    let message = error["message"]
        .as_str()
        .or_else(|| error.as_str())
        .or_else(|| json["message"].as_str())
        .or_else(|| json["detail"].as_str());
    match (message, error["type"].as_str()) {
        (Some(message), Some(kind)) => excerpt(&format!("{kind}: {message}")),
        (Some(message), None) => excerpt(message),
        (None, _) => excerpt(&text),
    }
}

/// At most [`MAX_MESSAGE_CHARS`] characters of `text`, trimmed, on one line.
pub(super) fn excerpt(text: &str) -> String {
    let text = text.trim();
    let mut shown: String = text
        .chars()
        .take(MAX_MESSAGE_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(MAX_MESSAGE_CHARS).is_some() {
        shown.push('…');
    }
    shown
}

/// What went wrong, without the URL reqwest puts in its own message (the caller names the
/// endpoint) and without the middle of its cause chain: the root cause is what helps
/// ("Connection refused", "invalid peer certificate").
fn describe_transport_error(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else if error.is_body() || error.is_decode() {
        "the body broke off"
    } else {
        "the request failed"
    };
    let mut root = None;
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        root = Some(cause);
        source = cause.source();
    }
    match root {
        Some(cause) => format!("{kind}: {cause}"),
        None => kind.to_owned(),
    }
}

fn shown_url(url: &Url) -> String {
    let mut url = url.clone();
    // Both setters fail only for URLs that cannot carry credentials in the first place.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_the_base_up_to_the_cap() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(3),
        };
        let delays: Vec<_> = (1..=5).map(|n| policy.delay_after(n, None)).collect();
        assert_eq!(
            delays,
            [500, 1000, 2000, 3000, 3000].map(Duration::from_millis)
        );
        assert_eq!(policy.delay_after(200, None), Duration::from_secs(3));
    }

    #[test]
    fn retry_after_wins_over_doubling_but_not_over_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay_after(1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            policy.delay_after(1, Some(Duration::from_secs(3600))),
            policy.max_delay
        );
        assert_eq!(policy.delay_after(3, Some(Duration::ZERO)), Duration::ZERO);
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_anything_else_is_ignored() {
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert_eq!(retry_after(&headers("2")), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(&headers(" 0.5 ")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(retry_after(&headers("-1")), None);
        assert_eq!(retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn server_messages_are_found_in_every_common_error_shape() {
        let openai = br#"{"error":{"message":"Invalid key","type":"invalid_request_error"}}"#;
        assert_eq!(server_message(openai), "invalid_request_error: Invalid key");
        assert_eq!(
            server_message(br#"{"error":"model 'x' not found"}"#),
            "model 'x' not found"
        );
        assert_eq!(server_message(br#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(server_message(b"  upstream\nbroke  "), "upstream broke");
        assert_eq!(server_message(b""), "");
        let long = "x".repeat(5000);
        let shown = server_message(long.as_bytes());
        assert_eq!(shown.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn urls_are_shown_without_credentials() {
        let url = Url::parse("https://user:pw@example.test/v1/chat").unwrap();
        assert_eq!(shown_url(&url), "https://example.test/v1/chat");
        let label = model_label("openai", "m", "https://user:pw@example.test/v1/", "x");
        assert_eq!(label, "openai:m@https://example.test/v1");
        let own = model_label(
            "openai",
            "m",
            "https://api.openai.com/v1/",
            "https://api.openai.com/v1",
        );
        assert_eq!(own, "openai:m");
    }
}
