//! A web site on 127.0.0.1 for BrowseWeb and the HTTP sandbox tests: a
//! public page, a page behind a login wall (redirect to a login form), a
//! 401 API, a 403 page, a plain-text file and a failing page. It counts the
//! requests it receives, so a test can prove a denied request never left.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;

/// The session cookie the site accepts.
pub const GOOD_SESSION: &str = "sid=good-session";

pub struct Site {
    pub addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Site {
    /// Starts the site on an ephemeral loopback port, on the current tokio runtime.
    pub async fn start() -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let app = Router::new()
            .route("/public", get(public))
            .route("/private", get(private))
            .route("/login", get(login))
            .route("/api", get(api))
            .route(
                "/forbidden",
                get(|| async { (StatusCode::FORBIDDEN, Html("<h1>Forbidden</h1>")) }),
            )
            .route(
                "/plain",
                get(|| async {
                    (
                        [(header::CONTENT_TYPE, "text/plain")],
                        "just text\nline two",
                    )
                }),
            )
            .route(
                "/broken",
                get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
            )
            .route("/loop", get(|| async { Redirect::temporary("/loop") }))
            .layer(axum::middleware::from_fn(
                move |request, next: axum::middleware::Next| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        next.run(request).await
                    }
                },
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move {
            axum::serve(listener, app).await.expect("site serves");
        });
        Self { addr, hits }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `127.0.0.1:<port>`: the allowlist entry for this site.
    pub fn authority(&self) -> String {
        self.addr.to_string()
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn has_session(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .any(|cookie| cookie.trim() == GOOD_SESSION)
}

async fn public() -> Html<&'static str> {
    Html(
        "<!doctype html><html><head><title>Quarterly &amp; Annual Report</title>\
         <style>body { color: red }</style><script>var secret = 'do not show';</script></head>\
         <body><h1>Results</h1><p>Revenue grew <b>12%</b> this quarter.</p>\
         <ul><li>First item</li><li>Second item</li></ul></body></html>",
    )
}

async fn private(headers: HeaderMap) -> Response {
    if has_session(&headers) {
        Html("<html><head><title>Private Dashboard</title></head><body><p>Secret numbers: 42</p></body></html>")
            .into_response()
    } else {
        Redirect::to("/login?next=/private").into_response()
    }
}

async fn login() -> Html<&'static str> {
    Html(
        "<html><head><title>Sign in</title></head><body>\
         <form method=\"post\" action=\"/login\"><input name=\"user\">\
         <input type=\"password\" name=\"pass\"><button>Sign in</button></form></body></html>",
    )
}

async fn api(headers: HeaderMap) -> Response {
    if has_session(&headers) {
        ([(header::CONTENT_TYPE, "text/plain")], "api data: ok").into_response()
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "login required",
        )
            .into_response()
    }
}
