//! `maestro run`: one job, in this process, until it ends or parks — and the driver that
//! `maestro jobs answer|login|approve|deny|resume` share with it.
//!
//! Invariant: a job is run only after the store handed it to this process (a claim with a
//! lease), and whatever the run did is saved with its events before the command reports, so
//! the store always holds what the terminal showed. A park prints what the job waits for and
//! the exact command that answers it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::setup::{EngineOptions, Setup, shell_quote};
use super::{Failure, printable};
use crate::engine::{
    CancelFlag, Engine, JobEvent, JobState, JobStatus, Observer, PieceRunResult, WaitRequest,
};
use crate::plugin::Runtime;
use crate::store::{JobStore, new_job_id};
use crate::worker::JobRun;

/// How long a CLI run's claim lasts without renewal (it is renewed every third of it); after
/// that, a crashed run's job can be taken up again.
const LEASE: Duration = Duration::from_secs(30);

#[derive(Debug, Args)]
pub struct RunCommand {
    /// A piece file, or the name of a piece in the pieces folder; without one, the job waits
    /// for a human to choose a piece of the pieces folder (`maestro jobs choose`).
    pub piece: Option<String>,
    /// What the user asks of the job.
    #[arg(long, short, default_value = "")]
    pub input: String,
    /// A value of the piece's intake (`name=value`, repeatable), shown filled in for a human to
    /// confirm.
    #[arg(long = "slot", value_name = "NAME=VALUE", value_parser = parse_slot)]
    pub slots: Vec<(String, String)>,
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

/// `name=value`, for `--slot`.
pub fn parse_slot(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("`{text}` is not name=value")),
    }
}

pub async fn execute(command: &RunCommand, runtime: Runtime) -> Result<(), Failure> {
    let setup = Setup::resolve(&command.engine)?;
    let store = setup.open_store()?;
    let (engine, piece) = match &command.piece {
        Some(piece) => {
            let engine = setup.engine(&runtime, piece, &store).await?;
            let name = engine
                .pieces()
                .next()
                .expect("the engine has the piece")
                .name
                .value
                .clone();
            (engine, Some(name))
        }
        None => (setup.engine_all(&runtime, &store).await?, None),
    };
    let mut job = engine
        .new_job(new_job_id(), piece.as_deref(), command.input.clone())
        .map_err(Failure::usage)?;
    job.prefill = command.slots.iter().cloned().collect();
    store.create(&job).map_err(Failure::usage)?;
    if !command.output.json {
        println!(
            "job {} · piece {} · model {}",
            job.id,
            piece.as_deref().unwrap_or("(to be chosen)"),
            engine.model().describe()
        );
    }
    drive(&setup, &store, &engine, &runtime, &job.id, command.output).await
}

/// Claims `job_id`, runs it to its next stop, saves it, and reports how it stopped. The job's
/// subtasks and workers run here too, whenever it waits for them and one of them can run, so a
/// job that starts a worker comes back to the terminal only once someone must act (or it ends).
pub async fn drive(
    setup: &Setup,
    store: &Arc<dyn JobStore>,
    engine: &Engine,
    runtime: &Runtime,
    job_id: &str,
    output: OutputOptions,
) -> Result<(), Failure> {
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
    let mut engines: BTreeMap<String, Engine> = BTreeMap::new();
    let mut last = BTreeMap::new();
    let mut next = Some(job_id.to_owned());
    let mut first = true;
    while let Some(id) = next.take() {
        let (job, _) = store.load(&id).map_err(Failure::usage)?;
        // The job given runs on the engine given; a subtask of another piece on its own.
        let own_engine = first || job.piece == engine.pieces().next().map_or("", |p| &p.name.value);
        if !own_engine && !engines.contains_key(&job.piece) {
            let built = setup.engine_for_job(runtime, &job, None, store).await?;
            engines.insert(job.piece.clone(), built);
        }
        let runner = if own_engine {
            engine
        } else {
            &engines[&job.piece]
        };
        if !first && !output.json {
            println!("\n== job {id} (piece {}) ==", job.piece);
        }
        let done = run_once(setup, store, runner, &id, output, &cancel, first).await?;
        first = false;
        let Some(done) = done else { break };
        last.insert(id, done);
        if cancel.is_cancelled() {
            break;
        }
        next = next_in_tree(store.as_ref(), job_id)?;
    }
    interrupt.abort();
    let Some((root, result)) = last.remove(job_id) else {
        let (root, status) = store.load(job_id).map_err(Failure::usage)?;
        return Err(Failure::usage(format!(
            "job {job_id} could not be run and is now `{status}`: {}",
            root.result.unwrap_or_default()
        )));
    };
    if !output.json {
        report(setup, &root, &result);
        // Whatever in the job's tree waits for a human and does not show at its parent.
        for (id, (job, result)) in &last {
            let (now, status) = store.load(id).map_err(Failure::usage)?;
            let surfaces = now.reviewed_by_parent
                && now
                    .wait
                    .as_ref()
                    .is_some_and(|wait| wait.request.surfaces_at_parent());
            if status == JobStatus::WaitingHuman && !surfaces && now.wait == job.wait {
                println!("\nsubtask {id} of job {job_id}:");
                report(setup, &now, result);
            }
        }
    }
    match root.status {
        JobStatus::Completed | JobStatus::WaitingHuman | JobStatus::WaitingSubtasks => Ok(()),
        _ => Err(Failure::reported(1)),
    }
}

