//! `maestro jobs`: see and answer the jobs of a store, from any shell.
//!
//! Invariant: an answer is recorded in the store first (once: a second answer is refused), and
//! only then is the job continued in this process; a job whose answer is recorded but not yet
//! run stays `pending` and `maestro jobs resume` runs it.

use clap::Subcommand;

use super::Failure;
use super::run::{OutputOptions, drive};
use super::setup::{EngineOptions, Setup, StoreOption};
use crate::engine::{JobEvent, JobStatus, job_session};
use crate::plugin::{Resume, Runtime};
use crate::store::{CancelOutcome, JobStore};

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Create a pending job of a piece for `maestro work` to run; prints its id.
    Start {
        /// A piece file, or the name of a piece in the pieces folder.
        piece: String,
        #[arg(long, short)]
        input: String,
        #[command(flatten)]
        engine: EngineOptions,
    },
    /// Jobs of the store, newest first.
    List {
        /// Only jobs with this status (pending, running, waiting_human, waiting_subtasks,
        /// completed, aborted, cancelled, error).
        #[arg(long, value_parser = parse_status)]
        status: Option<JobStatus>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreOption,
    },
    /// One job: status, movement, what it waits for, and its event log.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreOption,
    },
    /// Answer the question a job asked, then continue it.
    Answer {
        id: String,
        text: String,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Hand over the browser session (cookie) a job waits for, then continue it.
    Login {
        id: String,
        /// The session; `-` reads it from standard input, which keeps it out of the process
        /// list and the shell's history.
        session: String,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Approve the tool call a job waits on, then continue it.
    Approve {
        id: String,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Deny the tool call a job waits on (the model is told why), then continue it.
    Deny {
        id: String,
        reason: String,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Run a pending job (answered, or left by a run that died) to its next stop.
    Resume {
        id: String,
        #[command(flatten)]
        engine: EngineOptions,
        #[command(flatten)]
        output: OutputOptions,
    },
    /// Cancel a job that is pending or waiting.
    Cancel {
        id: String,
        #[arg(long, default_value = "cancelled by an operator")]
        reason: String,
        #[command(flatten)]
        store: StoreOption,
    },
}

#[derive(Debug, clap::Args)]
pub struct ResumeOptions {
    /// The park this answer is for (printed with the answer command); refused if the job has
    /// since moved on to another wait.
    #[arg(long, value_name = "PARK")]
    wait: Option<u32>,
    /// Only record the answer; a worker or `maestro jobs resume` continues the job.
    #[arg(long)]
    no_run: bool,
    #[command(flatten)]
    engine: EngineOptions,
    #[command(flatten)]
    output: OutputOptions,
}

/// The session handed over: the argument, or standard input for `-` (without its final
/// line break).
fn session_text(argument: &str) -> Result<String, Failure> {
    let session = if argument == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|error| {
            Failure::usage(format!(
                "cannot read the session from standard input: {error}"
            ))
        })?;
        text.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        argument.to_owned()
    };
    if session.trim().is_empty() {
        return Err(Failure::usage(
            "the session is empty: give the cookie, or `-` and pipe it in",
        ));
    }
    Ok(session)
}

impl JobsCommand {
    /// The engine options of a command that runs a job.
    pub fn engine(&self) -> Option<&EngineOptions> {
        match self {
            JobsCommand::Start { engine, .. } | JobsCommand::Resume { engine, .. } => Some(engine),
            JobsCommand::Answer { resume, .. }
            | JobsCommand::Login { resume, .. }
            | JobsCommand::Approve { resume, .. }
            | JobsCommand::Deny { resume, .. } => Some(&resume.engine),
            JobsCommand::List { .. } | JobsCommand::Show { .. } | JobsCommand::Cancel { .. } => {
                None
            }
        }
    }
}

fn parse_status(text: &str) -> Result<JobStatus, String> {
    JobStatus::parse(text).ok_or_else(|| {
        let known: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!("unknown status `{text}`; one of: {}", known.join(", "))
    })
}

fn store_only(store: &StoreOption) -> Result<Setup, Failure> {
    Setup::resolve(&EngineOptions {
        model: None,
        plugins: None,
        pieces: None,
        policy: None,
        wait_expiry_ms: None,
        max_burst: None,
        store: store.clone(),
    })
}

pub async fn execute(
    command: &JobsCommand,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
    match command {
        JobsCommand::Start {
            piece,
            input,
            engine,
        } => {
            let setup = Setup::resolve(engine)?;
            let store = setup.open_store()?;
            let id = setup.start_job(&store, piece, input.clone())?;
            println!("{id}");
            Ok(())
        }
        JobsCommand::List {
            status,
            limit,
            json,
            store,
        } => list(&store_only(store)?, *status, *limit, *json),
        JobsCommand::Show { id, json, store } => show(&store_only(store)?, id, *json),
        JobsCommand::Cancel { id, reason, store } => {
            let store = store_only(store)?.open_store()?;
            match store.cancel(id, reason).map_err(Failure::usage)? {
                CancelOutcome::Cancelled => println!("cancelled {id} (and its open subtasks)"),
                CancelOutcome::Requested => println!(
                    "{id} is running: its runner stops it at the next step (its open subtasks \
                     are cancelled)"
                ),
            }
            Ok(())
        }
        JobsCommand::Answer { id, text, resume } => {
            answer(id, Resume::Answered(text.clone()), resume, runtime).await
        }
        JobsCommand::Login {
            id,
            session,
            resume,
        } => {
            let session = session_text(session)?;
            answer(id, Resume::LoggedIn(session), resume, runtime).await
        }
        JobsCommand::Approve { id, resume } => answer(id, Resume::Approved, resume, runtime).await,
        JobsCommand::Deny { id, reason, resume } => {
            answer(id, Resume::Denied(reason.clone()), resume, runtime).await
        }
        JobsCommand::Resume { id, engine, output } => {
            let setup = Setup::resolve(engine)?;
            continue_job(&setup, id, *output, runtime()?).await
        }
    }
}

async fn answer(
    id: &str,
    resume: Resume,
    options: &ResumeOptions,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
    let setup = Setup::resolve(&options.engine)?;
    let store = setup.open_store()?;
    store
        .answer_async(id, &resume, options.wait)
        .await
        .map_err(Failure::usage)?;
    if options.no_run {
        println!("answer recorded; job {id} is pending");
        return Ok(());
    }
    continue_job(&setup, id, options.output, runtime()?).await
}

async fn continue_job(
    setup: &Setup,
    id: &str,
    output: OutputOptions,
    runtime: Runtime,
) -> Result<(), Failure> {
    let store = setup.open_store()?;
    let (job, _) = store.load(id).map_err(Failure::usage)?;
    let engine = setup
        .engine_for_job(&runtime, &job, &store)
        .await
        .map_err(|failure| Failure {
            message: failure.message.map(|message| {
                format!("{message}\n(job {id} stays pending; `maestro jobs resume {id}` runs it)")
            }),
            ..failure
        })?;
    drive(setup, &store, &engine, id, output).await
}

fn list(setup: &Setup, status: Option<JobStatus>, limit: usize, json: bool) -> Result<(), Failure> {
    let store = setup.open_store()?;
    let jobs = store.list(status, limit).map_err(Failure::usage)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&jobs).expect("jobs serialize")
        );
        return Ok(());
    }
    if jobs.is_empty() {
        println!("no jobs in {}", setup.store.display());
        return Ok(());
    }
    println!(
        "{:<42} {:<12} {:<17} {:<14} WAITS FOR",
        "ID", "PIECE", "STATUS", "MOVEMENT"
    );
    for job in jobs {
        println!(
            "{:<42} {:<12} {:<17} {:<14} {}",
            job.id,
            job.piece,
            job.status.as_str(),
            job.movement,
            job.wait_reason.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

fn show(setup: &Setup, id: &str, json: bool) -> Result<(), Failure> {
    let store = setup.open_store()?;
    let (job, status) = store.load(id).map_err(Failure::usage)?;
    let events = store.events(id, 0).map_err(Failure::usage)?;
    let log: Vec<JobEvent> = events.iter().map(|stored| stored.event.clone()).collect();
    // The phase is not stored: it is the fold of the log, so it cannot drift from it.
    let session = job_session(&job.id, &log);
    if json {
        let session = match &session {
            Ok(session) => serde_json::json!({
                "phase": session.phase(),
                "waiting_reason": session.waiting_reason(),
                "worker": session.current_worker_id(),
                "tool_calls_since_user": session.tool_loop_burst_count(),
                "max_burst": session.max_burst(),
            }),
            Err(error) => serde_json::json!({ "error": error.to_string() }),
        };
        let value = serde_json::json!({
            "id": job.id,
            "piece": job.piece,
            "status": status,
            "movement": job.movement,
            "wait": job.wait,
            "result": job.result,
            "parent": job.parent,
            "children": job.children,
            "session": session,
            "events": events,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).expect("job serializes")
        );
        return Ok(());
    }
    println!("job       {}", job.id);
    println!("piece     {}", job.piece);
    println!("status    {status}");
    match &session {
        Ok(session) => {
            println!("phase     {}", session.phase_label());
            if let Some(reason) = session.waiting_reason() {
                let reason = serde_json::to_string(reason).unwrap_or_default();
                println!("reason    {reason}");
            }
            if let Some(worker) = session.current_worker_id() {
                println!("worker    {worker}");
            }
            println!(
                "burst     {} of {} tool calls since a human acted",
                session.tool_loop_burst_count(),
                session.max_burst()
            );
        }
        Err(error) => println!("phase     unknown: {error}"),
    }
    println!("movement  {}", job.movement);
    if let Some(wait) = &job.wait {
        let request = serde_json::to_string(&wait.request).unwrap_or_default();
        println!(
            "waits for {} ({})",
            wait.request.describe(),
            wait.reason.map_or("subtasks", |r| r.as_str())
        );
        println!("          {request}");
    }
    if let Some(result) = &job.result {
        println!("result    {}", super::printable(result));
    }
    println!("events:");
    for event in events {
        let text = serde_json::to_string(&event.event).unwrap_or_default();
        println!("  {:>4}  {text}", event.seq);
    }
    Ok(())
}
