//! The tasks of the MCP tasks extension, which are jobs: a task's id names its job and the
//! caller it was given to, and its state is read from the job as the store keeps it.
//!
//! Invariant: a task has no state of its own. `tasks/get` reads the job, so a task survives a
//! restart of the server, is answered on any node of the store, and an answer given in the
//! inbox or with `maestro jobs` moves it as one given with `tasks/update` does. A task id opens
//! only for the caller it was given to (an HMAC under a key of the store over the job and the
//! caller's digest), and reads the same to every other caller as a task that does not exist.

use std::time::{Duration, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, ElicitRequest, InputRequest, Task, TaskPayload,
    TaskStatus,
};
use serde_json::Value;
use sha2::Sha256;

use super::rounds::Caller;
use super::waits::{JobPages, JobQuestion, Shown, shown};
use crate::engine::{JobState, JobStatus};

/// The name of the key of task ids among the store's secrets.
pub const KEY_NAME: &str = "mcp.task-id";

/// How often a client is asked to poll a task.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// Bytes of the HMAC a task id carries: 128 bits.
const TAG_BYTES: usize = 16;

/// Makes and opens the task ids of one install.
pub struct TaskIds {
    key: Vec<u8>,
}

impl TaskIds {
    pub fn new(key: Vec<u8>) -> Self {
        Self { key }
    }

    /// The id of the task of `job`, for `caller`.
    pub fn id(&self, job: &str, caller: &Caller) -> String {
        use base64::Engine as _;
        let tag = self.mac(job, caller).finalize().into_bytes();
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&tag[..TAG_BYTES]);
        format!("{job}.{tag}")
    }

    /// The job of task `task_id`, if the id was given to `caller` by this install.
    pub fn open(&self, task_id: &str, caller: &Caller) -> Option<String> {
        use base64::Engine as _;
        let (job, tag) = task_id.rsplit_once('.')?;
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(tag)
            .ok()?;
        if tag.len() != TAG_BYTES {
            return None;
        }
        self.mac(job, caller)
            .verify_truncated_left(&tag)
            .ok()
            .map(|()| job.to_owned())
    }

    fn mac(&self, job: &str, caller: &Caller) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(b"maestro task\0");
        mac.update(caller.digest());
        mac.update(job.as_bytes());
        mac
    }
}

/// The input request key of the form that answers wait `wait`.
pub fn input_key(wait: u32) -> String {
    format!("wait-{wait}")
}

/// The wait an input response key answers.
pub fn wait_of_key(key: &str) -> Option<u32> {
    key.strip_prefix("wait-")?.parse().ok()
}

/// The task `task_id` as its job stands: `status`, the job, when it was created and last
/// saved (Unix ms); `pages` are where a person settles what the client cannot;
/// `login_opened` says the client already opened the link of the login the job waits for.
pub fn task_of(
    task_id: &str,
    job: &JobState,
    status: JobStatus,
    (created_ms, updated_ms): (i64, i64),
    pages: &JobPages,
    login_opened: bool,
) -> DetailedTask {
    let task = Task::new(
        task_id,
        TaskStatus::Working,
        iso(created_ms),
        iso(updated_ms),
    )
    .with_poll_interval_ms(POLL_EVERY.as_millis() as u64);
    let result = |result: CallToolResult| {
        let Ok(Value::Object(result)) = serde_json::to_value(result) else {
            unreachable!("a tool result is an object")
        };
        TaskPayload::Completed { result }
    };
    let outcome = || job.result.clone().unwrap_or_default();
    let (message, payload) = match status {
        JobStatus::Pending | JobStatus::Running => (
            Some(format!(
                "Job {} runs piece `{}`, movement `{}`.",
                job.id, job.piece, job.movement
            )),
            TaskPayload::Working,
        ),
        JobStatus::WaitingHuman | JobStatus::WaitingSubtasks => match shown(job, pages) {
            Some(Shown::Form(question)) => (
                Some(format!(
                    "Job {} waits for an answer: {}",
                    job.id, question.message
                )),
                TaskPayload::InputRequired {
                    input_requests: [(input_key(question.wait), ask(&question))].into(),
                },
            ),
            // Once its link is open, the login is done on the page, not at the client.
            Some(Shown::Login(login)) if login_opened => (
                Some(format!(
                    "Job {} waits for the login on its page ({}).",
                    job.id, login.url
                )),
                TaskPayload::Working,
            ),
            Some(Shown::Login(login)) => (
                Some(format!(
                    "Job {} waits for a login: {}",
                    job.id, login.message
                )),
                TaskPayload::InputRequired {
                    input_requests: [(
                        input_key(login.wait),
                        InputRequest::Elicitation(ElicitRequest::new(login.link())),
                    )]
                    .into(),
                },
            ),
            Some(Shown::Status(what)) => (Some(what), TaskPayload::Working),
            None => (None, TaskPayload::Working),
        },
        JobStatus::Completed => (
            None,
            result(CallToolResult::success(vec![ContentBlock::text(outcome())])),
        ),
        JobStatus::Aborted | JobStatus::Error => (
            Some(format!("Job {} ended without finishing.", job.id)),
            result(CallToolResult::error(vec![ContentBlock::text(format!(
                "The job ended without finishing ({}): {}",
                status.as_str(),
                outcome()
            ))])),
        ),
        JobStatus::Cancelled => (
            Some(format!("Job {} was cancelled: {}", job.id, outcome())),
            TaskPayload::Cancelled,
        ),
    };
    let task = match message {
        Some(message) => task.with_status_message(message),
        None => task,
    };
    DetailedTask::new(task, payload)
}

