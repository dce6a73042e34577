//! The routes by which a human (or a client) answers a waiting job — a question, a login, an
//! approval or denial, a piece chosen, an intake, a review — or cancels it.
//!
//! Invariant: every answer goes through the store's `answer`, which checks it against the job's
//! wait and its session and records it once, so two clients answering one wait get one success
//! and one `409`; a verdict names the wait it settles. A job made runnable wakes one runner.

use axum::extract::{Path, State};
use serde::Deserialize;

use super::api::{ApiError, ApiResult, AppState, Body, Shared};
use super::live::Notice;
use crate::engine::{Answer, EngineAnswer, HumanVerdict, JobStatus};
use crate::plugin::Resume;

/// The number of a park. JSON has one kind of number: `3.0` names park 3 as well as `3` does.
#[derive(Debug, Clone, Copy)]
pub(super) struct Park(u32);

impl<'de> Deserialize<'de> for Park {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let number = serde_json::Number::deserialize(deserializer)?;
        let park = match (number.as_u64(), number.as_f64()) {
            (Some(whole), _) => u32::try_from(whole).ok(),
            (None, Some(float))
                if float.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&float) =>
            {
                Some(float as u32)
            }
            _ => None,
        };
        park.map(Park).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{number} is not a park number (a whole number from 0 to {})",
                u32::MAX
            ))
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerBody {
    text: String,
    wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoginBody {
    session: String,
    wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApproveBody {
    /// An approval names the wait it approves, so it can never approve a later call.
    wait: Park,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DenyBody {
    reason: String,
    wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CancelBody {
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChooseBody {
    piece: String,
    wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IntakeBody {
    /// Values by field; missing fields keep what they hold, and none confirms the intake.
    #[serde(default)]
    slots: std::collections::BTreeMap<String, String>,
    wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AcceptBody {
    /// A verdict names the wait it settles, so it can never settle a later one.
    wait: Park,
    artifact: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RejectBody {
    wait: Park,
    reason: String,
    artifact: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReviseBody {
    wait: Park,
    instruction: Option<String>,
    artifact: Option<String>,
}

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
    if body.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "reason: a rejection needs a reason (the agent reads it)",
        ));
    }
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
    if body.session.trim().is_empty() {
        return Err(ApiError::bad_request("session: must not be empty"));
    }
    state
        .resume(
            &id,
            Resume::LoggedIn(body.session).into(),
            body.wait.map(|park| park.0),
        )
        .await
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
    if body.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "reason: a denial needs a reason (the model reads it)",
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_park_number_is_any_whole_json_number_that_fits() {
        let park = |text: &str| serde_json::from_str::<Park>(text).map(|park| park.0);
        assert_eq!(park("3").unwrap(), 3);
        assert_eq!(park("3.0").unwrap(), 3);
        assert_eq!(park("4294967295").unwrap(), u32::MAX);
        for refused in ["3.5", "-1", "4294967296", "1e20", "\"3\""] {
            assert!(park(refused).is_err(), "{refused}");
        }
        let error = park("3.5").unwrap_err().to_string();
        assert!(error.contains("3.5 is not a park number"), "{error}");
    }
}
