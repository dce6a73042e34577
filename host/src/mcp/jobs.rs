//! The pieces offered as tools. A call starts a job of the piece (the call's `input` and intake
//! values become the job's, the job's result the call's): a client of the tasks extension gets
//! the job as a task at once; another client's call follows the job to its end, asking its
//! questions in the middle of the call where the client's revision allows it (a login as a link
//! to the job's card in the inbox, and `notifications/elicitation/complete` once the job has
//! its session), and otherwise ends saying what the job waits for and where to answer it.
//!
//! Invariant: a job is created in the store before the client hears of it, so a task the client
//! holds always has its job. This layer never runs a job (the process's runners do, woken by
//! `changed`) and answers one only through the store's `answer`, as the inbox does. A call
//! that follows a job never waits longer than [`FOLLOW_FOR`].

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CancelTaskParams, ContentBlock, CreateTaskResult, DetailedTask, ElicitResult,
    ElicitationAction, GetTaskParams, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::calls::failed;
use super::rounds::Caller;
use super::tasks::{TaskIds, task_of, wait_of_key};
use super::waits::{JobLogin, JobPages, JobReply, Shown, shown};
use crate::engine::{Engine, JobState, JobStatus};
use crate::piece::Piece;
use crate::store::{JobStore, StoreError, new_job_id};

/// How long a call without a task follows its job before it returns, saying where the job is.
pub const FOLLOW_FOR: Duration = Duration::from_secs(60);

/// How often a followed job is read again when no save of it was heard.
const REREAD_EVERY: Duration = Duration::from_secs(1);

/// How many opened logins a process remembers (see [`Jobs::logins_opened`]).
const MAX_LOGINS_REMEMBERED: usize = 4096;

/// The argument that carries a job's input.
const INPUT: &str = "input";

/// Tells the process that a job changed (`Pending`: it may run now).
pub type Changed = Arc<dyn Fn(&str, JobStatus) + Send + Sync>;

/// The jobs of a process that runs them (`maestro serve`, `maestro mcp --jobs`), as the MCP
/// server reaches them.
pub struct Jobs {
    engine: Arc<Engine>,
    store: Arc<dyn JobStore>,
    changed: Changed,
    /// The ids of the jobs saved, as the process hears of them.
    saves: broadcast::Sender<String>,
    ids: TaskIds,
    /// The logins (job, wait) whose page a client opened, so it is not sent there again: a
    /// client that opened it waits for the login to be done there. Kept by this process only:
    /// after a restart, or on another node, a client is sent to the page once more.
    logins_opened: Mutex<HashSet<(String, u32)>>,
}

impl Jobs {
    /// The jobs of `store`, started from `engine`'s pieces. The key of task ids is the store's,
    /// made once, so every node gives and opens the same ids.
    pub fn new(
        engine: Arc<Engine>,
        store: Arc<dyn JobStore>,
        changed: Changed,
    ) -> Result<Self, String> {
        let key = store
            .secret(super::tasks::KEY_NAME)
            .map_err(|error| format!("cannot read the MCP task key from the store: {error}"))?;
        Ok(Self {
            engine,
            store,
            changed,
            saves: broadcast::channel(256).0,
            ids: TaskIds::new(key),
            logins_opened: Mutex::default(),
        })
    }

    /// The process saved `job` (or heard that another did).
    pub fn saved(&self, job: &str) {
        // No one following is no error.
        let _ = self.saves.send(job.to_owned());
    }

    /// The pieces as tools, except one whose name a plugin's tool has or that MCP does not
    /// allow as a tool name.
    pub fn tools(&self, taken: impl Fn(&str) -> bool) -> Vec<Tool> {
        self.engine
            .pieces()
            .filter(|piece| tool_name_fits(&piece.name.value) && !taken(&piece.name.value))
            .map(|piece| tool_of(piece))
            .collect()
    }

