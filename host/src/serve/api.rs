//! The HTTP API (`/v1`), the OpenAPI document (`/openapi.json`) and the metrics (`/metrics`).
//! A job's fields are gathered in `job_view` and its graph drawn in `job_graph`; the pages
//! (`/`, `/jobs/{id}`, `/logins/{id}`) are `ui`'s, MCP (`/mcp`) is `mcp`'s.
//!
//! Invariant: every answer to an API call is JSON, and every refusal is
//! `{"error": {"code", "message"}}` with a fitting status; a job is shown as `job_view`
//! gathers it. An answer to a job goes through the store's `answer`, so two clients answering
//! one wait get one success and one `409`; the login of an MCP call (no job, no store) takes
//! one session, and a second gets `404`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::answers;
use super::auth::{Auth, require_token};
use super::bodies::{RequestBody, StartJob};
use super::guard::{Guard, guard_requests, require_json};
use super::job_view::{JobView, job_view};
use super::live::{Hub, feed, job_stream};
use super::metrics::Scrape;
use super::plugins::{Change, PluginHost, PluginRequestError};
use crate::engine::{Engine, JobStatus, artifact_view};

use crate::store::{JobStore, StoreError, new_job_id};
use crate::telemetry::Exporter;

const OPENAPI: &str = include_str!("openapi.json");

/// What every handler reaches.
pub struct AppState {
    pub store: Arc<dyn JobStore>,
    pub engine: Arc<Engine>,
    pub plugins: Arc<PluginHost>,
    pub hub: Arc<Hub>,
    /// Wakes idle runners when a job becomes runnable here.
    pub wake: Arc<Notify>,
    pub auth: Auth,
    pub guard: Guard,
    pub max_upload_bytes: usize,
    /// One permit per open event stream (`/v1/events`, a job's events).
    pub streams: Arc<tokio::sync::Semaphore>,
    pub metrics: Exporter,
    /// The browser logins MCP tool calls wait for, done on `/logins/{id}`.
    pub logins: Arc<crate::mcp::Logins>,
    /// The tools over MCP (`/mcp`), and what ends its sessions.
    pub mcp: crate::mcp::ToolServer,
    pub mcp_stop: tokio_util::sync::CancellationToken,
}

pub(super) type Shared = State<Arc<AppState>>;

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/health", get(health))
        .route("/pieces", get(pieces))
        .route("/plugins", get(plugins))
        .route(
            "/plugins/{name}",
            put(upload_plugin)
                .delete(remove_plugin)
                .layer(DefaultBodyLimit::max(state.max_upload_bytes)),
        )
        .route("/jobs", get(list_jobs).merge(json_post(start_job)))
        .route("/jobs/{id}", get(show_job))
        .route("/jobs/{id}/events", get(job_events))
        .route("/jobs/{id}/answer", json_post(answers::answer))
        .route("/jobs/{id}/login", json_post(answers::login))
        .route("/jobs/{id}/approve", json_post(answers::approve))
        .route("/jobs/{id}/deny", json_post(answers::deny))
        .route("/jobs/{id}/cancel", json_post(answers::cancel))
        .route("/jobs/{id}/choose", json_post(answers::choose))
        .route("/jobs/{id}/intake", json_post(answers::intake))
        .route("/jobs/{id}/accept", json_post(answers::accept))
        .route("/jobs/{id}/reject", json_post(answers::reject))
        .route("/jobs/{id}/revise", json_post(answers::revise))
        .route("/jobs/{id}/artifacts", get(artifacts))
        .route("/jobs/{id}/graph", get(super::job_graph::job_graph))
        .route(
            "/logins/{id}",
            get(answers::call_login).merge(json_post(answers::give_call_login)),
        )
        .route("/inbox", get(inbox))
        .route("/events", get(events))
        .fallback(no_such_endpoint)
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method (see /openapi.json)",
            )
        })
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ));
    Router::new()
        .merge(super::ui::routes())
        .merge(super::mcp::routes(&state))
        .route(
            "/metrics",
            get(metrics).route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                require_token,
            )),
        )
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .nest("/v1", api)
        .fallback(no_such_endpoint)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard_requests,
        ))
        .with_state(state)
}

async fn metrics(State(state): Shared) -> Response {
    let scrape = Scrape {
        store: state.store.clone(),
        exporter: state.metrics.clone(),
    };
    scrape.render().await
}

