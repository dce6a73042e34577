//! The routes by which a human (or a client) answers a waiting job — a question, a login, an
//! approval or denial, a piece chosen, an intake, a review — or cancels it; and the login an MCP
//! tool call waits for (`/v1/logins/{id}`).
//!
//! Invariant: every answer to a job goes through the store's `answer`, which checks it against
//! the job's wait and its session and records it once, so two clients answering one wait get
//! one success and one `409`; a verdict names the wait it settles. A job made runnable wakes one
//! runner. An MCP call's login (held by `mcp::Logins`, not the store) takes its session once,
//! only while its call waits, and answers `404` after.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;

use super::api::{ApiError, ApiResult, AppState, Body, Shared};
use super::bodies::{
    AcceptBody, AnswerBody, ApproveBody, CancelBody, ChooseBody, DenyBody, IntakeBody, LoginBody,
    RejectBody, ReviseBody, SessionBody,
};
use tokio::sync::Notify;

use super::live::{Hub, Notice};
use crate::engine::{Answer, EngineAnswer, HumanVerdict, JobStatus};
use crate::mcp::LoginRefusal;
use crate::plugin::Resume;

pub(super) async fn answer(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<AnswerBody>,
) -> ApiResult {
    state
        .resume(
            &id,
            Resume::Answered(body.text).into(),
            body.wait.map(|park| park.0),
        )
        .await
}

pub(super) async fn choose(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<ChooseBody>,
) -> ApiResult {
    let choice = EngineAnswer::Choose { piece: body.piece };
    state
        .resume(&id, choice.into(), body.wait.map(|park| park.0))
        .await
}

pub(super) async fn intake(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<IntakeBody>,
) -> ApiResult {
    let intake = EngineAnswer::Intake { slots: body.slots };
    state
        .resume(&id, intake.into(), body.wait.map(|park| park.0))
        .await
}

pub(super) async fn accept(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<AcceptBody>,
) -> ApiResult {
    state
        .review(&id, body.artifact, HumanVerdict::Accept, body.wait.0)
        .await
}

pub(super) async fn reject(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<RejectBody>,
) -> ApiResult {
    let verdict = HumanVerdict::Reject {
        reason: body.reason,
    };
    state.review(&id, body.artifact, verdict, body.wait.0).await
}

pub(super) async fn revise(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<ReviseBody>,
) -> ApiResult {
    let instruction = body.instruction.filter(|text| !text.trim().is_empty());
    let verdict = HumanVerdict::Revise { instruction };
    state.review(&id, body.artifact, verdict, body.wait.0).await
}

pub(super) async fn login(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<LoginBody>,
) -> ApiResult {
    state
        .resume(
            &id,
            Resume::LoggedIn(body.session).into(),
            body.wait.map(|park| park.0),
        )
        .await
}

/// What the page of an MCP call's login shows: the site's login link, why, and the tool.
pub(super) async fn call_login(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    let view = state.logins.view(&id).map_err(login_refused)?;
    Ok(axum::Json(json!(view)))
}

/// Gives an MCP call's login its session: the call goes on with it.
pub(super) async fn give_call_login(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<SessionBody>,
) -> ApiResult {
    state
        .logins
        .give(&id, &body.session)
        .map_err(login_refused)?;
    Ok(axum::Json(json!({ "taken": true })))
}

fn login_refused(refusal: LoginRefusal) -> ApiError {
    match refusal {
        LoginRefusal::Unknown => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", refusal.to_string())
        }
        LoginRefusal::Blank => ApiError::bad_request(format!("session: {refusal}")),
    }
}

pub(super) async fn approve(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<ApproveBody>,
) -> ApiResult {
    state
        .resume(&id, Resume::Approved.into(), Some(body.wait.0))
        .await
}

pub(super) async fn deny(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<DenyBody>,
) -> ApiResult {
    state
        .resume(
            &id,
            Resume::Denied(body.reason).into(),
            body.wait.map(|park| park.0),
        )
        .await
}

pub(super) async fn cancel(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<CancelBody>,
) -> ApiResult {
    let reason = body
        .reason
        .unwrap_or_else(|| "cancelled through the API".to_owned());
    state.store.cancel_async(&id, &reason).await?;
    let view = state.view(&id).await?;
    state.publish_change(&id, view.state.status);
    Ok(axum::Json(view.summary))
}

impl AppState {
    pub(super) async fn resume(&self, id: &str, answer: Answer, wait: Option<u32>) -> ApiResult {
        self.store.answer_async(id, &answer, wait).await?;
        self.publish_change(id, JobStatus::Pending);
        Ok(axum::Json(self.view(id).await?.summary))
    }

    async fn review(
        &self,
        id: &str,
        artifact: Option<String>,
        verdict: HumanVerdict,
        wait: u32,
    ) -> ApiResult {
        let review = EngineAnswer::Review { artifact, verdict };
        self.resume(id, review.into(), Some(wait)).await
    }

    pub(super) fn publish_change(&self, job: &str, status: JobStatus) {
        publish_change(&self.hub, &self.wake, job, status);
    }
}

/// Tells the runners (when `job` may run now) and the live feed that `job` changed.
pub(super) fn publish_change(hub: &Hub, wake: &Notify, job: &str, status: JobStatus) {
    if status == JobStatus::Pending {
        // One job became runnable: one runner is enough.
        wake.notify_one();
    }
    hub.publish(Notice::Saved {
        job: job.to_owned(),
        status,
    });
}