    pub fn piece(&self, name: &str) -> Option<Tool> {
        self.engine
            .piece(name)
            .filter(|piece| tool_name_fits(&piece.name.value))
            .map(|piece| tool_of(piece))
    }

    /// Starts a job of `piece` with the call's arguments; its id.
    pub async fn start(
        &self,
        piece: &str,
        arguments: Map<String, Value>,
    ) -> Result<String, ErrorData> {
        let mut input = None;
        let mut slots = BTreeMap::new();
        let known = self.engine.piece(piece).map(|piece| {
            piece
                .intake
                .iter()
                .flat_map(|intake| intake.slots.iter().map(|slot| slot.name.value.clone()))
                .collect::<Vec<_>>()
        });
        let known = known.unwrap_or_default();
        for (name, value) in arguments {
            let Value::String(text) = value else {
                return Err(ErrorData::invalid_params(
                    format!("argument `{name}` must be a string"),
                    None,
                ));
            };
            if name == INPUT {
                input = Some(text);
            } else if known.contains(&name) {
                slots.insert(name, text);
            } else {
                return Err(ErrorData::invalid_params(
                    format!(
                        "piece `{piece}` takes no argument `{name}`; it takes `{INPUT}`{}",
                        known
                            .iter()
                            .map(|slot| format!(", `{slot}`"))
                            .collect::<String>()
                    ),
                    None,
                ));
            }
        }
        let input = input.ok_or_else(|| {
            ErrorData::invalid_params(
                format!("argument `{INPUT}` is required: what the job is to do"),
                None,
            )
        })?;
        let mut job = self
            .engine
            .new_job(new_job_id(), Some(piece), input)
            .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
        job.prefill = slots;
        // The call's span (in the client's trace, when its `_meta` named one) leads to the job's
        // own trace, which outlives the call.
        job.trace = crate::telemetry::JobTrace::begin_from_current_span(super::rounds::now_ms());
        self.store.create_async(&job).await.map_err(|error| {
            ErrorData::internal_error(format!("the job was not created: {error}"), None)
        })?;
        (self.changed)(&job.id, JobStatus::Pending);
        Ok(job.id)
    }

    /// The task of a job just started, for `caller`.
    pub async fn task(
        &self,
        job: &str,
        caller: &Caller,
        pages: &JobPages,
    ) -> Result<CreateTaskResult, ErrorData> {
        let detailed = self.detailed(job, &self.ids.id(job, caller), pages).await?;
        Ok(CreateTaskResult::new(detailed.task))
    }

    pub async fn get(
        &self,
        params: GetTaskParams,
        caller: &Caller,
        pages: impl Fn(&str) -> JobPages,
    ) -> Result<DetailedTask, ErrorData> {
        let job = self.open(&params.task_id, caller)?;
        self.detailed(&job, &params.task_id, &pages(&job)).await
    }

