//! What the model is shown for a movement: its tools, the transition tool built from its rules,
//! and the system prompt.
//!
//! Invariant: the transition tool exists exactly when the movement has rules, and its `next`
//! enum lists each rule's target once, in the piece's order; nothing here has side effects.

use super::EngineLimits;
use super::job::JobState;
use super::tools::{TRANSITION_TOOL, ToolCatalog};
use crate::llm::ToolDefinition;
use crate::piece::{Movement, Piece, Sentinel};

pub(super) fn transition_targets(movement: &Movement) -> Vec<String> {
    let mut targets: Vec<String> = Vec::new();
    for rule in &movement.rules {
        if !targets.contains(&rule.next.value) {
            targets.push(rule.next.value.clone());
        }
    }
    targets
}

pub(super) fn available_tools(movement: &Movement) -> String {
    let mut names: Vec<String> = movement
        .tools
        .iter()
        .map(|tool| format!("`{}`", tool.value))
        .collect();
    if !movement.rules.is_empty() {
        names.push(format!("`{TRANSITION_TOOL}`"));
    }
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The movement's tools as the model sees them, plus the transition tool when there are rules.
pub(super) fn tool_definitions(catalog: &ToolCatalog, movement: &Movement) -> Vec<ToolDefinition> {
    let mut tools: Vec<ToolDefinition> = movement
        .tools
        .iter()
        .filter_map(|tool| catalog.spec(&tool.value))
        .map(|spec| ToolDefinition {
            name: spec.name.clone(),
            description: spec.description.clone(),
            parameters: spec.parameters.clone(),
        })
        .collect();
    if movement.rules.is_empty() {
        return tools;
    }
    let mut description = format!(
        "Leave movement `{}` for the next step. Set `next` to the option whose condition holds:",
        movement.name.value
    );
    for rule in &movement.rules {
        description.push_str(&format!(
            "\n- `{}`: {}",
            rule.next.value, rule.condition.value
        ));
        if rule.next.value == Sentinel::WaitSubtasks.as_str() {
            description.push_str(" (the job waits for its subtasks, then continues)");
        }
    }
    tools.push(ToolDefinition {
        name: TRANSITION_TOOL.to_owned(),
        description,
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "next": { "type": "string", "enum": transition_targets(movement) },
                "reason": { "type": "string", "description": "Why this option, in one sentence." }
            },
            "required": ["next"],
            "additionalProperties": false
        }),
    });
    tools
}

pub(super) fn system_prompt(
    piece: &Piece,
    movement: &Movement,
    job: &JobState,
    limits: &EngineLimits,
) -> String {
    let mut prompt = format!("You are running the piece `{}`.", piece.name.value);
    if !piece.description.trim().is_empty() {
        prompt.push_str(&format!(" {}", piece.description.trim()));
    }
    prompt.push_str(&format!(
        "\n\nCurrent movement: `{}` (movement {} of at most {}).\n\n{}",
        movement.name.value,
        job.movements_entered,
        piece.max_movements.value,
        movement.instructions.trim()
    ));
    let ending = match (movement.rules.is_empty(), movement.default_next.as_ref()) {
        (false, _) => format!(
            "When this movement's work is done, call `{TRANSITION_TOOL}` with the next step."
        ),
        (true, Some(next)) => format!(
            "When this movement's work is done, reply with text only; the piece then continues \
             with `{}`.",
            next.value
        ),
        (true, None) => {
            "This movement ends only through a tool call (for example `complete`).".to_owned()
        }
    };
    prompt.push_str(&format!(
        "\n\n{ending} You have at most {} model turns in this movement.",
        limits.max_iterations
    ));
    prompt
}
