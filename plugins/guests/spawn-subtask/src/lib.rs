//! First-party tool `SpawnSubTask`: start a child job of a piece through the host's
//! `spawn-subtask` capability and return its job id, which `WaitSubTask` (or a rule
//! `next: WAIT_SUBTASKS`) then waits on. Starting a child never waits for it: the child runs as
//! an ordinary job on the host's workers.

use maestro_guest_v0_1::serde_json::{Value, json};
use maestro_guest_v0_1::{
    Call, Guest, Outcome, ToolError, ToolSpec, host, output_json, parse_args, spec,
};
use serde::Deserialize;

const TOOL: &str = "SpawnSubTask";

struct SpawnSubTask;

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
                "description": "Name of the piece the child job runs."
            },
            "input": {
                "type": "string",
                "description": "What the child job is asked to do."
            }
        },
        "required": ["piece", "input"],
        "additionalProperties": false
    })
}

impl Guest for SpawnSubTask {
    fn describe() -> Vec<ToolSpec> {
        vec![spec(
            TOOL,
            "Start a subtask: a child job that runs `piece` with `input` on its own, while this job goes on. Returns the child's job id; wait for children with WaitSubTask.",
            schema(),
        )]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        if call.tool != TOOL {
            return Err(ToolError::unknown_tool(&call));
        }
        if call.resume.is_some() {
            return Err(ToolError::permanent(
                "SpawnSubTask never parks, so it has nothing to resume",
            ));
        }
        let args: Args = parse_args(&call)?;
        let job_id = host::spawn_subtask(&args.piece, &args.input).map_err(ToolError::permanent)?;
        Ok(output_json(&json!({"job_id": job_id, "piece": args.piece})))
    }
}

maestro_guest_v0_1::export!(SpawnSubTask);
