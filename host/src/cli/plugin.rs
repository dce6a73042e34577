//! `maestro plugin list|describe|call`: the tool author's first loop.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;

use super::Failure;
use super::folder::{Loaded, load_folder};
use super::setup::shell_quote;
use crate::plugin::{CallRequest, Outcome, Plugin, Policy, Resume, Runtime};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Load every `.wasm` in a directory and list its tools.
    List {
        /// The plugin directory.
        #[arg(env = "MAESTRO_PLUGIN_DIR")]
        dir: PathBuf,
        #[command(flatten)]
        options: LoadOptions,
    },
    /// Load one component and print its tool specs as JSON.
    Describe {
        path: PathBuf,
        #[command(flatten)]
        options: LoadOptions,
    },
    /// Check a component against the contract, as the host will use it: describe, calls with
    /// arguments made up from each schema, invalid arguments, and every park resumed.
    Check {
        /// The component.
        path: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        options: LoadOptions,
    },
    /// Call one tool and print its outcome as JSON.
    Call {
        /// The component.
        path: PathBuf,
        /// The tool to call (see `maestro plugin describe`).
        tool: String,
        /// The arguments, a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// Re-invoke a parked call: "approved", {"answered":"…"}, {"denied":"…"},
        /// {"logged-in":"<cookie>"}, {"subtasks-done":[…]} or "expired".
        #[arg(long, value_name = "JSON")]
        resume: Option<String>,
        /// Call id (reuse the one a park printed when resuming).
        #[arg(long)]
        call_id: Option<String>,
        #[arg(long, default_value = "")]
        job_id: String,
        #[arg(long, default_value = "")]
        movement: String,
        #[command(flatten)]
        options: LoadOptions,
    },
}

#[derive(Debug, clap::Args)]
pub struct LoadOptions {
    /// Operator policy (TOML); without it every plugin runs deny-by-default.
    #[arg(long, value_name = "FILE", env = "MAESTRO_POLICY")]
    policy: Option<PathBuf>,
}

impl LoadOptions {
    fn policy(&self) -> Result<Policy, Failure> {
        match &self.policy {
            Some(path) => Policy::from_file(path).map_err(Failure::usage),
            None => Ok(Policy::default()),
        }
    }
}

impl PluginCommand {
    /// The policy the command loads plugins under.
    pub fn policy(&self) -> Result<Policy, Failure> {
        match self {
            PluginCommand::List { options, .. }
            | PluginCommand::Describe { options, .. }
            | PluginCommand::Check { options, .. }
            | PluginCommand::Call { options, .. } => options.policy(),
        }
    }
}

pub async fn execute(
    command: &PluginCommand,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
    match command {
        PluginCommand::List { dir, options } => list(&runtime()?, dir, &options.policy()?).await,
        PluginCommand::Describe { path, options } => {
            let plugin = load(&runtime()?, path, &options.policy()?).await?;
            print_json(&describe_json(&plugin));
            Ok(())
        }
        PluginCommand::Check {
            path,
            json,
            options,
        } => {
            let policy = options.policy()?;
            let name = plugin_name(path);
            let report =
                crate::conformance::check(&runtime()?, path, policy.for_plugin(&name)).await;
            if *json {
                print_json(&serde_json::to_value(&report).expect("the report serializes"));
            } else {
                print_report(&report);
            }
            if report.passed {
                Ok(())
            } else {
                Err(Failure::reported(1))
            }
        }
        PluginCommand::Call {
            path,
            tool,
            args,
            resume,
            call_id,
            job_id,
            movement,
            options,
        } => {
            let arguments: serde_json::Value = serde_json::from_str(args)
                .map_err(|err| Failure::usage(format!("--args is not JSON: {err}")))?;
            let resume = match resume {
                Some(text) => Some(serde_json::from_str::<Resume>(text).map_err(|err| {
                    Failure::usage(format!(
                        "--resume is not a resume value ({err}); expected \"approved\", \"expired\", {{\"answered\":\"…\"}}, {{\"denied\":\"…\"}}, {{\"logged-in\":\"…\"}} or {{\"subtasks-done\":[…]}}"
                    ))
                })?),
                None => None,
            };
            let policy = options.policy()?;
            let plugin = load(&runtime()?, path, &policy).await?;
            let mut request = CallRequest::new(tool.clone(), arguments);
            if let Some(id) = call_id {
                request.call_id = id.clone();
            }
            request.job_id = job_id.clone();
            request.movement = movement.clone();
            request.resume = resume;
            call(&plugin, path, request, options).await
        }
    }
}