/// Claims `job_id`, runs it once and saves it; `None` when it is not runnable now (another
/// process has it). The first job must be runnable.
async fn run_once(
    setup: &Setup,
    store: &Arc<dyn JobStore>,
    engine: &Engine,
    job_id: &str,
    output: OutputOptions,
    cancel: &CancelFlag,
    required: bool,
) -> Result<Option<(JobState, PieceRunResult)>, Failure> {
    let owner = format!("cli-{}", std::process::id());
    let claimed = store
        .claim(job_id, &owner, LEASE.as_millis() as i64)
        .map_err(Failure::usage)?;
    let Some(claimed) = claimed else {
        if !required {
            return Ok(None);
        }
        let status = store
            .load(job_id)
            .map(|(_, status)| status.to_string())
            .unwrap_or_else(|err| err.to_string());
        return Err(Failure::usage(format!(
            "job {job_id} is not runnable now (it is {status})"
        )));
    };
    let run = JobRun {
        store: store.clone(),
        engine,
        owner: &owner,
        lease: LEASE,
        wait_expiry: setup.wait_expiry,
    };
    let printer: Arc<dyn Observer> = Arc::new(StepPrinter { json: output.json });
    // Saved before anything is reported, also when the engine refused the job.
    let done = run.finish(claimed, Some(printer), cancel.clone()).await;
    done.saved.map_err(Failure::usage)?;
    match done.result {
        Some(result) => Ok(Some((done.state, result))),
        None if required => Err(Failure::usage(format!(
            "job {job_id} could not be run and is now `error`: {}",
            done.state.result.unwrap_or_default()
        ))),
        None => Ok(Some((
            done.state.clone(),
            PieceRunResult::Error {
                message: done.state.result.unwrap_or_default(),
            },
        ))),
    }
}

/// The next job of `root`'s tree to run here: the root once it is runnable again, else a
/// runnable descendant while the root waits for its subtasks; `None` when the tree waits for
/// someone else (or ended).
fn next_in_tree(store: &dyn JobStore, root: &str) -> Result<Option<String>, Failure> {
    let status = store.summary(root).map_err(Failure::usage)?.status;
    match status {
        JobStatus::Pending => return Ok(Some(root.to_owned())),
        JobStatus::WaitingSubtasks => {}
        _ => return Ok(None),
    }
    let mut queue = std::collections::VecDeque::from([root.to_owned()]);
    let mut seen = 0;
    while let Some(id) = queue.pop_front() {
        for child in store.children(&id).map_err(Failure::usage)? {
            seen += 1;
            if seen > MAX_TREE {
                return Ok(None);
            }
            match store.summary(&child).map_err(Failure::usage)?.status {
                JobStatus::Pending => return Ok(Some(child)),
                status if !status.is_final() => queue.push_back(child),
                _ => {}
            }
        }
    }
    Ok(None)
}

