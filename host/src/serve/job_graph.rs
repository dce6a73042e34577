//! `GET /v1/jobs/{id}/graph`: the piece of a job drawn as SVG, with the movement it stands in
//! (or ended in) marked.
//!
//! Invariant: the picture is made from the piece this server runs the job with, and is served
//! under a policy that lets it run nothing: its labels are escaped, and were a label to slip
//! through, no script or outside resource would load.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::api::{ApiError, Shared};
use crate::piece::PieceGraph;

pub(super) async fn job_graph(State(state): Shared, Path(id): Path<String>) -> Response {
    let job = id.clone();
    let (job, _) = match state.read(move |store| store.load(&job)).await {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
    let Some(piece) = state.engine.piece(&job.piece) else {
        let message = match job.piece.is_empty() {
            true => format!("job `{id}` has no piece yet: a human has not chosen one"),
            false => format!(
                "job `{id}` runs piece `{}`, which this server does not have",
                job.piece
            ),
        };
        return ApiError::new(StatusCode::CONFLICT, "conflict", message).into_response();
    };
    let svg = PieceGraph::of(piece).svg(Some(&job.movement));
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
        ],
        svg,
    )
        .into_response()
}
