//! First-party control-flow tool `complete`: the model's way to end a job
//! (`done`, `aborted`) or to stop and ask the user a question
//! (`needs_user_input`), after which the job parks until the answer arrives
//! and this call is resumed with it.

use maestro_guest_v0_1::serde_json::{Value, json};
use maestro_guest_v0_1::{
    Call, Guest, Outcome, Park, Resume, Terminal, ToolError, ToolSpec, output_json, parse_args,
    spec,
};
use serde::Deserialize;

const TOOL: &str = "complete";

struct Complete;

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Done,
    Aborted,
    NeedsUserInput,
}

#[derive(Deserialize)]
struct Args {
    status: Status,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    question: Option<String>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": {
                "type": "string",
                "enum": ["done", "aborted", "needs_user_input"],
                "description": "done: the task is finished. aborted: the task cannot be finished. needs_user_input: you cannot go on without the user's answer to `question`."
            },
            "summary": {
                "type": "string",
                "description": "For done: what was achieved. For aborted: why the task cannot be done."
            },
            "question": {
                "type": "string",
                "description": "For needs_user_input: the question to ask the user. Required then."
            }
        },
        "required": ["status"],
        "additionalProperties": false
    })
}

fn resume(args: &Args, resume: &Resume) -> Result<Outcome, ToolError> {
    let question = args.question.as_deref().unwrap_or_default();
    match resume {
        Resume::Answered(answer) => Ok(output_json(
            &json!({"question": question, "answer": answer}),
        )),
        Resume::Expired => Ok(output_json(
            &json!({"question": question, "answer": null, "expired": true}),
        )),
        other => Err(ToolError::cannot_resume(TOOL, other)),
    }
}

impl Guest for Complete {
    fn describe() -> Vec<ToolSpec> {
        vec![spec(
            TOOL,
            "End the task, or ask the user a question. Call with status done (and a summary) when the task is finished, aborted (and a summary saying why) when it cannot be done, or needs_user_input (and a question) when you cannot continue without the user's answer; the answer comes back as this tool's result.",
            schema(),
        )]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        if call.tool != TOOL {
            return Err(ToolError::unknown_tool(&call));
        }
        let args: Args = parse_args(&call)?;
        if let Some(r) = &call.resume {
            return resume(&args, r);
        }
        match args.status {
            Status::Done => Ok(Outcome::Terminal(Terminal::Complete(
                args.summary.unwrap_or_default(),
            ))),
            Status::Aborted => Ok(Outcome::Terminal(Terminal::Abort(
                args.summary.unwrap_or_default(),
            ))),
            Status::NeedsUserInput => match args.question {
                Some(question) if !question.trim().is_empty() => {
                    Ok(Outcome::Park(Park::Ask(question)))
                }
                _ => Err(ToolError::permanent(
                    "question is required when status is needs_user_input",
                )),
            },
        }
    }
}

maestro_guest_v0_1::export!(Complete);
