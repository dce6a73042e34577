//! The engine: runs jobs of pieces through the agent loop, tool calls through the plugin
//! runtime, and turns control-flow outcomes into job statuses (DESIGN §5).
//!
//! Invariant: the engine holds no job. A run takes a [`JobState`] (data only), drives it until
//! it ends or parks, and leaves everything needed to continue it in that state, so whoever keeps
//! jobs (the CLI, the store, the worker) can park a job for as long as it likes and resume it in
//! any process with the same pieces and plugins. Only pieces that pass lint against the loaded
//! tools are ever run.

mod agent_loop;
mod answer;
mod artifacts;
mod conversation;
mod events;
mod handoff;
mod job;
mod piece_runner;
mod prompt;
mod resume;
mod session;
mod start;
mod tools;
mod wait;
mod workers;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use answer::{Answer, EngineAnswer, HumanVerdict, WorkerNews};
pub use artifacts::{MAX_ARTIFACTS_PER_JOB, artifact_view, facts_of};
pub use conversation::Conversation;
pub use events::{JobEvent, NoObserver, Observer, RecordingObserver};
pub use job::{
    GateOwner, Grant, JobState, JobStatus, PinnedPlugin, ResumePoint, Wait, resume_name,
};
pub use piece_runner::{
    Guard, MapContext, MovementResult, PieceRunResult, Step, Target, map_movement_result,
};
pub use session::{
    JobSession, SessionLogError, check_answer, job_session, live_session, runtime_events,
};
pub use tools::{CatalogError, CatalogSlot, TRANSITION_TOOL, ToolCatalog};
pub use wait::{IntakeField, WaitReason, WaitRequest, intake_slots};
pub use workers::child_job_id;

use std::future::Future;
use std::pin::Pin;

use crate::llm::Model;
use crate::phase::{RuntimePhase, SkillIndexEntry, TransitionError};
use crate::piece::{LintError, Piece};

/// The engine's guards against runaway jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Model turns per movement.
    pub max_iterations: u32,
    /// Consecutive text-only replies in a movement that has no `default_next`.
    pub max_text_only: u32,
    /// Questions a job may ask; the next `ASK` aborts it.
    pub max_asks: u32,
    /// Tool calls a job may make between two human actions; the call that reaches it waits
    /// for a human's go-ahead (the phase machine's tool-loop burst limit).
    pub max_burst: u32,
    /// Parks a movement may make (tools and rule waits); the next one aborts the job. A tool
    /// that parks again every time it is resumed would otherwise cycle for ever.
    pub max_parks_per_movement: u32,
}

impl Default for EngineLimits {
    fn default() -> Self {
        Self {
            max_iterations: 24,
            max_text_only: 3,
            max_asks: 8,
            max_burst: crate::phase::DEFAULT_MAX_BURST,
            max_parks_per_movement: 32,
        }
    }
}

/// Asks a running job to stop at its next model turn or tool call, with the reason given for it
/// if there is one (the first one given stands).
#[derive(Debug, Clone, Default)]
pub struct CancelFlag {
    cancelled: Arc<AtomicBool>,
    reason: Arc<std::sync::OnceLock<String>>,
}

