//! The web pages: the inbox (`/`), a job's page (`/jobs/{id}`) and the page where the login an
//! MCP tool call waits for is done (`/logins/{id}`). Each is one HTML file with
//! one inline style and one inline script, into which the pages' shared stylesheet and script
//! (`common.css`, `common.js`) and the form that asks for the API token (`token-form.html`) are
//! put when the server starts.
//!
//! Invariant: a page may run only its own script and style (allowed by their hashes, computed
//! from the very text served), talk only to this server and never be framed. A page holds no
//! data: it reads everything from the API with the token the user gave, so it shows exactly
//! what the API would show that token, and serving it needs no token.

use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use super::api::AppState;

const COMMON_CSS: &str = include_str!("common.css");
const COMMON_JS: &str = include_str!("common.js");
const TOKEN_FORM: &str = include_str!("token-form.html");

static INBOX: LazyLock<Page> = LazyLock::new(|| Page::assemble(include_str!("inbox.html")));
static JOB: LazyLock<Page> = LazyLock::new(|| Page::assemble(include_str!("job.html")));
static LOGIN: LazyLock<Page> = LazyLock::new(|| Page::assemble(include_str!("login.html")));

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(|| async { INBOX.response() }))
        // The page reads the job's id from its own address.
        .route("/jobs/{id}", get(|| async { JOB.response() }))
        .route("/logins/{id}", get(|| async { LOGIN.response() }))
}

/// A page as served, and the policy that lets it run.
struct Page {
    html: String,
    policy: String,
}

impl Page {
    /// `template` with the shared stylesheet, script and token form in place of their markers.
    fn assemble(template: &str) -> Self {
        let html = template
            .replacen("/*@common.css*/", COMMON_CSS, 1)
            .replacen("/*@common.js*/", COMMON_JS, 1)
            .replacen("<!--@token-form.html-->", TOKEN_FORM, 1);
        let policy = format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
             img-src 'self' data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
            hash_of(&html, "<script>", "</script>"),
            hash_of(&html, "<style>", "</style>"),
        );
        Self { html, policy }
    }

    fn response(&self) -> Response {
        (
            [
                (header::CONTENT_SECURITY_POLICY, self.policy.as_str()),
                (header::X_FRAME_OPTIONS, "DENY"),
                (header::REFERRER_POLICY, "no-referrer"),
            ],
            Html(self.html.clone()),
        )
            .into_response()
    }
}

/// The CSP source for the text of the page's one element that opens with `open`.
fn hash_of(html: &str, open: &str, close: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let start = html.find(open).expect("the page has the element") + open.len();
    let end = start + html[start..].find(close).expect("the element ends");
    let digest = sha2::Sha256::digest(&html.as_bytes()[start..end]);
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_gets_the_shared_parts_and_keeps_one_script_and_one_style() {
        for page in [&*INBOX, &*JOB, &*LOGIN] {
            assert!(
                !page.html.contains("/*@") && !page.html.contains("<!--@"),
                "a marker is left"
            );
            assert_eq!(page.html.matches(r#"<form id="token-form""#).count(), 1);
            assert!(page.html.contains("function follow("));
            assert!(page.html.contains("--accent"));
            assert_eq!(page.html.matches("<script").count(), 1);
            assert_eq!(page.html.matches("<style").count(), 1);
        }
    }
}
