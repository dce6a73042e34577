//! `GET /metrics`: the process's metrics in Prometheus's text format, with the store's job
//! counts taken at each scrape; on `maestro serve`'s own address, or on a listener of its own
//! for `maestro work --metrics`.
//!
//! Invariant: a scrape needs a token with the `metrics` scope (or any wider one) wherever the
//! API needs tokens, and passes the same request guard as the API; a store that cannot count
//! its jobs still leaves every other metric served, and says so in the log.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::api::ApiError;
use super::auth::Auth;
use super::guard::Guard;
use crate::engine::JobStatus;
use crate::store::JobStore;
use crate::telemetry::{self, Exporter};

/// What a scrape reads.
#[derive(Clone)]
pub struct Scrape {
    pub store: Arc<dyn JobStore>,
    pub exporter: Exporter,
}

impl Scrape {
    /// The text of a scrape: the job counts read now, then every metric.
    pub async fn render(&self) -> Response {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.jobs_by_status()).await {
            Ok(Ok(counts)) => {
                for status in JobStatus::ALL {
                    let count = counts
                        .iter()
                        .find(|(counted, _)| *counted == status)
                        .map_or(0, |(_, count)| *count);
                    telemetry::jobs(status.as_str(), count);
                }
            }
            Ok(Err(error)) => tracing::warn!("the metrics' job counts are stale: {error}"),
            Err(error) => tracing::warn!("the metrics' job counts are stale: {error}"),
        }
        let exporter = self.exporter.clone();
        match tokio::task::spawn_blocking(move || exporter.render()).await {
            Ok(text) => (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                text,
            )
                .into_response(),
            Err(error) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "metrics_failed",
                format!("cannot render the metrics: {error}"),
            )
            .into_response(),
        }
    }
}

struct Listener {
    scrape: Scrape,
    auth: Auth,
    guard: Guard,
}

/// Serves `/metrics` alone on `addr` until the task is aborted; returns the address bound.
pub async fn serve_metrics(
    addr: SocketAddr,
    auth: Auth,
    scrape: Scrape,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| format!("cannot listen for metrics on {addr}: {error}"))?;
    let bound = listener
        .local_addr()
        .map_err(|error| format!("cannot read the metrics address: {error}"))?;
    let state = Arc::new(Listener {
        scrape,
        guard: Guard::new(bound, auth.is_open()),
        auth,
    });
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(state): State<Arc<Listener>>| async move { state.scrape.render().await }),
        )
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this address serves only GET /metrics",
            )
        })
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
        .with_state(state);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!("the metrics listener failed: {error}");
        }
    });
    Ok((bound, task))
}

async fn gate(State(state): State<Arc<Listener>>, request: Request, next: Next) -> Response {
    if let Err(refusal) = state.guard.check(request.headers()) {
        return refusal.into_response();
    }
    match state.auth.refusal(&request) {
        None => next.run(request).await,
        Some(refusal) => refusal,
    }
}
