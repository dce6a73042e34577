//! `maestro jobs`: see and answer the jobs of a store, from any shell.
//!
//! Invariant: an answer is recorded in the store first (once: a second answer is refused), and
//! only then is the job continued in this process; a job whose answer is recorded but not yet
//! run stays `pending` and `maestro jobs resume` runs it.

use clap::Subcommand;

use super::run::{OutputOptions, drive, parse_slot};
use super::setup::{EngineOptions, Setup, StoreOption};
use super::{Failure, printable};
use crate::engine::{
    Answer, EngineAnswer, HumanVerdict, JobEvent, JobStatus, artifact_view, job_session,
};
use crate::plugin::{Resume, Runtime};
use crate::store::CancelOutcome;

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Create a pending job of a piece for `maestro work` to run; prints its id. Without a
    /// piece, the job waits for a human to choose one (`maestro jobs choose`).
    Start {
        /// A piece file, or the name of a piece in the pieces folder.
        piece: Option<String>,
        #[arg(long, short, default_value = "")]
        input: String,
        /// A value of the piece's intake (`name=value`, repeatable), for a human to confirm.
        #[arg(long = "slot", value_name = "NAME=VALUE", value_parser = parse_slot)]
        slots: Vec<(String, String)>,
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
    /// Choose the piece of a job started without one, then continue it.
    Choose {
        id: String,
        piece: String,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Fill in the intake a job waits on (or confirm it as it stands), then continue it.
    Intake {
        id: String,
        /// A value (`name=value`, repeatable); without any, the intake is confirmed as it is.
        #[arg(long = "slot", value_name = "NAME=VALUE", value_parser = parse_slot)]
        slots: Vec<(String, String)>,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Accept the artifact a job waits on a review of: it becomes a fact.
    Accept {
        id: String,
        /// The artifact (default: the one under review).
        artifact: Option<String>,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Reject the artifact under review; the reason goes to whoever drafted it.
    Reject {
        id: String,
        reason: String,
        #[arg(long)]
        artifact: Option<String>,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// Send the artifact under review back for a new version; without an instruction, the job
    /// waits for one (give it with `revise` again).
    Revise {
        id: String,
        instruction: Option<String>,
        #[arg(long)]
        artifact: Option<String>,
        #[command(flatten)]
        resume: ResumeOptions,
    },
    /// A job's artifacts, every version, with its status; accepted ones are facts.
    Artifacts {
        id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreOption,
    },
    /// Run a pending job (answered, or left by a run that died) to its next stop.
    Resume {
        id: String,
        #[command(flatten)]
        engine: EngineOptions,
        #[command(flatten)]
        output: OutputOptions,
    },
    /// Cancel a job and its open subtasks: a pending or waiting one at once, a running one at its
    /// next step. The job ends with the reason given (its subtasks with "its parent job was
    /// cancelled"); of two reasons for one running job, the first stands.
    Cancel {
        id: String,
        #[arg(long, default_value = "cancelled by an operator")]
        reason: String,
        #[command(flatten)]
        store: StoreOption,
    },
    /// Delete jobs that ended long ago, with their events: whole trees (a job and its
    /// subtasks), once every job of the tree has ended.
    Prune {
        /// How long ago a tree's top-level job must have ended, e.g. `30d`, `12h`, `90m`.
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: std::time::Duration,
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
            | JobsCommand::Deny { resume, .. }
            | JobsCommand::Choose { resume, .. }
            | JobsCommand::Intake { resume, .. }
            | JobsCommand::Accept { resume, .. }
            | JobsCommand::Reject { resume, .. }
            | JobsCommand::Revise { resume, .. } => Some(&resume.engine),
            JobsCommand::List { .. }
            | JobsCommand::Show { .. }
            | JobsCommand::Cancel { .. }
            | JobsCommand::Prune { .. }
            | JobsCommand::Artifacts { .. } => None,
        }
    }
}

/// An age such as `30d` or `1h 30m`.
pub fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text)
        .map_err(|error| format!("`{text}` is not an age ({error}); e.g. `30d`, `12h`, `90m`"))
}

fn parse_status(text: &str) -> Result<JobStatus, String> {
    JobStatus::parse(text).ok_or_else(|| {
        let known: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!("unknown status `{text}`; one of: {}", known.join(", "))
    })
}

pub(super) fn store_only(store: &StoreOption) -> Result<Setup, Failure> {
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
            slots,
            engine,
        } => {
            let setup = Setup::resolve(engine)?;
            let store = setup.open_store()?;
            let prefill = slots.iter().cloned().collect();
            let id = setup.start_job(store.as_ref(), piece.as_deref(), input.clone(), prefill)?;
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
        JobsCommand::Prune { older_than, store } => {
            let store = store_only(store)?.open_store()?;
            let deleted = crate::store::prune_finished(store.as_ref(), *older_than)
                .map_err(Failure::usage)?;
            println!(
                "deleted {deleted} {} that ended more than {} ago, with their events",
                if deleted == 1 { "job" } else { "jobs" },
                humantime::format_duration(*older_than)
            );
            Ok(())
        }
        JobsCommand::Answer { id, text, resume } => {
            answer(id, Resume::Answered(text.clone()).into(), resume, runtime).await
        }
        JobsCommand::Login {
            id,
            session,
            resume,
        } => {
            let session = session_text(session)?;
            answer(id, Resume::LoggedIn(session).into(), resume, runtime).await
        }
        JobsCommand::Approve { id, resume } => {
            answer(id, Resume::Approved.into(), resume, runtime).await
        }
        JobsCommand::Deny { id, reason, resume } => {
            answer(id, Resume::Denied(reason.clone()).into(), resume, runtime).await
        }
        JobsCommand::Choose { id, piece, resume } => {
            let choice = EngineAnswer::Choose {
                piece: piece.clone(),
            };
            answer(id, choice.into(), resume, runtime).await
        }
        JobsCommand::Intake { id, slots, resume } => {
            let intake = EngineAnswer::Intake {
                slots: slots.iter().cloned().collect(),
            };
            answer(id, intake.into(), resume, runtime).await
        }
        JobsCommand::Accept {
            id,
            artifact,
            resume,
        } => review(id, artifact, HumanVerdict::Accept, resume, runtime).await,
        JobsCommand::Reject {
            id,
            reason,
            artifact,
            resume,
        } => {
            let verdict = HumanVerdict::Reject {
                reason: reason.clone(),
            };
            review(id, artifact, verdict, resume, runtime).await
        }
        JobsCommand::Revise {
            id,
            instruction,
            artifact,
            resume,
        } => {
            let verdict = HumanVerdict::Revise {
                instruction: instruction.clone(),
            };
            review(id, artifact, verdict, resume, runtime).await
        }
        JobsCommand::Artifacts { id, json, store } => artifacts(&store_only(store)?, id, *json),
        JobsCommand::Resume { id, engine, output } => {
            let setup = Setup::resolve(engine)?;
            continue_job(&setup, id, *output, runtime()?, None).await
        }
    }
}