    /// Answers the task's open wait with the client's responses.
    pub async fn update(
        &self,
        params: UpdateTaskParams,
        caller: &Caller,
        pages: impl Fn(&str) -> JobPages,
    ) -> Result<(), ErrorData> {
        let job = self.open(&params.task_id, caller)?;
        let pages = pages(&job);
        if params.input_responses.is_empty() {
            return Err(ErrorData::invalid_params(
                "inputResponses is empty: answer the task's inputRequests",
                None,
            ));
        }
        for (key, response) in params.input_responses {
            let wait = wait_of_key(&key).ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("inputResponses.{key}: the task asked no such thing"),
                    None,
                )
            })?;
            let response: ElicitResult = serde_json::from_value(response).map_err(|error| {
                ErrorData::invalid_params(
                    format!("inputResponses.{key} is not an elicitation result: {error}"),
                    None,
                )
            })?;
            let (state, _) = self.load(&job).await?;
            let reply = match state
                .wait
                .as_ref()
                .filter(|open| open.id == wait)
                .and_then(|_| shown(&state, &pages))
            {
                Some(Shown::Form(question)) => question
                    .reply(&response.action, response.content.as_ref())
                    .map_err(|why| {
                        ErrorData::invalid_params(format!("inputResponses.{key}: {why}"), None)
                    })?,
                Some(Shown::Login(login)) => self.opened(&job, &login, &response.action),
                _ => {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "inputResponses.{key}: that question of job {job} is no longer open (it was answered, or the job moved on); get the task again"
                        ),
                        None,
                    ));
                }
            };
            self.apply(&job, wait, reply).await.map_err(|why| {
                ErrorData::invalid_params(format!("inputResponses.{key}: {why}"), None)
            })?;
        }
        Ok(())
    }

    pub async fn cancel(&self, params: CancelTaskParams, caller: &Caller) -> Result<(), ErrorData> {
        let job = self.open(&params.task_id, caller)?;
        self.store
            .cancel_async(&job, "cancelled by the MCP client (tasks/cancel)")
            .await
            .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
        (self.changed)(&job, JobStatus::Cancelled);
        Ok(())
    }

    /// Follows `job` until it ends, waits for what the client cannot give, or [`FOLLOW_FOR`]
    /// passes; asks its questions in the middle of the call when `ask` can.
    pub async fn follow(
        &self,
        job: &str,
        page: &JobPages,
        cx: Option<&RequestContext<RoleServer>>,
    ) -> CallToolResult {
        let deadline = tokio::time::Instant::now() + FOLLOW_FOR;
        let mut saves = self.saves.subscribe();
        // The login whose link the person opened in this call, until the job is past it.
        let mut opened_here: Option<JobLogin> = None;
        loop {
            let (state, status) = match self.load(job).await {
                Ok(loaded) => loaded,
                Err(error) => {
                    return failed(format!("Job {job} could not be read: {}", error.message));
                }
            };
            let waits_for = state.wait.as_ref().map(|wait| wait.id);
            if let Some(done) = opened_here.take_if(|login| waits_for != Some(login.wait))
                && let Some(cx) = cx
            {
                super::login_links::elicitation_done(cx, &done.elicitation_id).await;
            }
            match status {
                JobStatus::Completed => {
                    return CallToolResult::success(vec![ContentBlock::text(
                        state.result.unwrap_or_default(),
                    )]);
                }
                JobStatus::Aborted | JobStatus::Error | JobStatus::Cancelled => {
                    return failed(format!(
                        "Job {job} ended without finishing ({}): {}",
                        status.as_str(),
                        state.result.unwrap_or_default()
                    ));
                }
                JobStatus::WaitingHuman | JobStatus::WaitingSubtasks => match shown(&state, page) {
                    Some(Shown::Form(question)) => {
                        let Some(cx) = cx.filter(|cx| super::calls::answers_forms(cx)) else {
                            return failed(format!(
                                "Job {job} waits for a person: {}\n\nThis MCP client cannot be asked \
                                 in the middle of a call, so the call ends here and the job waits: \
                                 answer it in the inbox of maestro serve ({page}), or with \
                                 `maestro jobs answer {job} …`.",
                                question.message
                            ));
                        };
                        let reply = match cx
                            .peer
                            .create_elicitation(super::parks::form(
                                &question.message,
                                &question.schema,
                            ))
                            .await
                        {
                            Ok(result) => question.reply(&result.action, result.content.as_ref()),
                            Err(error) => Err(format!("the client could not be asked: {error}")),
                        };
                        let applied = match reply {
                            Ok(JobReply::Dismissed) => Err("the question was dismissed".to_owned()),
                            Ok(reply) => self.apply(job, question.wait, reply).await,
                            Err(why) => Err(why),
                        };
                        if let Err(why) = applied {
                            return failed(format!(
                                "Job {job} waits for a person, and {why}: the call ends here and \
                                 the job waits; answer it in the inbox of maestro serve ({page})."
                            ));
                        }
                        continue;
                    }
                    Some(Shown::Login(login)) => match self.send_to_login(job, &login, cx).await {
                        Ok(true) => opened_here = Some(login),
                        Ok(false) => {}
                        Err(ended) => return ended,
                    },
                    Some(Shown::Status(what)) if is_login(&state) => {
                        return failed(format!("Job {job}: {what}"));
                    }
                    Some(Shown::Status(_)) | None => {}
                },
                JobStatus::Pending | JobStatus::Running => {}
            }
            let heard = async {
                loop {
                    match saves.recv().await {
                        Ok(saved) if saved == job => return,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => return,
                        Err(broadcast::error::RecvError::Closed) => {
                            std::future::pending::<()>().await
                        }
                    }
                }
            };
            tokio::select! {
                () = heard => {}
                () = tokio::time::sleep(REREAD_EVERY) => {}
                () = tokio::time::sleep_until(deadline) => {
                    return failed(format!(
                        "Job {job} still runs (piece `{}`, movement `{}`); the call stops following \
                         it here. Follow it on its page ({page}), or call from a client of the \
                         tasks extension to get it as a task.",
                        state.piece, state.movement
                    ));
                }
            }
        }
    }

    /// Sends the person at the client to the page of the login `login` of `job`, unless a
    /// client opened it already; `Ok(true)` when the person opened it now, `Err` the call's
    /// result when the call cannot go on.
    async fn send_to_login(
        &self,
        job: &str,
        login: &JobLogin,
        cx: Option<&RequestContext<RoleServer>>,
    ) -> Result<bool, CallToolResult> {
        if self.was_opened(job, login.wait) {
            return Ok(false);
        }
        let ends_here = |why: &str| {
            failed(format!(
                "Job {job} waits for a person to log in: {}\n\n{why}, so the call ends here and \
                 the job waits: log in on its page ({}).",
                login.message, login.url
            ))
        };
        let Some(cx) = cx.filter(|cx| super::calls::opens_links(cx)) else {
            return Err(ends_here(
                "This MCP client cannot be sent to a page in the middle of a call",
            ));
        };
        let action = match cx.peer.create_elicitation(login.link()).await {
            Ok(result) => result.action,
            Err(error) => {
                return Err(ends_here(&format!(
                    "The client could not be asked ({error})"
                )));
            }
        };
        match self.opened(job, login, &action) {
            JobReply::Dismissed if action == ElicitationAction::Accept => Ok(true),
            JobReply::Dismissed => Err(ends_here("The person dismissed the link")),
            reply => match self.apply(job, login.wait, reply).await {
                Ok(()) => Ok(false),
                Err(why) => Err(ends_here(&format!("The reply was not taken ({why})"))),
            },
        }
    }

    /// What the person's `action` on the link of `login` does, remembering a link they opened.
    fn opened(&self, job: &str, login: &JobLogin, action: &ElicitationAction) -> JobReply {
        if *action == ElicitationAction::Accept {
            let mut opened = self.logins_opened.lock().unwrap_or_else(|e| e.into_inner());
            // A bound on what a process remembers: forgetting only sends a client to a page
            // once more.
            if opened.len() >= MAX_LOGINS_REMEMBERED {
                opened.clear();
            }
            opened.insert((job.to_owned(), login.wait));
        }
        login.reply(action)
    }

    /// Forgets the opened logins of `job` that it no longer waits for.
    fn forget_passed_logins(&self, job: &str, state: &JobState) {
        let current = state.wait.as_ref().map(|wait| wait.id);
        self.logins_opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(opened, wait)| opened != job || Some(*wait) == current);
    }

    fn was_opened(&self, job: &str, wait: u32) -> bool {
        self.logins_opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(job.to_owned(), wait))
    }

    /// Applies a person's reply to wait `wait` of `job`.
    async fn apply(&self, job: &str, wait: u32, reply: JobReply) -> Result<(), String> {
        match reply {
            JobReply::Answer(answer) => {
                self.store
                    .answer_async(job, &answer, Some(wait))
                    .await
                    .map_err(|error| error.to_string())?;
                (self.changed)(job, JobStatus::Pending);
            }
            JobReply::GiveUp(reason) => {
                self.store
                    .cancel_async(job, &reason)
                    .await
                    .map_err(|error| error.to_string())?;
                (self.changed)(job, JobStatus::Cancelled);
            }
            JobReply::Dismissed => {}
        }
        Ok(())
    }

    fn open(&self, task_id: &str, caller: &Caller) -> Result<String, ErrorData> {
        self.ids.open(task_id, caller).ok_or_else(|| {
            ErrorData::invalid_params(format!("no task `{task_id}` (for this caller)"), None)
        })
    }

    async fn detailed(
        &self,
        job: &str,
        task_id: &str,
        pages: &JobPages,
    ) -> Result<DetailedTask, ErrorData> {
        let store = self.store.clone();
        let id = job.to_owned();
        let read = tokio::task::spawn_blocking(move || {
            Ok::<_, StoreError>((store.load(&id)?, store.summary(&id)?))
        })
        .await
        .map_err(|error| {
            ErrorData::internal_error(format!("a store read failed: {error}"), None)
        })?;
        let ((state, status), row) = read.map_err(store_error)?;
        self.forget_passed_logins(job, &state);
        let login_opened = state
            .wait
            .as_ref()
            .is_some_and(|wait| self.was_opened(job, wait.id));
        Ok(task_of(
            task_id,
            &state,
            status,
            (row.created_at_ms, row.updated_at_ms),
            pages,
            login_opened,
        ))
    }

    async fn load(&self, job: &str) -> Result<(JobState, JobStatus), ErrorData> {
        let store = self.store.clone();
        let id = job.to_owned();
        let (state, status) = tokio::task::spawn_blocking(move || store.load(&id))
            .await
            .map_err(|error| {
                ErrorData::internal_error(format!("a store read failed: {error}"), None)
            })?
            .map_err(store_error)?;
        self.forget_passed_logins(job, &state);
        Ok((state, status))
    }
}

