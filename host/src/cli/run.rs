//! `maestro run`: one job, in this process, until it ends or parks — and the driver that
//! `maestro jobs answer|login|approve|deny|resume` share with it.
//!
//! Invariant: a job is run only after the store handed it to this process (a claim with a
//! lease), and whatever the run did is saved with its events before the command reports, so
//! the store always holds what the terminal showed. A park prints what the job waits for and
//! the exact command that answers it.

use std::sync::Mutex;

use clap::Args;

use super::Failure;
use super::setup::{EngineOptions, Setup, shell_quote};
use crate::engine::{
    CancelFlag, Engine, JobEvent, JobState, Observer, PieceRunResult, WaitRequest,
};
use crate::plugin::Runtime;
use crate::store::{JobStore, SqliteStore, new_job_id};

/// How long a CLI run holds its claim; after that a crashed run's job can be taken again.
const LEASE_MS: i64 = 10 * 60 * 1000;

#[derive(Debug, Args)]
pub struct RunCommand {
    /// A piece file, or the name of a piece in the pieces folder.
    pub piece: String,
    /// What the user asks of the job.
    #[arg(long, short)]
    pub input: String,
    #[command(flatten)]
    pub engine: EngineOptions,
    #[command(flatten)]
    pub output: OutputOptions,
}

#[derive(Debug, Clone, Copy, Args)]
pub struct OutputOptions {
    /// Print each event as one JSON line instead of readable steps.
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(command: &RunCommand, runtime: Runtime) -> Result<(), Failure> {
    let setup = Setup::resolve(&command.engine)?;
    let store = setup.open_store()?;
    let engine = setup.engine(&runtime, &command.piece, &store).await?;
    let piece = engine
        .pieces()
        .next()
        .expect("the engine has the piece")
        .clone();
    let job = engine
        .new_job(new_job_id(), &piece.name.value, command.input.clone())
        .map_err(Failure::usage)?;
    store.create(&job).map_err(Failure::usage)?;
    if !command.output.json {
        println!(
            "job {} · piece {} · model {}",
            job.id,
            piece.name.value,
            engine.model().describe()
        );
    }
    drive(&setup, &store, &engine, &job.id, command.output).await
}

/// Claims `job_id`, runs it to its next stop, saves it, and reports how it stopped.
pub async fn drive(
    setup: &Setup,
    store: &SqliteStore,
    engine: &Engine,
    job_id: &str,
    output: OutputOptions,
) -> Result<(), Failure> {
    let owner = format!("cli-{}", std::process::id());
    let claimed = store
        .claim(job_id, &owner, LEASE_MS)
        .map_err(Failure::usage)?
        .ok_or_else(|| {
            let status = store
                .load(job_id)
                .map(|(_, status)| status.to_string())
                .unwrap_or_else(|err| err.to_string());
            Failure::usage(format!("job {job_id} is not runnable now (it is {status})"))
        })?;
    let mut job = claimed.state;
    let cancel = CancelFlag::default();
    let printer = Printer::new(output.json, store, &owner, cancel.clone());
    let on_interrupt = cancel.clone();
    let interrupt = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "interrupted: cancelling the job at its next step (Ctrl-C again to quit now)"
            );
            on_interrupt.cancel();
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            // The job stays `running` until its lease expires; then it can be resumed.
            std::process::exit(130);
        }
    });
    let run = engine
        .run(&mut job, claimed.resume, &printer, &cancel)
        .await;
    interrupt.abort();
    job.wait_expires_at_ms = crate::worker::expiry_for(&job, setup.wait_expiry);
    // Saved before anything is reported, also when the run was refused (the claim is released).
    store
        .save(&job, &printer.take_events(), &owner)
        .map_err(Failure::usage)?;
    let result = run.map_err(Failure::usage)?;
    if !output.json {
        report(setup, &job, &result);
    }
    match result {
        PieceRunResult::Completed { .. }
        | PieceRunResult::WaitingHuman { .. }
        | PieceRunResult::WaitingSubtasks { .. } => Ok(()),
        _ => Err(Failure::reported(1)),
    }
}

/// Prints the steps of a run as they happen, keeps the events for the store, and keeps the
/// run's lease alive while it makes progress.
struct Printer<'a> {
    json: bool,
    events: Mutex<Vec<JobEvent>>,
    store: &'a SqliteStore,
    owner: &'a str,
    renewed: Mutex<std::time::Instant>,
    cancel: CancelFlag,
}

impl<'a> Printer<'a> {
    fn new(json: bool, store: &'a SqliteStore, owner: &'a str, cancel: CancelFlag) -> Self {
        Self {
            json,
            events: Mutex::new(Vec::new()),
            store,
            owner,
            renewed: Mutex::new(std::time::Instant::now()),
            cancel,
        }
    }