/// Jobs of one tree `maestro run` looks through for one to run.
const MAX_TREE: usize = 4096;

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
            JobEvent::SkillChosen { piece, .. } => println!("  piece chosen: {piece}"),
            JobEvent::IntakeCompleted { slots } => {
                let slots = serde_json::to_string(slots).unwrap_or_default();
                println!("  intake: {}", clip(&slots, 300));
            }
            JobEvent::ArtifactDrafted {
                artifact, worker, ..
            } => println!(
                "  artifact {} drafted{}: {} ({}, {} bytes)",
                artifact.id,
                if *worker { " by the worker" } else { "" },
                clip(&artifact.title, 200),
                clip(&artifact.kind, 40),
                artifact.content.len()
            ),
            JobEvent::Reviewed {
                artifact_id,
                verdict,
            } => println!("  artifact {artifact_id} reviewed: {}", verdict.name()),
            JobEvent::RevisionInstructed { artifact_id, text } => {
                println!("  revise {artifact_id}: {}", clip(text, 300))
            }
            JobEvent::WorkerStarted { worker } => println!("  worker {worker} runs"),
            JobEvent::WorkerAsked { worker, question } => {
                println!("  worker {worker} asks: {}", clip(question, 300))
            }
            JobEvent::WorkerAnswered { worker, text } => {
                println!("  answer for worker {worker}: {}", clip(text, 300))
            }
            JobEvent::WorkerEnded { worker, status } => {
                println!("  worker {worker} ended: {status}")
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
                WaitRequest::Worker { worker } => format!("{worker} (its worker)"),
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
                WaitRequest::SkillSelection { pieces } => {
                    println!("  the job has no piece yet; choose one of:");
                    for piece in pieces {
                        println!(
                            "    {:<16} {}",
                            printable(&piece.name),
                            clip(&piece.description, 100)
                        );
                    }
                    println!("  with:");
                    println!("{}", command("choose", " <piece>"));
                }
                WaitRequest::Intake { prompt, fields } => {
                    println!("  intake: {}", printable(prompt));
                    let mut slots = String::new();
                    for field in fields {
                        println!(
                            "    {}{}: {}{}",
                            printable(&field.name),
                            if field.required { " (required)" } else { "" },
                            printable(&field.description),
                            field
                                .value
                                .as_deref()
                                .map(|value| format!(" [now: {}]", clip(value, 80)))
                                .unwrap_or_default()
                        );
                        slots.push_str(&format!(
                            " --slot {}",
                            shell_quote(&format!("{}=<value>", field.name))
                        ));
                    }
                    println!("  fill it in (or confirm it as it stands, without --slot) with:");
                    println!("{}", command("intake", &slots));
                }
                WaitRequest::ArtifactReview {
                    artifact_id,
                    title,
                    artifact_kind,
                    media_type,
                    worker,
                    ..
                } => {
                    println!(
                        "  {} {artifact_id} to review{}: {} ({})",
                        printable(artifact_kind),
                        worker
                            .as_deref()
                            .map(|worker| format!(" from worker {worker}"))
                            .unwrap_or_default(),
                        printable(title),
                        printable(media_type)
                    );
                    let show = setup.store_flags().join(" ");
                    println!(
                        "  read it with:\n    maestro jobs artifacts {} {show}",
                        job.id
                    );
                    println!("  accept it, reject it, or ask for a revision with:");
                    println!("{}", command("accept", ""));
                    println!(
                        "{}",
                        command("reject", &format!(" {}", shell_quote("<reason>")))
                    );
                    println!(
                        "{}",
                        command("revise", &format!(" {}", shell_quote("<instruction>")))
                    );
                }
                WaitRequest::RevisionInstruction {
                    artifact_id, title, ..
                } => {
                    println!(
                        "  a revision of {artifact_id} ({}) waits for what to change; say it with:",
                        printable(title)
                    );
                    println!(
                        "{}",
                        command("revise", &format!(" {}", shell_quote("<instruction>")))
                    );
                }
                WaitRequest::WorkerQuestion {
                    worker, question, ..
                } => {
                    println!(
                        "  worker {worker} asks: {}\n  answer it here with:",
                        printable(question)
                    );
                    println!(
                        "{}",
                        command("answer", &format!(" {}", shell_quote("<your answer>")))
                    );
                }
                WaitRequest::Subtasks { .. } | WaitRequest::Worker { .. } => {}
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