fn store_error(error: StoreError) -> ErrorData {
    match error {
        StoreError::NotFound(_) => ErrorData::invalid_params(error.to_string(), None),
        _ => ErrorData::internal_error(error.to_string(), None),
    }
}

fn is_login(job: &JobState) -> bool {
    job.wait.as_ref().is_some_and(|wait| {
        matches!(
            wait.request,
            crate::engine::WaitRequest::BrowserLogin { .. }
        )
    })
}

/// Whether MCP allows `name` as a tool's name: 1 to 128 of `A-Z a-z 0-9 _ - .`.
fn tool_name_fits(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A piece as a tool: its description, and its input and intake values as arguments.
fn tool_of(piece: &Piece) -> Tool {
    let mut properties = Map::new();
    properties.insert(
        INPUT.to_owned(),
        json!({"type": "string", "description": "What the job is to do, in the user's words."}),
    );
    for slot in piece.intake.iter().flat_map(|intake| &intake.slots) {
        properties.insert(
            slot.name.value.clone(),
            json!({"type": "string", "description": slot.description}),
        );
    }
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": [INPUT],
        "additionalProperties": false,
    });
    let about = piece.description.trim();
    let description = format!(
        "{}Runs piece `{}` as a maestro job. The job may ask questions, wait for approvals or \
         run subtasks: a client of the tasks extension gets it as a task; another client's call \
         follows it for up to a minute.",
        if about.is_empty() {
            String::new()
        } else {
            format!("{about}\n\n")
        },
        piece.name.value
    );
    Tool::new(
        piece.name.value.clone(),
        description,
        super::waits::object(schema),
    )
}