    fn keep_lease(&self, job_id: &str) {
        let mut renewed = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        if renewed.elapsed().as_millis() < (LEASE_MS / 4) as u128 {
            return;
        }
        *renewed = std::time::Instant::now();
        match self.store.renew(job_id, self.owner, LEASE_MS) {
            Ok(true) => self.cancel.cancel(),
            Ok(false) => {}
            Err(err) => tracing::warn!("cannot renew the lease of job {job_id}: {err}"),
        }
    }

    fn take_events(&self) -> Vec<JobEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Observer for Printer<'_> {
    fn on_event(&self, job_id: &str, event: &JobEvent) {
        self.keep_lease(job_id);
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event.clone());
        if self.json {
            let line = serde_json::json!({"job": job_id, "event": event});
            println!("{line}");
            return;
        }
        match event {
            JobEvent::Started { .. } | JobEvent::Parked { .. } | JobEvent::Finished { .. } => {}
            JobEvent::MovementEntered { movement, count } => {
                println!("\n[{count}] movement {movement}");
            }
            JobEvent::ModelReplied { text, .. } => {
                if let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) {
                    println!("  model: {}", clip(text, 400));
                }
            }
            JobEvent::ToolCalled {
                tool, arguments, ..
            } => println!("  -> {tool} {}", clip(arguments, 300)),
            JobEvent::ToolAnswered {
                tool,
                content,
                is_error,
                ..
            } => {
                let label = if *is_error { "error" } else { "output" };
                println!("  <- {tool} {label}: {}", clip(content, 400));
            }
            JobEvent::Transition { from, to } => println!("  transition {from} -> {to}"),
            JobEvent::Resumed { movement, resume } => {
                let resume = serde_json::to_string(resume).unwrap_or_default();
                println!(
                    "\nresumed in movement {movement} with {}",
                    clip(&resume, 300)
                );
            }
        }
    }
}

/// How the run stopped, and for a park, who must do what.
fn report(setup: &Setup, job: &JobState, result: &PieceRunResult) {
    let flags = setup.replay_flags().join(" ");
    let wait = job.wait.as_ref().map_or(0, |wait| wait.id);
    let command = |verb: &str, args: &str| {
        format!(
            "    maestro jobs {verb} {}{args} --wait {wait} {flags}",
            job.id
        )
    };
    match result {
        PieceRunResult::Completed { output } => println!("\ncompleted: {output}"),
        PieceRunResult::Aborted { reason, guard } => match guard {
            Some(guard) => println!("\naborted by the {} guard: {reason}", guard.as_str()),
            None => println!("\naborted: {reason}"),
        },
        PieceRunResult::Cancelled { reason } => println!("\ncancelled: {reason}"),
        PieceRunResult::Error { message } => println!("\nerror: {message}"),
        PieceRunResult::WaitingSubtasks {
            resume_movement,
            wait,
        } => {
            let ids = match &wait.request {
                WaitRequest::Subtasks { job_ids } => job_ids.join(", "),
                _ => String::new(),
            };
            let show = setup.store_flags().join(" ");
            println!(
                "\nparked: waiting_subtasks, resumes at movement {resume_movement} when these \
                 jobs have ended: {ids}\n  the job holds no worker while it waits; see it with:\n\
                 \x20   maestro jobs show {} {show}",
                job.id
            );
        }
        PieceRunResult::WaitingHuman {
            resume_movement,
            reason,
            wait,
        } => {
            println!(
                "\nparked: waiting_human ({}), resumes at movement {resume_movement}; the job \
                 holds no worker while it waits.",
                reason.as_str()
            );
            match &wait.request {
                WaitRequest::Question { question } => {
                    println!("  question: {question}\n  answer it with:");
                    println!(
                        "{}",
                        command("answer", &format!(" {}", shell_quote("<your answer>")))
                    );
                }
                WaitRequest::BrowserLogin { url, reason } => {
                    println!("  log in at {url} ({reason})\n  then hand over the session with:");
                    println!(
                        "{}",
                        command("login", &format!(" {}", shell_quote("<cookie>")))
                    );
                }
                WaitRequest::ToolApproval {
                    tool,
                    reason,
                    arguments,
                } => {
                    println!("  tool {tool} wants to run with {arguments}\n  because: {reason}");
                    println!("  approve or deny it with:");
                    println!("{}", command("approve", ""));
                    println!(
                        "{}",
                        command("deny", &format!(" {}", shell_quote("<reason>")))
                    );
                }
                WaitRequest::Subtasks { .. } => {}
            }
        }
    }
}

fn clip(text: &str, max_chars: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
