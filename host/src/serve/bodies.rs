//! The JSON bodies of the `POST` routes, as the API description gives them.
//!
//! Invariant: a handler sees a body only once it has parsed (unknown fields refused) and passed
//! [`RequestBody::check`], so a blank reason or session never reaches the store.

use serde::Deserialize;

use super::api::ApiError;

/// A body a route takes: parsed with serde, then checked for what a type cannot say.
pub trait RequestBody: for<'de> Deserialize<'de> {
    fn check(&self) -> Result<(), ApiError> {
        Ok(())
    }
}

/// A text field that must hold more than white space.
fn not_blank(text: &str, message: &str) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(message));
    }
    Ok(())
}

/// The number of a park. JSON has one kind of number: `3.0` names park 3 as well as `3` does.
#[derive(Debug, Clone, Copy)]
pub struct Park(pub u32);

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
pub struct AnswerBody {
    pub text: String,
    pub wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    pub session: String,
    pub wait: Option<Park>,
}

/// The session of an MCP call's login (`POST /v1/logins/{id}`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionBody {
    pub session: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// An approval names the wait it approves, so it can never approve a later call.
    pub wait: Park,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyBody {
    pub reason: String,
    pub wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    pub reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChooseBody {
    pub piece: String,
    pub wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntakeBody {
    /// Values by field; missing fields keep what they hold, and none confirms the intake.
    #[serde(default)]
    pub slots: std::collections::BTreeMap<String, String>,
    pub wait: Option<Park>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptBody {
    /// A verdict names the wait it settles, so it can never settle a later one.
    pub wait: Park,
    pub artifact: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    pub wait: Park,
    pub reason: String,
    pub artifact: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviseBody {
    pub wait: Park,
    pub instruction: Option<String>,
    pub artifact: Option<String>,
}

impl RequestBody for AnswerBody {}
impl RequestBody for ApproveBody {}
impl RequestBody for CancelBody {}
impl RequestBody for ChooseBody {}
impl RequestBody for IntakeBody {}
impl RequestBody for AcceptBody {}
impl RequestBody for ReviseBody {}

impl RequestBody for LoginBody {
    fn check(&self) -> Result<(), ApiError> {
        not_blank(&self.session, "session: must not be empty")
    }
}

impl RequestBody for SessionBody {
    fn check(&self) -> Result<(), ApiError> {
        not_blank(&self.session, "session: must not be empty")
    }
}

impl RequestBody for DenyBody {
    fn check(&self) -> Result<(), ApiError> {
        not_blank(
            &self.reason,
            "reason: a denial needs a reason (the model reads it)",
        )
    }
}

impl RequestBody for RejectBody {
    fn check(&self) -> Result<(), ApiError> {
        not_blank(
            &self.reason,
            "reason: a rejection needs a reason (the agent reads it)",
        )
    }
}

/// `POST /v1/jobs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartJob {
    /// Without a piece, the job waits for a human to choose one.
    #[serde(default)]
    pub piece: Option<String>,
    #[serde(default)]
    pub input: String,
    /// Intake values, shown filled in for a human to confirm.
    #[serde(default)]
    pub slots: std::collections::BTreeMap<String, String>,
}

impl RequestBody for StartJob {}

/// The `POST` routes [`check_request_body`] knows, by the names it takes.
pub const ROUTES_WITH_BODIES: [&str; 12] = [
    "jobs", "answer", "login", "approve", "deny", "cancel", "choose", "intake", "accept", "reject",
    "revise", "logins",
];

/// Parses and checks `bytes` as the body of the `POST` route named `route` (`jobs` for
/// `/v1/jobs`, `logins` for `/v1/logins/{id}`, else the last segment of `/v1/jobs/{id}/…`), as
/// the route does; `None` for a route that takes no body. For the fuzz targets.
pub fn check_request_body(route: &str, bytes: &[u8]) -> Option<Result<(), String>> {
    fn parse<T: RequestBody>(bytes: &[u8]) -> Result<(), String> {
        let body: T = serde_json::from_slice(bytes).map_err(|error| error.to_string())?;
        body.check()
            .map_err(|error| format!("{}: {}", error.code(), error.message()))
    }
    Some(match route {
        "jobs" => parse::<StartJob>(bytes),
        "answer" => parse::<AnswerBody>(bytes),
        "login" => parse::<LoginBody>(bytes),
        "approve" => parse::<ApproveBody>(bytes),
        "deny" => parse::<DenyBody>(bytes),
        "cancel" => parse::<CancelBody>(bytes),
        "choose" => parse::<ChooseBody>(bytes),
        "intake" => parse::<IntakeBody>(bytes),
        "accept" => parse::<AcceptBody>(bytes),
        "reject" => parse::<RejectBody>(bytes),
        "revise" => parse::<ReviseBody>(bytes),
        "logins" => parse::<SessionBody>(bytes),
        _ => return None,
    })
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

    #[test]
    fn a_body_is_checked_as_its_route_checks_it() {
        assert_eq!(
            check_request_body("deny", br#"{"reason":"no"}"#),
            Some(Ok(()))
        );
        let blank = check_request_body("deny", br#"{"reason":"  "}"#).unwrap();
        assert!(blank.unwrap_err().starts_with("bad_request: reason:"));
        let unknown = check_request_body("approve", br#"{"wait":1,"extra":0}"#).unwrap();
        assert!(unknown.unwrap_err().contains("unknown field `extra`"));
        assert_eq!(check_request_body("artifacts", b"{}"), None);
        for route in ROUTES_WITH_BODIES {
            assert!(check_request_body(route, b"{}").is_some(), "{route}");
        }
    }
}