impl CancelFlag {
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// [`CancelFlag::cancel`], saying why: the job ends with this reason.
    pub fn cancel_because(&self, reason: &str) {
        let _ = self.reason.set(reason.to_owned());
        self.cancel();
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    pub fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{}", lint_report(.0))]
    Lint(Vec<LintError>),
    #[error("two pieces are named `{name}`: {first} and {second}")]
    DuplicatePiece {
        name: String,
        first: String,
        second: String,
    },
    #[error("no piece named `{0}` is loaded")]
    UnknownPiece(String),
    #[error("job {job} is {status}: {message}")]
    NotRunnable {
        job: String,
        status: JobStatus,
        message: String,
    },
}

fn lint_report(errors: &[LintError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Records `event` in `job`: the job's session takes it first and refuses what the phase
/// machine refuses, and then nothing is recorded. The one way the engine records an event, so
/// the session is always the fold of the log.
fn record(
    observer: &dyn Observer,
    job: &mut JobState,
    event: JobEvent,
) -> Result<(), TransitionError> {
    let session = job.session.get_or_insert_with(JobSession::default);
    session.observe(&job.id, &event)?;
    observer.on_event(&job.id, &event);
    Ok(())
}

/// Ends `job` from outside a run (a cancel, an engine that refused it): its status, result and
/// wait are set, its session takes the end, and the event to append to its log is returned.
pub fn end_outside(job: &mut JobState, status: JobStatus, detail: &str) -> JobEvent {
    job.status = status;
    job.wait = None;
    job.wait_expires_at_ms = None;
    job.result = Some(detail.to_owned());
    let event = JobEvent::Finished {
        status,
        detail: detail.to_owned(),
    };
    if let Some(session) = &mut job.session
        && let Err(refused) = session.observe(&job.id, &event)
    {
        tracing::warn!(job = %job.id, "the job's session took no end: {refused}");
    }
    event
}

/// The grant a human's approval of a tool's own `tool-request` gives: one call of the tool, on
/// the version serving it now, with exactly the arguments shown. The policy's approval gate
/// needs none (the approved call itself runs), nor does a tool no plugin serves.
fn grant_of(catalog: &ToolCatalog, wait: &Wait, answer: &Answer) -> Option<Grant> {
    let WaitRequest::ToolApproval {
        tool, arguments, ..
    } = &wait.request
    else {
        return None;
    };
    if !matches!(answer, Answer::Resume(crate::plugin::Resume::Approved))
        || !matches!(wait.resume, ResumePoint::ParkedCall { .. })
    {
        return None;
    }
    Some(Grant {
        tool: tool.clone(),
        content_hash: catalog.plugin_for(tool)?.content_hash().to_owned(),
        arguments: serde_json::from_str(arguments).ok()?,
    })
}

/// A future of the job layer's.
pub type JobsFuture<T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send>>;

/// What the job layer does for the engine with child jobs: which ones a job started (through
/// the `spawn-subtask` capability, for a rule `next: WAIT_SUBTASKS`), and a job's worker —
/// starting it, passing it an answer, cancelling it.
pub trait ChildJobs: Send + Sync {
    fn children(&self, parent: &str) -> Vec<String>;

    /// Starts the worker of `parent`'s call `call_id` (by plugin `plugin`): a child job of
    /// `piece` whose questions and drafts are answered at the parent. Idempotent per call: a
    /// call run again finds the worker it started.
    fn start_worker(
        &self,
        parent: &str,
        call_id: &str,
        plugin: &str,
        piece: &str,
        input: &str,
    ) -> JobsFuture<String>;

    /// Records `answer` for the wait `wait` of the child `job`.
    fn answer(&self, job: &str, answer: Answer, wait: u32) -> JobsFuture<()>;

    /// Cancels the child `job` (and its own children).
    fn cancel(&self, job: &str, reason: &str) -> JobsFuture<()>;
}

/// Runs jobs. Cheap to share behind an `Arc`; runs of different jobs may overlap.
pub struct Engine {
    model: Arc<dyn Model>,
    catalog: Arc<CatalogSlot>,
    pieces: BTreeMap<String, Arc<Piece>>,
    limits: EngineLimits,
    child_jobs: Option<Arc<dyn ChildJobs>>,
}

impl Engine {
    /// Checks every piece against the catalog's tools; any lint error refuses them all, each
    /// error with its file, line and column.
    pub fn new(
        model: Arc<dyn Model>,
        catalog: Arc<ToolCatalog>,
        pieces: impl IntoIterator<Item = Piece>,
        limits: EngineLimits,
    ) -> Result<Self, EngineError> {
        let slot = Arc::new(CatalogSlot::new(catalog));
        Self::build(model, slot, pieces, limits, false).map(|(engine, _)| engine)
    }

    /// An engine on a catalog that others replace while it runs (hot loading). A tool that no
    /// plugin offers now may be offered later, so those lint errors come back as warnings (a
    /// call to such a tool is answered to the model as an unknown tool); any other lint error
    /// still refuses the pieces.
    pub fn on_live_catalog(
        model: Arc<dyn Model>,
        slot: Arc<CatalogSlot>,
        pieces: impl IntoIterator<Item = Piece>,
        limits: EngineLimits,
    ) -> Result<(Self, Vec<LintError>), EngineError> {
        Self::build(model, slot, pieces, limits, true)
    }

    fn build(
        model: Arc<dyn Model>,
        catalog: Arc<CatalogSlot>,
        pieces: impl IntoIterator<Item = Piece>,
        limits: EngineLimits,
        tools_may_come_later: bool,
    ) -> Result<(Self, Vec<LintError>), EngineError> {
        let known_tools = catalog.current().tool_names();
        let mut by_name: BTreeMap<String, Arc<Piece>> = BTreeMap::new();
        let mut lint_errors = Vec::new();
        let mut warnings = Vec::new();
        for piece in pieces {
            for error in crate::piece::lint(&piece, &known_tools) {
                if tools_may_come_later && error.kind == crate::piece::LintKind::UnknownTool {
                    warnings.push(error);
                } else {
                    lint_errors.push(error);
                }
            }
            if let Some(first) = by_name.get(&piece.name.value) {
                return Err(EngineError::DuplicatePiece {
                    name: piece.name.value.clone(),
                    first: first.origin.display().to_string(),
                    second: piece.origin.display().to_string(),
                });
            }
            by_name.insert(piece.name.value.clone(), Arc::new(piece));
        }
        if !lint_errors.is_empty() {
            return Err(EngineError::Lint(lint_errors));
        }
        let engine = Self {
            model,
            catalog,
            pieces: by_name,
            limits,
            child_jobs: None,
        };
        Ok((engine, warnings))
    }

    /// Lets rule-based waits for subtasks see the children the job layer started.
    pub fn with_child_jobs(mut self, child_jobs: Arc<dyn ChildJobs>) -> Self {
        self.child_jobs = Some(child_jobs);
        self
    }

    pub fn piece(&self, name: &str) -> Option<&Arc<Piece>> {
        self.pieces.get(name)
    }

    pub fn pieces(&self) -> impl Iterator<Item = &Arc<Piece>> {
        self.pieces.values()
    }

    /// The catalog as it stands now.
    pub fn catalog(&self) -> Arc<ToolCatalog> {
        self.catalog.current()
    }

    /// Where the catalog can be replaced (hot loading); runs already going keep theirs.
    pub fn catalog_slot(&self) -> &Arc<CatalogSlot> {
        &self.catalog
    }

    pub fn model(&self) -> &Arc<dyn Model> {
        &self.model
    }

    /// A new job of `piece`, pending at its initial movement; without a piece, a job that
    /// waits for a human to choose one of this engine's pieces.
    pub fn new_job(
        &self,
        id: String,
        piece: Option<&str>,
        input: String,
    ) -> Result<JobState, EngineError> {
        let Some(piece) = piece else {
            return Ok(JobState::without_piece(id, input));
        };
        let piece = self
            .piece(piece)
            .ok_or_else(|| EngineError::UnknownPiece(piece.to_owned()))?;
        let mut job = JobState::new(id, &piece.name.value, &piece.initial_movement.value, input);
        job.piece_origin = piece.origin.display().to_string();
        Ok(job)
    }

    /// The pieces a human may choose from, by name and description.
    pub fn skill_index(&self) -> Vec<SkillIndexEntry> {
        self.pieces
            .values()
            .map(|piece| SkillIndexEntry {
                name: piece.name.value.clone(),
                description: piece.description.trim().to_owned(),
            })
            .collect()
    }

    /// Runs `job` until it ends or parks. A pending job runs from where it stands; a parked job
    /// needs `answer`, which must answer what it waits for. The job is updated in place and the
    /// result says how the run ended.
    pub async fn run(
        &self,
        job: &mut JobState,
        answer: Option<Answer>,
        observer: &dyn Observer,
        cancel: &CancelFlag,
    ) -> Result<PieceRunResult, EngineError> {
        let not_runnable = |job: &JobState, message: String| EngineError::NotRunnable {
            job: job.id.clone(),
            status: job.status,
            message,
        };
        if job.session.is_none() {
            return Err(not_runnable(
                job,
                "it has no session: fold it from the job's log first".to_owned(),
            ));
        }
        let resume = match (job.status, answer) {
            (JobStatus::Pending | JobStatus::Running, None) => None,
            (JobStatus::Pending | JobStatus::Running, Some(_)) => {
                return Err(not_runnable(job, "it waits for nothing".to_owned()));
            }
            (status, None) if status.is_waiting() => {
                return Err(not_runnable(job, "it needs an answer to resume".to_owned()));
            }
            (status, Some(answer)) if status.is_waiting() => {
                // A parent's answer to its worker is the answer itself once it arrives.
                let answer = match answer {
                    Answer::Engine(EngineAnswer::Forwarded { answer, .. }) => *answer,
                    answer => answer,
                };
                let wait = job
                    .wait
                    .clone()
                    .ok_or_else(|| not_runnable(job, "its wait record is missing".to_owned()))?;
                wait.request
                    .accepts(&answer)
                    .map_err(|message| not_runnable(job, message))?;
                if let Some(grant) = grant_of(&self.catalog.current(), &wait, &answer) {
                    job.grants.push(grant);
                }
                Some((wait, answer))
            }
            _ => return Err(not_runnable(job, "it has ended".to_owned())),
        };
        let never_started = job
            .phase_session()
            .is_some_and(|session| session.phase() == RuntimePhase::Idle);
        if never_started && let Err(refused) = start::record_start(self, job, observer) {
            return Err(not_runnable(job, refused));
        }
        if let Some((wait, answer)) = &resume {
            let resumed = JobEvent::Resumed {
                wait: wait.id,
                movement: job.movement.clone(),
                resume: answer.for_the_log(),
            };
            record(observer, job, resumed).map_err(|refused| {
                not_runnable(job, format!("its session refuses the answer: {refused}"))
            })?;
        }
        job.status = JobStatus::Running;
        job.wait = None;
        job.wait_expires_at_ms = None;
        let resume = match start::before_piece(self, job, resume, observer)? {
            start::Entry::Stopped(result) => return Ok(result),
            start::Entry::Enter(resume) => resume,
        };
        let piece = self
            .piece(&job.piece)
            .ok_or_else(|| EngineError::UnknownPiece(job.piece.clone()))?
            .clone();
        // One snapshot for the whole run: a reload mid-run never mixes versions in it.
        let catalog = self.catalog.current();
        let cx = agent_loop::LoopContext {
            model: self.model.as_ref(),
            catalog: &catalog,
            limits: &self.limits,
            piece: &piece,
            observer,
            cancel,
            child_jobs: self.child_jobs.as_deref(),
        };
        Ok(piece_runner::run_piece(&cx, job, resume).await)
    }
}