async fn review(
    id: &str,
    artifact: &Option<String>,
    verdict: HumanVerdict,
    options: &ResumeOptions,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
    let review = EngineAnswer::Review {
        artifact: artifact.clone(),
        verdict,
    };
    answer(id, review.into(), options, runtime).await
}

async fn answer(
    id: &str,
    given: Answer,
    options: &ResumeOptions,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
    let setup = Setup::resolve(&options.engine)?;
    let store = setup.open_store()?;
    store
        .answer_async(id, &given, options.wait)
        .await
        .map_err(Failure::usage)?;
    if options.no_run {
        println!("answer recorded; job {id} is pending");
        return Ok(());
    }
    let chosen = match &given {
        Answer::Engine(EngineAnswer::Choose { piece }) => Some(piece.as_str()),
        _ => None,
    };
    continue_job(&setup, id, options.output, runtime()?, chosen).await
}

/// Runs job `id` on; `chosen` is the piece a human just chose for it.
async fn continue_job(
    setup: &Setup,
    id: &str,
    output: OutputOptions,
    runtime: Runtime,
    chosen: Option<&str>,
) -> Result<(), Failure> {
    let store = setup.open_store()?;
    let (job, _) = store.load(id).map_err(Failure::usage)?;
    let engine = setup
        .engine_for_job(&runtime, &job, chosen, &store)
        .await
        .map_err(|failure| Failure {
            message: failure.message.map(|message| {
                format!("{message}\n(job {id} stays pending; `maestro jobs resume {id}` runs it)")
            }),
            ..failure
        })?;
    drive(setup, &store, &engine, &runtime, id, output).await
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
        println!("no jobs in {}", setup.store);
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
    // The session kept with the job is stepped through the same log: the two must agree.
    let drift = match (&session, job.phase_session()) {
        (Ok(folded), Some(kept)) => *kept != folded.without_history(),
        _ => false,
    };
    if json {
        let session = match &session {
            Ok(session) => serde_json::json!({
                "phase": session.phase(),
                "waiting_reason": session.waiting_reason(),
                "worker": session.current_worker_id(),
                "tool_calls_since_user": session.tool_loop_burst_count(),
                "max_burst": session.max_burst(),
                "slots": session.slots(),
                "artifacts": session.artifacts().iter().map(artifact_view).collect::<Vec<_>>(),
                "kept_session_disagrees": drift,
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
            "trace_id": job.trace.as_ref().map(|trace| &trace.trace_id),
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
            if drift {
                println!("          (the session kept with the job disagrees with its log)");
            }
            if let Some(reason) = session.waiting_reason() {
                let reason = serde_json::to_string(reason).unwrap_or_default();
                println!("reason    {reason}");
            }
            if let Some(worker) = session.current_worker_id() {
                println!("worker    {worker}");
            }
            for record in session.artifacts() {
                println!(
                    "artifact  {} {} ({}): {}",
                    record.id(),
                    record.status(),
                    printable(record.kind()),
                    printable(record.title())
                );
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
    if let Some(trace) = &job.trace {
        println!("trace     {}", trace.trace_id);
    }
    if let Some(wait) = &job.wait {
        let request = serde_json::to_string(&wait.request).unwrap_or_default();
        println!(
            "waits for {} ({})",
            wait.request.describe(),
            wait.reason.map_or(
                match wait.request {
                    crate::engine::WaitRequest::Worker { .. } => "worker",
                    _ => "subtasks",
                },
                |r| r.as_str()
            )
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

fn artifacts(setup: &Setup, id: &str, json: bool) -> Result<(), Failure> {
    let store = setup.open_store()?;
    let (job, _) = store.load(id).map_err(Failure::usage)?;
    let records = job
        .phase_session()
        .map(|session| session.artifacts().to_vec())
        .unwrap_or_default();
    if json {
        let views: Vec<_> = records.iter().map(artifact_view).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "job": id, "artifacts": views }))
                .expect("artifacts serialize")
        );
        return Ok(());
    }
    if records.is_empty() {
        println!("job {id} has no artifacts");
        return Ok(());
    }
    for record in &records {
        let fact = if record.status() == crate::phase::ArtifactStatus::Accepted {
            " · fact"
        } else {
            ""
        };
        println!(
            "── {} · {} · {}{fact}{}",
            record.id(),
            printable(record.kind()),
            record.status(),
            record
                .revises()
                .map(|old| format!(" · revises {old}"))
                .unwrap_or_default()
        );
        println!(
            "   {} ({})",
            printable(record.title()),
            printable(record.media_type())
        );
        for line in record.content().lines() {
            println!("   {}", printable(line));
        }
    }
    Ok(())
}