/// A `POST` route that takes only JSON (see [`require_json`]).
fn json_post<H, T>(handler: H) -> axum::routing::MethodRouter<Arc<AppState>>
where
    H: axum::handler::Handler<T, Arc<AppState>>,
    T: 'static,
{
    post(handler).route_layer(axum::middleware::from_fn(require_json))
}

async fn no_such_endpoint() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint (see /openapi.json)",
    )
}

/// A raw body, with its rejection (too large, cut off) as an [`ApiError`].
pub(super) fn raw_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            rejection.body_text(),
        ),
        _ => ApiError::bad_request(rejection.body_text()),
    })
}

/// A refusal: its status, a stable snake_case code and a message for humans.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let (status, code) = match &error {
            StoreError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            StoreError::NotWaiting { .. } => (StatusCode::CONFLICT, "not_waiting"),
            StoreError::StaleAnswer { .. } => (StatusCode::CONFLICT, "stale_answer"),
            StoreError::WrongAnswer { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "wrong_answer"),
            StoreError::Conflict { .. } | StoreError::LeaseLost { .. } => {
                (StatusCode::CONFLICT, "conflict")
            }
            StoreError::Database { .. } | StoreError::Corrupt { .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "store_error")
            }
        };
        Self::new(status, code, error.to_string())
    }
}

impl From<PluginRequestError> for ApiError {
    fn from(error: PluginRequestError) -> Self {
        let (status, code) = match &error {
            PluginRequestError::BadName(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            PluginRequestError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            PluginRequestError::Io(_) => (StatusCode::INTERNAL_SERVER_ERROR, "io_error"),
        };
        Self::new(status, code, error.to_string())
    }
}

/// A JSON body whose rejection is an [`ApiError`] naming what is wrong with it.
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    T: RequestBody,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => {
                value.check()?;
                Ok(Self(value))
            }
            // A body that parses but does not fit (a missing field, a wrong type) is as bad a
            // request as one that does not parse.
            Err(rejection) => Err(match rejection.status() {
                StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    rejection.body_text(),
                ),
                StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    rejection.body_text(),
                ),
                _ => ApiError::bad_request(rejection.body_text()),
            }),
        }
    }
}

pub(super) type ApiResult<T = axum::Json<Value>> = Result<T, ApiError>;

async fn health(State(state): Shared) -> ApiResult {
    let catalog = state.engine.catalog();
    Ok(axum::Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "plugins": catalog.plugins().len(),
        "pieces": state.engine.pieces().count(),
    })))
}

async fn pieces(State(state): Shared) -> ApiResult {
    let pieces: Vec<Value> = state
        .engine
        .pieces()
        .map(|piece| {
            json!({
                "name": piece.name.value,
                "description": piece.description,
                "initial_movement": piece.initial_movement.value,
                "movements": piece.movements.iter().map(|m| m.name.value.clone()).collect::<Vec<_>>(),
                "file": piece.origin.display().to_string(),
            })
        })
        .collect();
    Ok(axum::Json(json!({ "pieces": pieces })))
}

async fn plugins(State(state): Shared) -> ApiResult {
    Ok(axum::Json(json!({ "plugins": state.plugins.statuses() })))
}

async fn upload_plugin(
    State(state): Shared,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let bytes = raw_body(body)?;
    let (change, status) = state.plugins.upload(&name, bytes.to_vec()).await?;
    match change {
        Change::Failed(message) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "plugin_rejected",
            format!("{name}: {message}"),
        )),
        _ => Ok(axum::Json(status).into_response()),
    }
}

async fn remove_plugin(State(state): Shared, Path(name): Path<String>) -> ApiResult<Response> {
    let status = state.plugins.remove(&name).await?;
    Ok(axum::Json(status).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    limit: Option<usize>,
}

async fn list_jobs(
    State(state): Shared,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let Query(query) = query.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let status = match query.status.as_deref() {
        None => None,
        Some(text) => Some(JobStatus::parse(text).ok_or_else(|| {
            let known: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(format!(
                "status: unknown status `{text}`; one of: {}",
                known.join(", ")
            ))
        })?),
    };
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::bad_request("limit: must be between 1 and 500"));
    }
    let jobs = state
        .read(move |store| {
            let mut jobs = Vec::new();
            for summary in store.list(status, limit)? {
                match job_view(store, &summary.id) {
                    Ok(view) => jobs.push(view.summary),
                    // Pruned between the list and the read.
                    Err(StoreError::NotFound(_)) => {}
                    Err(error) => return Err(error),
                }
            }
            Ok(jobs)
        })
        .await?;
    Ok(axum::Json(json!({ "jobs": jobs })))
}

