//! `maestro run`: one job, in this process, until it ends or parks — and the driver that
//! `maestro jobs answer|login|approve|deny|resume` share with it.
//!
//! Invariant: a job is run only after the store handed it to this process (a claim with a
//! lease), and whatever the run did is saved with its events before the command reports, so
//! the store always holds what the terminal showed. A park prints what the job waits for and
//! the exact command that answers it.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::setup::{EngineOptions, Setup, shell_quote};
use super::{Failure, printable};
use crate::engine::{
    CancelFlag, Engine, JobEvent, JobState, Observer, PieceRunResult, WaitRequest,
};
use crate::plugin::Runtime;
use crate::store::{JobStore, SqliteStore, new_job_id};
use crate::worker::JobRun;

/// How long a CLI run's claim lasts without renewal (it is renewed every third of it); after
/// that, a crashed run's job can be taken up again.
const LEASE: Duration = Duration::from_secs(30);

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
    store: &Arc<SqliteStore>,
    engine: &Engine,
    job_id: &str,
    output: OutputOptions,
) -> Result<(), Failure> {
    let owner = format!("cli-{}", std::process::id());
    let claimed = store
        .claim(job_id, &owner, LEASE.as_millis() as i64)
        .map_err(Failure::usage)?
        .ok_or_else(|| {
            let status = store
                .load(job_id)
                .map(|(_, status)| status.to_string())
                .unwrap_or_else(|err| err.to_string());
            Failure::usage(format!("job {job_id} is not runnable now (it is {status})"))
        })?;
    let cancel = CancelFlag::default();
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
    let run = JobRun {
        store: store.clone(),
        engine,
        owner: &owner,
        lease: LEASE,
        wait_expiry: setup.wait_expiry,
    };
    let printer: Arc<dyn Observer> = Arc::new(StepPrinter { json: output.json });
    // Saved before anything is reported, also when the engine refused the job.
    let done = run.finish(claimed, Some(printer), cancel).await;
    interrupt.abort();
    done.saved.map_err(Failure::usage)?;
    let Some(result) = done.result else {
        return Err(Failure::usage(format!(
            "job {job_id} could not be run and is now `error`: {}",
            done.state.result.unwrap_or_default()
        )));
    };
    if !output.json {
        report(setup, &done.state, &result);
    }
    match result {
        PieceRunResult::Completed { .. }
        | PieceRunResult::WaitingHuman { .. }
        | PieceRunResult::WaitingSubtasks { .. } => Ok(()),
        _ => Err(Failure::reported(1)),
    }
}

/// Prints the steps of a run as they happen.
struct StepPrinter {
    json: bool,
}

impl Observer for StepPrinter {
    fn on_event(&self, job_id: &str, event: &JobEvent) {
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
            JobEvent::Resumed {
                movement, resume, ..
            } => {
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
        PieceRunResult::Completed { output } => {
            println!("\ncompleted: {}", printable(output))
        }
        PieceRunResult::Aborted { reason, guard } => match guard {
            Some(guard) => println!(
                "\naborted by the {} guard: {}",
                guard.as_str(),
                printable(reason)
            ),
            None => println!("\naborted: {}", printable(reason)),
        },
        PieceRunResult::Cancelled { reason } => println!("\ncancelled: {}", printable(reason)),
        PieceRunResult::Error { message } => println!("\nerror: {}", printable(message)),
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
                    println!("  question: {}\n  answer it with:", printable(question));
                    println!(
                        "{}",
                        command("answer", &format!(" {}", shell_quote("<your answer>")))
                    );
                }
                WaitRequest::BrowserLogin { url, reason } => {
                    println!(
                        "  log in at {} ({})\n  then hand over the session (a `-` reads it from standard input) with:",
                        printable(url),
                        printable(reason)
                    );
                    println!("{}", command("login", " -"));
                }
                WaitRequest::ToolApproval {
                    tool,
                    reason,
                    arguments,
                } => {
                    println!(
                        "  tool {} wants to run with {}\n  because: {}",
                        printable(tool),
                        printable(arguments),
                        printable(reason)
                    );
                    println!("  approve or deny it with:");
                    println!("{}", command("approve", ""));
                    println!(
                        "{}",
                        command("deny", &format!(" {}", shell_quote("<reason>")))
                    );
                }
                WaitRequest::BurstConfirmation {
                    tool,
                    arguments,
                    calls,
                } => {
                    println!(
                        "  the agent made {calls} tool calls since a human last acted; next it \
                         wants {} with {}",
                        printable(tool),
                        printable(arguments)
                    );
                    println!("  let it go on, stop it, or tell it something with:");
                    println!("{}", command("approve", ""));
                    println!(
                        "{}",
                        command("deny", &format!(" {}", shell_quote("<reason>")))
                    );
                    println!(
                        "{}",
                        command("answer", &format!(" {}", shell_quote("<message>")))
                    );
                }
                WaitRequest::Subtasks { .. } => {}
            }
        }
    }
}

/// `text` on one line, at most `max_chars` long, safe for the terminal.
fn clip(text: &str, max_chars: usize) -> String {
    let flat: String = printable(text)
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
