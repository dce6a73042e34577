//! `maestro plugin check`: the conformance kit for tool authors. It loads a component the way the
//! host does and runs it through what the host will do to it: describe, calls with arguments made
//! up from each tool's schema, calls with invalid arguments, and every park resumed with each
//! answer that fits it — all under the operator's policy (deny-by-default unless one is given).
//!
//! Invariant: a check fails only on something the author must fix (the component does not load,
//! a call crashes or breaks a limit, the host lets invalid arguments through, a parked call
//! cannot be resumed); what the kit cannot decide (a schema it cannot sample, a schema that
//! accepts anything) is a warning. Nothing is skipped silently: every tool gets its checks in
//! the report, even when they could not run.

mod sample;

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::plugin::{
    CallError, CallRequest, Fact, Outcome, Park, Plugin, PluginPolicy, Resume, Review, Runtime,
    SubtaskResult, SubtaskStatus, Terminal, ToolSpec, Verdict,
};

pub use sample::Fill;

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked: `load`, `imports`, `describe`, `call`, `invalid-arguments`, `resume`.
    pub check: &'static str,
    /// The tool, for per-tool checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    pub status: Status,
    pub detail: String,
}

/// Everything `plugin check` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub component: String,
    pub passed: bool,
    pub checks: Vec<Check>,
}

impl Report {
    fn push(&mut self, check: &'static str, tool: Option<&str>, status: Status, detail: String) {
        self.checks.push(Check {
            check,
            tool: tool.map(str::to_owned),
            status,
            detail,
        });
    }

    pub fn warnings(&self) -> usize {
        self.count(Status::Warn)
    }

    pub fn failures(&self) -> usize {
        self.count(Status::Fail)
    }

    fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }
}

/// Runs every check on the component at `path`, loaded under `policy`.
pub async fn check(runtime: &Runtime, path: &Path, policy: PluginPolicy) -> Report {
    let mut report = Report {
        component: path.display().to_string(),
        passed: false,
        checks: Vec::new(),
    };
    let plugin = match runtime.load_file(path, policy).await {
        Ok(plugin) => plugin,
        Err(error) => {
            report.push("load", None, Status::Fail, format!("{error}"));
            return report;
        }
    };
    let load = plugin.load_report();
    report.push(
        "load",
        None,
        Status::Pass,
        format!(
            "targets {} (world `plugin`); {} tool(s); {} in {:.1} ms",
            plugin.wit_version(),
            plugin.specs().len(),
            match load.compiled_from {
                crate::plugin::CompiledFrom::Cache => "loaded from the compile cache",
                crate::plugin::CompiledFrom::Compiler => "compiled",
            },
            load.compile_or_load.as_secs_f64() * 1000.0
        ),
    );
    report.push(
        "imports",
        None,
        Status::Pass,
        format!(
            "{} (each is deny-by-default until the policy grants it)",
            plugin.imports().join(", ")
        ),
    );
    for spec in plugin.specs() {
        check_tool(&plugin, spec, &mut report).await;
    }
    report.passed = report.failures() == 0;
    report
}

async fn check_tool(plugin: &Plugin, spec: &ToolSpec, report: &mut Report) {
    let tool = Some(spec.name.as_str());
    report.push(
        "describe",
        tool,
        Status::Pass,
        "valid name, unique, parameters a valid JSON Schema".into(),
    );
    let validator = jsonschema::validator_for(&spec.parameters).ok();
    let accepts = |value: &Value| validator.as_ref().is_some_and(|v| v.is_valid(value));

    // Calls: the required arguments, every property filled in, then blank values.
    let mut samples: Vec<Value> = Vec::new();
    for fill in [Fill::Required, Fill::All, Fill::Blank] {
        let sample = sample::valid(&spec.parameters, fill);
        if !samples.contains(&sample) {
            samples.push(sample);
        }
    }
    let mut called = 0;
    for (index, arguments) in samples.into_iter().enumerate() {
        if !accepts(&arguments) {
            report.push(
                "call",
                tool,
                Status::Warn,
                format!(
                    "could not make up arguments its schema accepts (tried {arguments}); \
                     add `examples` or `default` to the schema to let the kit call it"
                ),
            );
            continue;
        }
        called += 1;
        let call_id = format!("maestro-check-{}-{index}", spec.name);
        let request = CallRequest {
            call_id: call_id.clone(),
            ..CallRequest::new(spec.name.clone(), arguments.clone())
        };
        match plugin.invoke(request.clone()).await {
            Ok(outcome) => {
                report.push(
                    "call",
                    tool,
                    Status::Pass,
                    format!("{arguments} → {}", outcome_label(&outcome)),
                );
                if let Outcome::Park(park) = &outcome {
                    check_resumes(plugin, &request, park, report).await;
                }
            }
            Err(error) => {
                let (status, detail) = judge_error(&error);
                report.push("call", tool, status, format!("{arguments} → {detail}"));
            }
        }
    }
    if called == 0 {
        report.push(
            "resume",
            tool,
            Status::Warn,
            "not checked: the tool could not be called".into(),
        );
    }

    // Invalid arguments must be refused by the host before the tool runs.
    let invalid = sample::invalid(&spec.parameters)
        .into_iter()
        .find(|(_, value)| validator.is_some() && !accepts(value));
    match invalid {
        None => report.push(
            "invalid-arguments",
            tool,
            Status::Warn,
            "the schema accepts any arguments, so the tool must check them itself".into(),
        ),
        Some((label, arguments)) => {
            let request = CallRequest::new(spec.name.clone(), arguments.clone());
            match plugin.invoke(request).await {
                Err(CallError::InvalidArguments { problems, .. }) => report.push(
                    "invalid-arguments",
                    tool,
                    Status::Pass,
                    format!(
                        "{label} ({arguments}) refused before the tool ran: {}",
                        problems.join("; ")
                    ),
                ),
                other => report.push(
                    "invalid-arguments",
                    tool,
                    Status::Fail,
                    format!("{label} ({arguments}) reached the tool: {other:?}"),
                ),
            }
        }
    }
}

