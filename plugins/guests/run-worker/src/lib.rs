//! First-party control-flow tool `RunWorker`: start a worker — a child job running a piece —
//! and wait until it ends. While it runs, this job is paused; its questions and the drafts it
//! hands in come to this job's human, whose answers and verdicts reach it. The result is how the
//! worker ended, with its facts. Built against `maestro:tool@0.2.0` (`park.worker`); the policy
//! must grant `spawn_subtasks`.

use maestro_guest::serde_json::{Value, json};
use maestro_guest::{
    Call, Guest, Outcome, Park, Resume, ToolError, ToolSpec, WorkerRequest, output_json,
    parse_args, spec, subtask_json,
};
use serde::Deserialize;

const TOOL: &str = "RunWorker";

struct RunWorker;

#[derive(Deserialize)]
struct Args {
    piece: String,
    input: String,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "piece": {
                "type": "string",
                "minLength": 1,
                "description": "Name of the piece the worker runs."
            },
            "input": {
                "type": "string",
                "description": "What the worker is asked to do."
            }
        },
        "required": ["piece", "input"],
        "additionalProperties": false
    })
}

impl Guest for RunWorker {
    fn describe() -> Vec<ToolSpec> {
        vec![spec(
            TOOL,
            "Start a worker: a child job that runs `piece` with `input` while this job waits. The worker's questions and the work it hands in are answered and reviewed by this job's human. The result says how the worker ended, with its output and its facts (the work a reviewer accepted).",
            schema(),
        )]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        if call.tool != TOOL {
            return Err(ToolError::unknown_tool(&call));
        }
        let args: Args = parse_args(&call)?;
        match &call.resume {
            None => Ok(Outcome::Park(Park::Worker(WorkerRequest {
                piece: args.piece,
                input: args.input,
            }))),
            Some(Resume::WorkerDone(result)) => Ok(output_json(&subtask_json(result))),
            Some(Resume::Expired) => Err(ToolError::permanent(
                "the worker did not end in time; it was cancelled",
            )),
            Some(other) => Err(ToolError::cannot_resume(TOOL, other)),
        }
    }
}

maestro_guest::export!(RunWorker);