/// The elicitation that asks `question`.
pub fn ask(question: &JobQuestion) -> InputRequest {
    InputRequest::Elicitation(ElicitRequest::new(super::parks::form(
        &question.message,
        &question.schema,
    )))
}

/// `ms` (Unix) as ISO 8601.
fn iso(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use rmcp::model::InputRequest;

    use super::*;
    use crate::engine::{ResumePoint, Wait, WaitRequest};

    #[test]
    fn a_task_id_opens_only_for_its_caller_under_its_install_key() {
        let ids = TaskIds::new(b"install key".to_vec());
        let caller = Caller::with_token("token-a");
        let id = ids.id("job-1", &caller);
        assert!(id.starts_with("job-1."), "{id}");
        assert_eq!(ids.open(&id, &caller).as_deref(), Some("job-1"));
        assert_eq!(ids.open(&id, &Caller::with_token("token-b")), None);
        assert_eq!(ids.open(&id, &Caller::anonymous()), None);
        assert_eq!(TaskIds::new(b"another".to_vec()).open(&id, &caller), None);
        // Another job's id under this tag, a cut tag, no tag.
        let tag = id.rsplit_once('.').unwrap().1;
        assert_eq!(ids.open(&format!("job-2.{tag}"), &caller), None);
        assert_eq!(ids.open(&id[..id.len() - 2], &caller), None);
        assert_eq!(ids.open("job-1", &caller), None);
    }

    fn pages() -> JobPages {
        JobPages::new(Some("http://h".into()), "job-1")
    }

    fn task(job: &JobState, status: JobStatus) -> Value {
        let task = task_of("job-1.tag", job, status, (1_000, 2_000), &pages(), false);
        serde_json::to_value(task).unwrap()
    }

    #[test]
    fn a_task_is_its_job_as_it_stands() {
        let mut job = JobState::new("job-1".into(), "chat", "talk", "hello".into());
        let running = task(&job, JobStatus::Running);
        assert_eq!(running["status"], "working");
        assert_eq!(running["taskId"], "job-1.tag");
        assert_eq!(running["createdAt"], "1970-01-01T00:00:01.000Z");
        assert_eq!(running["lastUpdatedAt"], "1970-01-01T00:00:02.000Z");

        job.wait = Some(Wait {
            id: 4,
            reason: None,
            request: WaitRequest::Question {
                question: "Which city?".into(),
            },
            resume: ResumePoint::EnterMovement,
        });
        let asked = task_of("t", &job, JobStatus::WaitingHuman, (0, 0), &pages(), false);
        let TaskPayload::InputRequired { input_requests } = &asked.payload else {
            panic!("{asked:?}");
        };
        let Some(InputRequest::Elicitation(request)) = input_requests.get("wait-4") else {
            panic!("{input_requests:?}");
        };
        assert!(
            serde_json::to_string(request)
                .unwrap()
                .contains("Which city?")
        );
        assert_eq!(wait_of_key("wait-4"), Some(4));

        // A login asks the client to open the job's card in the inbox, once.
        job.wait.as_mut().unwrap().request = WaitRequest::BrowserLogin {
            url: "https://example.test/login".into(),
            reason: "the site needs a login".into(),
        };
        let login = task(&job, JobStatus::WaitingHuman);
        assert_eq!(login["status"], "input_required");
        let link = &login["inputRequests"]["wait-4"];
        assert_eq!(link["method"], "elicitation/create", "{link}");
        assert_eq!(link["params"]["mode"], "url", "{link}");
        assert_eq!(link["params"]["url"], "http://h/#job-job-1", "{link}");
        let opened = task_of("t", &job, JobStatus::WaitingHuman, (0, 0), &pages(), true);
        let opened = serde_json::to_value(opened).unwrap();
        assert_eq!(opened["status"], "working");
        assert!(
            opened["statusMessage"]
                .as_str()
                .unwrap()
                .contains("http://h/#job-job-1"),
            "{opened}"
        );

        job.wait.as_mut().unwrap().request = WaitRequest::Subtasks {
            job_ids: vec!["job-2".into()],
        };
        let children = task(&job, JobStatus::WaitingSubtasks);
        assert_eq!(children["status"], "working");
        assert!(
            children["statusMessage"]
                .as_str()
                .unwrap()
                .contains("job-2")
        );

        job.wait = None;
        job.result = Some("Lisbon it is.".into());
        let done = task(&job, JobStatus::Completed);
        assert_eq!(done["status"], "completed");
        assert_eq!(done["result"]["content"][0]["text"], "Lisbon it is.");
        assert_eq!(done["result"]["isError"], false);
        let failed = task(&job, JobStatus::Aborted);
        assert_eq!(failed["status"], "completed");
        assert_eq!(failed["result"]["isError"], true);
        assert_eq!(task(&job, JobStatus::Cancelled)["status"], "cancelled");
    }
}