async fn load(runtime: &Runtime, path: &Path, policy: &Policy) -> Result<Plugin, Failure> {
    let name = plugin_name(path);
    runtime
        .load_file(path, policy.for_plugin(&name))
        .await
        .map_err(|err| Failure::usage(format!("{}: {err}", path.display())))
}

/// A plugin's name is its file stem; the policy table `[plugins.<name>]` applies to it.
pub fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn describe_json(plugin: &Plugin) -> serde_json::Value {
    json!({
        "plugin": plugin.name(),
        "content_hash": plugin.content_hash(),
        "load": plugin.load_report(),
        "tools": plugin.specs(),
    })
}

async fn list(runtime: &Runtime, dir: &Path, policy: &Policy) -> Result<(), Failure> {
    let rows: Vec<serde_json::Value> = load_folder(runtime, dir, policy)
        .await?
        .into_iter()
        .map(|Loaded { path, name, plugin }| match plugin {
            Ok(plugin) => json!({
                "plugin": name,
                "path": path,
                "content_hash": plugin.content_hash(),
                "tools": plugin.specs().iter().map(|spec| &spec.name).collect::<Vec<_>>(),
            }),
            Err(err) => json!({
                "plugin": name,
                "path": path,
                "error": { "code": err.code(), "message": err.to_string() },
            }),
        })
        .collect();
    print_json(&serde_json::Value::Array(rows));
    Ok(())
}

async fn call(
    plugin: &Plugin,
    path: &Path,
    request: CallRequest,
    options: &LoadOptions,
) -> Result<(), Failure> {
    let call_id = request.call_id.clone();
    let tool = request.tool.clone();
    let arguments = request.arguments.to_string();
    let head = json!({
        "plugin": plugin.name(),
        "content_hash": plugin.content_hash(),
        "tool": tool,
        "call_id": call_id,
    });
    match plugin.invoke(request).await {
        Ok(outcome) => {
            let mut report = head;
            report["outcome"] = serde_json::to_value(&outcome).expect("outcome serializes");
            print_json(&report);
            if let Outcome::Park(park) = &outcome {
                let example = match park {
                    crate::plugin::Park::Ask(_) => r#"{"answered":"<your answer>"}"#,
                    crate::plugin::Park::BrowserLogin(_) => {
                        r#"{"logged-in":"<cookie header value>"}"#
                    }
                    crate::plugin::Park::ToolRequest(_) => r#""approved""#,
                    crate::plugin::Park::Subtasks(_) => {
                        r#"{"subtasks-done":[{"job_id":"<id>","status":"completed","output":"<result>"}]}"#
                    }
                    crate::plugin::Park::Artifact(_) => {
                        r#"{"reviewed":{"artifact_id":"<id>","verdict":"accepted"}}"#
                    }
                    crate::plugin::Park::Worker(_) => {
                        r#"{"worker-done":{"job_id":"<id>","status":"completed","output":"<result>","facts":[]}}"#
                    }
                };
                let policy = options
                    .policy
                    .as_ref()
                    .map(|p| format!(" --policy {}", shell_quote(&p.display().to_string())))
                    .unwrap_or_default();
                eprintln!(
                    "parked. Resume this call with:\n  maestro plugin call {} {} --args {} --call-id {}{} --resume {}",
                    shell_quote(&path.display().to_string()),
                    shell_quote(&tool),
                    shell_quote(&arguments),
                    call_id,
                    policy,
                    shell_quote(example),
                );
            }
            Ok(())
        }
        Err(error) => {
            let mut report = head;
            report["error"] = error.to_json();
            print_json(&report);
            Err(Failure::reported(1))
        }
    }
}

fn print_report(report: &crate::conformance::Report) {
    println!("maestro plugin check {}", report.component);
    for check in &report.checks {
        let tool = check.tool.as_deref().unwrap_or("");
        println!(
            "  {}  {:<18} {:<18} {}",
            check.status.label(),
            check.check,
            tool,
            check.detail
        );
    }
    println!(
        "{}: {} checks, {} failed, {} warnings",
        if report.passed { "passed" } else { "FAILED" },
        report.checks.len(),
        report.failures(),
        report.warnings()
    );
}

fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON value serializes")
    );
}
