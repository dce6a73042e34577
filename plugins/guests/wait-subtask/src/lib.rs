//! First-party control-flow tool `WaitSubTask`: park the job until every
//! listed child job has ended, then report how each one ended, with its facts
//! (the artifacts a reviewer accepted). Built against `maestro:tool@0.2.0`,
//! whose subtask results carry facts.

use maestro_guest::serde_json::{Value, json};
use maestro_guest::{
    Call, Guest, Outcome, Park, Resume, SubtaskResult, SubtaskStatus, ToolError, ToolSpec,
    output_json, parse_args, spec, subtask_json,
};
use serde::Deserialize;

const TOOL: &str = "WaitSubTask";

struct WaitSubTask;

#[derive(Deserialize)]
struct Args {
    job_ids: Vec<String>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "job_ids": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "minItems": 1,
                "uniqueItems": true,
                "description": "Ids of the child jobs to wait for, as returned when they were started."
            }
        },
        "required": ["job_ids"],
        "additionalProperties": false
    })
}

/// Matches the host's results to what this call awaited. The host should
/// answer exactly the awaited ids, but the model acts on this output, so a
/// stray result must not show up and a lost one must be visible.
fn report(awaited: &[String], results: &[SubtaskResult]) -> Value {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let mut all_completed = true;
    for id in awaited {
        // The first result for an id wins, should the host repeat one.
        match results.iter().find(|r| &r.job_id == id) {
            Some(result) => {
                all_completed &= matches!(result.status, SubtaskStatus::Completed);
                found.push(subtask_json(result));
            }
            None => {
                all_completed = false;
                missing.push(id.clone());
            }
        }
    }
    json!({"results": found, "missing": missing, "all_completed": all_completed})
}

impl Guest for WaitSubTask {
    fn describe() -> Vec<ToolSpec> {
        vec![spec(
            TOOL,
            "Wait until every listed child job has ended. The result lists how each ended (completed, aborted, cancelled or failed) with its output and its facts: the artifacts a reviewer accepted.",
            schema(),
        )]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        if call.tool != TOOL {
            return Err(ToolError::unknown_tool(&call));
        }
        let args: Args = parse_args(&call)?;
        match &call.resume {
            None => {
                if args.job_ids.is_empty() || args.job_ids.iter().any(String::is_empty) {
                    return Err(ToolError::permanent(
                        "job_ids must list at least one non-empty job id",
                    ));
                }
                Ok(Outcome::Park(Park::Subtasks(args.job_ids)))
            }
            Some(Resume::SubtasksDone(results)) => Ok(output_json(&report(&args.job_ids, results))),
            Some(Resume::Expired) => Err(ToolError::permanent(format!(
                "the wait for job(s) {} expired before they all ended",
                args.job_ids.join(", ")
            ))),
            Some(other) => Err(ToolError::cannot_resume(TOOL, other)),
        }
    }
}

maestro_guest::export!(WaitSubTask);
