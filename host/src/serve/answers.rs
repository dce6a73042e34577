//! The routes by which a human (or a client) answers a waiting job — a question, a login, an
//! approval or denial, a piece chosen, an intake, a review — or cancels it.
//!
//! Invariant: every answer goes through the store's `answer`, which checks it against the job's
//! wait and its session and records it once, so two clients answering one wait get one success
//! and one `409`; a verdict names the wait it settles. A job made runnable wakes one runner.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use serde::Deserialize;

use super::api::{ApiError, ApiResult, AppState, Body, Shared, raw_body};
use super::live::Notice;
use crate::engine::{Answer, EngineAnswer, HumanVerdict, JobStatus};
use crate::plugin::Resume;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerBody {
    text: String,
    wait: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoginBody {
    session: String,
    wait: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApproveBody {
    /// An approval names the wait it approves, so it can never approve a later call.
    wait: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DenyBody {
    reason: String,
    wait: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct CancelBody {
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChooseBody {
    piece: String,
    wait: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IntakeBody {
    /// Values by field; missing fields keep what they hold, and none confirms the intake.
    #[serde(default)]
    slots: std::collections::BTreeMap<String, String>,
    wait: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AcceptBody {
    /// A verdict names the wait it settles, so it can never settle a later one.
    wait: u32,
    artifact: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RejectBody {
    wait: u32,
    reason: String,
    artifact: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReviseBody {
    wait: u32,
    instruction: Option<String>,
    artifact: Option<String>,
}

pub(super) async fn answer(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<AnswerBody>,
) -> ApiResult {
    state
        .resume(&id, Resume::Answered(body.text).into(), body.wait)
        .await
}

pub(super) async fn choose(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<ChooseBody>,
) -> ApiResult {
    let choice = EngineAnswer::Choose { piece: body.piece };
    state.resume(&id, choice.into(), body.wait).await
}

pub(super) async fn intake(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<IntakeBody>,
) -> ApiResult {
    let intake = EngineAnswer::Intake { slots: body.slots };
    state.resume(&id, intake.into(), body.wait).await
}

pub(super) async fn accept(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<AcceptBody>,
) -> ApiResult {
    state
        .review(&id, body.artifact, HumanVerdict::Accept, body.wait)
        .await
}

pub(super) async fn reject(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<RejectBody>,
) -> ApiResult {
    if body.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "reason: a rejection needs a reason (the agent reads it)",
        ));
    }
    let verdict = HumanVerdict::Reject {
        reason: body.reason,
    };
    state.review(&id, body.artifact, verdict, body.wait).await
}

pub(super) async fn revise(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<ReviseBody>,
) -> ApiResult {
    let instruction = body.instruction.filter(|text| !text.trim().is_empty());
    let verdict = HumanVerdict::Revise { instruction };
    state.review(&id, body.artifact, verdict, body.wait).await
}

pub(super) async fn login(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<LoginBody>,
) -> ApiResult {
    if body.session.trim().is_empty() {
        return Err(ApiError::bad_request("session: must not be empty"));
    }
    state
        .resume(&id, Resume::LoggedIn(body.session).into(), body.wait)
        .await
}

pub(super) async fn approve(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<ApproveBody>,
) -> ApiResult {
    state
        .resume(&id, Resume::Approved.into(), Some(body.wait))
        .await
}

pub(super) async fn deny(
    State(state): Shared,
    Path(id): Path<String>,
    Body(body): Body<DenyBody>,
) -> ApiResult {
    if body.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "reason: a denial needs a reason (the model reads it)",
        ));
    }
    state
        .resume(&id, Resume::Denied(body.reason).into(), body.wait)
        .await
}

pub(super) async fn cancel(
    State(state): Shared,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body: CancelBody = optional_body(&raw_body(body)?)?;
    let reason = body
        .reason
        .unwrap_or_else(|| "cancelled through the API".to_owned());
    state.store.cancel_async(&id, &reason).await?;
    let view = state.view(&id).await?;
    state.publish_change(&id, view.state.status);
    Ok(axum::Json(view.summary))
}

/// An empty body, or a JSON object.
fn optional_body<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|error| ApiError::bad_request(format!("body: {error}")))
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
        if status == JobStatus::Pending {
            // One job became runnable: one runner is enough.
            self.wake.notify_one();
        }
        self.hub.publish(Notice::Saved {
            job: job.to_owned(),
            status,
        });
    }
}