async fn start_job(
    State(state): Shared,
    Body(request): Body<StartJob>,
) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    let mut job = state
        .engine
        .new_job(new_job_id(), request.piece.as_deref(), request.input)
        .map_err(|error| {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_piece", error.to_string())
        })?;
    job.prefill = request.slots;
    state.store.create_async(&job).await?;
    state.publish_change(&job.id, JobStatus::Pending);
    Ok((
        StatusCode::CREATED,
        axum::Json(state.detail(&job.id).await?),
    ))
}

async fn show_job(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    Ok(axum::Json(state.detail(&id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<u64>,
}

async fn job_events(
    State(state): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Last-Event-ID: must be an event's sequence number")
                })?,
        ),
    };
    let job = id.clone();
    state.read(move |store| store.summary(&job)).await?;
    let permit = state.stream_permit()?;
    let after = last_event_id.or(query.after).unwrap_or(0);
    let stream = job_stream(state.store.clone(), &state.hub, id, after);
    Ok(sse(stream, permit))
}

async fn events(State(state): Shared) -> ApiResult<Response> {
    let permit = state.stream_permit()?;
    Ok(sse(feed(&state.hub), permit))
}

/// An event stream that holds `permit` until the client goes or the stream ends.
fn sse(
    stream: impl futures_util::Stream<
        Item = Result<axum::response::sse::Event, std::convert::Infallible>,
    > + Send
    + 'static,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Response {
    use futures_util::StreamExt as _;
    let held = stream.map(move |event| {
        let _held = &permit;
        event
    });
    Sse::new(held)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn inbox(State(state): Shared) -> ApiResult {
    // Whoever has waited longest first: a backlog beyond the page leaves out the newest.
    let jobs = state
        .read(|store| {
            let mut jobs = Vec::new();
            for summary in store.longest_waiting(INBOX_JOBS)? {
                match job_view(store, &summary.id) {
                    // A worker's questions and drafts are answered at its parent, which
                    // shows them.
                    Ok(view)
                        if view.state.reviewed_by_parent
                            && view
                                .state
                                .wait
                                .as_ref()
                                .is_some_and(|wait| wait.request.surfaces_at_parent()) => {}
                    Ok(view) if view.state.wait.is_some() => jobs.push(view.summary),
                    Ok(_) | Err(StoreError::NotFound(_)) => {}
                    Err(error) => return Err(error),
                }
            }
            Ok(jobs)
        })
        .await?;
    Ok(axum::Json(json!({ "jobs": jobs })))
}

async fn artifacts(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    let job = id.clone();
    let (job, _) = state.read(move |store| store.load(&job)).await?;
    let artifacts: Vec<Value> = job
        .phase_session()
        .map(|session| session.artifacts().iter().map(artifact_view).collect())
        .unwrap_or_default();
    Ok(axum::Json(json!({ "job": id, "artifacts": artifacts })))
}

/// Waiting jobs the inbox shows at most.
const INBOX_JOBS: usize = 500;

impl AppState {
    /// Runs store reads off the async threads: a job's state is parsed whole, and a list reads
    /// many jobs.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
    ) -> ApiResult<T> {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || read(store.as_ref())).await {
            Ok(result) => Ok(result?),
            Err(error) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_error",
                format!("a store read failed: {error}"),
            )),
        }
    }

    /// A place for one more event stream, or `503 too_many_streams`.
    fn stream_permit(&self) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
        self.streams.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams",
                "every event stream this server allows is open (server.max_event_streams); \
                 close one or try again later",
            )
        })
    }

    /// [`job_view`] off the async threads.
    pub(super) async fn view(&self, id: &str) -> ApiResult<JobView> {
        let id = id.to_owned();
        self.read(move |store| job_view(store, &id)).await
    }

    /// A job with everything `GET /v1/jobs/{id}` shows of it.
    async fn detail(&self, id: &str) -> ApiResult<Value> {
        let id = id.to_owned();
        let (view, children) = self
            .read(move |store| Ok((job_view(store, &id)?, store.children(&id)?)))
            .await?;
        Ok(view.detail(children))
    }
}
