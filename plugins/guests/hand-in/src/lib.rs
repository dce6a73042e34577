//! First-party control-flow tool `HandIn`: hand in a piece of work (a report, a plan, a table)
//! as an artifact for review. The job waits until a reviewer accepts it (it becomes a fact that
//! later movements and the parent job see), rejects it, or asks for a revision; where the piece
//! accepts artifacts automatically, the call is resumed at once. Built against
//! `maestro:tool@0.2.0`, whose `park.artifact` says this.

use maestro_guest::serde_json::{Value, json};
use maestro_guest::{
    ArtifactDraft, Call, Guest, Outcome, Park, Resume, Review, ToolError, ToolSpec, Verdict,
    output_json, parse_args, spec,
};
use serde::Deserialize;

const TOOL: &str = "HandIn";

struct HandIn;

#[derive(Deserialize)]
struct Args {
    kind: String,
    title: String,
    #[serde(default = "markdown")]
    media_type: String,
    body: String,
    #[serde(default)]
    revises: Option<String>,
}

fn markdown() -> String {
    "text/markdown".to_owned()
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "kind": {
                "type": "string",
                "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                "description": "What the work is, in one word: report, plan, table, …"
            },
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "media_type": {
                "type": "string",
                "enum": ["text/markdown", "text/plain", "application/json", "text/csv"],
                "description": "How the body is written; text/markdown when omitted."
            },
            "body": {"type": "string", "description": "The work itself."},
            "revises": {
                "type": "string",
                "description": "The id of the artifact this version revises; after a revision was asked for, the host links the new version by itself."
            }
        },
        "required": ["kind", "title", "body"],
        "additionalProperties": false
    })
}

/// What the model reads once the draft was reviewed.
fn verdict_report(review: &Review) -> Value {
    let id = &review.artifact_id;
    match &review.verdict {
        Verdict::Accepted => json!({
            "artifact_id": id,
            "status": "accepted",
            "note": "It is a fact now: cite it by its id."
        }),
        Verdict::Rejected(reason) => json!({
            "artifact_id": id,
            "status": "rejected",
            "reason": reason,
        }),
        Verdict::RevisionRequested(instruction) => json!({
            "artifact_id": id,
            "status": "revision_requested",
            "instruction": instruction,
            "note": "Write a new version that does what the instruction says and hand it in with HandIn."
        }),
    }
}

impl Guest for HandIn {
    fn describe() -> Vec<ToolSpec> {
        vec![spec(
            TOOL,
            "Hand in a piece of work (a report, a plan, a table) for review. The job waits for the reviewer's verdict, which comes back as this tool's result: accepted (the work is a fact now), rejected with a reason, or revision_requested with what to change.",
            schema(),
        )]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        if call.tool != TOOL {
            return Err(ToolError::unknown_tool(&call));
        }
        let args: Args = parse_args(&call)?;
        match &call.resume {
            None => Ok(Outcome::Park(Park::Artifact(ArtifactDraft {
                kind: args.kind,
                title: args.title,
                media_type: args.media_type,
                body: args.body,
                revises: args.revises,
            }))),
            Some(Resume::Reviewed(review)) => Ok(output_json(&verdict_report(review))),
            Some(Resume::Expired) => Err(ToolError::permanent(
                "nobody reviewed the work in time; it is not a fact",
            )),
            Some(other) => Err(ToolError::cannot_resume(TOOL, other)),
        }
    }
}

maestro_guest::export!(HandIn);