/// Re-invokes a parked call with each answer that fits its park, and with `expired`.
async fn check_resumes(plugin: &Plugin, parked: &CallRequest, park: &Park, report: &mut Report) {
    let tool = Some(parked.tool.as_str());
    for resume in resumes_for(park) {
        let label = crate::engine::resume_name(&resume);
        match plugin.invoke(parked.clone().resumed(resume)).await {
            Ok(outcome) => report.push(
                "resume",
                tool,
                Status::Pass,
                format!(
                    "{} resumed with {label} → {}",
                    park_label(park),
                    outcome_label(&outcome)
                ),
            ),
            Err(error) => {
                let (status, detail) = judge_error(&error);
                report.push(
                    "resume",
                    tool,
                    status,
                    format!("{} resumed with {label} → {detail}", park_label(park)),
                );
            }
        }
    }
}

/// The answers a human or the host can give to `park`.
fn resumes_for(park: &Park) -> Vec<Resume> {
    let mut resumes = match park {
        Park::Ask(_) => vec![Resume::Answered("yes".into())],
        Park::BrowserLogin(_) => vec![Resume::LoggedIn("session=maestro-check".into())],
        Park::ToolRequest(_) => vec![Resume::Approved, Resume::Denied("a check".into())],
        Park::Subtasks(ids) => vec![Resume::SubtasksDone(
            ids.iter().map(|id| finished_child(id)).collect(),
        )],
        Park::Artifact(_) => {
            let reviewed = |verdict| {
                Resume::Reviewed(Review {
                    artifact_id: "art-maestro-check".into(),
                    verdict,
                })
            };
            vec![
                reviewed(Verdict::Accepted),
                reviewed(Verdict::Rejected("a check".into())),
                reviewed(Verdict::RevisionRequested("shorter, please".into())),
            ]
        }
        Park::Worker(_) => vec![Resume::WorkerDone(finished_child("job-maestro-check"))],
    };
    resumes.push(Resume::Expired);
    resumes
}

/// A child job that completed, with one fact, as a resume reports it.
fn finished_child(id: &str) -> SubtaskResult {
    SubtaskResult {
        job_id: id.to_owned(),
        status: SubtaskStatus::Completed,
        output: "done".into(),
        facts: vec![Fact {
            artifact_id: "art-maestro-check".into(),
            kind: "report".into(),
            title: "A checked report".into(),
            media_type: "text/markdown".into(),
            body: "# Done".into(),
        }],
    }
}

/// A tool error is the tool's answer (pass); a crash, a limit or a host failure is the
/// author's to fix.
fn judge_error(error: &CallError) -> (Status, String) {
    match error {
        CallError::Tool { message, .. } => (Status::Pass, format!("tool error: {message}")),
        CallError::Limit(limit) => (
            Status::Fail,
            format!("broke the policy's {} limit: {error}", limit.name()),
        ),
        other => (Status::Fail, format!("{}: {other}", other.code())),
    }
}

fn outcome_label(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Output(text) => format!("output ({} bytes)", text.len()),
        Outcome::Park(park) => park_label(park),
        Outcome::Terminal(Terminal::Complete(_)) => "terminal complete".into(),
        Outcome::Terminal(Terminal::Abort(_)) => "terminal abort".into(),
    }
}

fn park_label(park: &Park) -> String {
    match park {
        Park::Ask(_) => "park ask",
        Park::BrowserLogin(_) => "park browser-login",
        Park::ToolRequest(_) => "park tool-request",
        Park::Subtasks(_) => "park subtasks",
        Park::Artifact(_) => "park artifact",
        Park::Worker(_) => "park worker",
    }
    .into()
}
