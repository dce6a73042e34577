//! First-party control-flow tool `RequestTool`: the model asks a human to
//! approve one call of a tool it may not run on its own. The job parks until
//! the human decides; the resumed call tells the model the decision in words
//! it can act on.

use maestro_guest_v0_1::serde_json::{Map, Value, json};
use maestro_guest_v0_1::{
    Call, Guest, Outcome, Park, Resume, ToolError, ToolRequest, ToolSpec, output_json, parse_args,
    spec,
};
use serde::Deserialize;

const TOOL: &str = "RequestTool";

struct RequestTool;

#[derive(Deserialize)]
struct Args {
    tool: String,
    reason: String,
    arguments: Map<String, Value>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "tool": {
                "type": "string",
                "minLength": 1,
                "description": "Name of the tool you want to call."
            },
            "reason": {
                "type": "string",
                "description": "Why you need it, for the human who decides."
            },
            "arguments": {
                "type": "object",
                "description": "The exact arguments you will call the tool with."
            }
        },
        "required": ["tool", "reason", "arguments"],
        "additionalProperties": false
    })
}

fn resume(args: Args, resume: &Resume) -> Result<Outcome, ToolError> {
    let tool = args.tool;
    let result = match resume {
        Resume::Approved => json!({
            "decision": "approved",
            "tool": tool,
            "arguments": args.arguments,
            "message": format!("Approved: call {tool} with exactly these arguments."),
        }),
        Resume::Denied(reason) => json!({
            "decision": "denied",
            "tool": tool,
            "reason": reason,
            "message": format!("Denied: do not call {tool}. Reason: {reason}"),
        }),
        Resume::Expired => json!({
            "decision": "expired",
            "tool": tool,
            "message": format!("Expired: no one approved {tool} in time; do not call it."),
        }),
        other => return Err(ToolError::cannot_resume(TOOL, other)),
    };
    Ok(output_json(&result))
}

impl Guest for RequestTool {
    fn describe() -> Vec<ToolSpec> {
        vec![spec(
            TOOL,
            "Ask a human to approve one call of a tool you are not allowed to call on your own. Give the tool's name, the exact arguments, and your reason. The result says whether the call was approved; only then call the tool, with exactly those arguments.",
            schema(),
        )]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        if call.tool != TOOL {
            return Err(ToolError::unknown_tool(&call));
        }
        let args: Args = parse_args(&call)?;
        if let Some(r) = &call.resume {
            return resume(args, r);
        }
        if args.tool.is_empty() {
            return Err(ToolError::permanent("tool must not be empty"));
        }
        Ok(Outcome::Park(Park::ToolRequest(ToolRequest {
            arguments: Value::Object(args.arguments).to_string(),
            tool: args.tool,
            reason: args.reason,
        })))
    }
}

maestro_guest_v0_1::export!(RequestTool);
