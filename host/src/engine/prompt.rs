//! What the model is shown for a movement: its tools, the transition tool built from its rules,
//! and the system prompt.
//!
//! Invariant: the transition tool exists exactly when the movement has rules, and its `next`
//! enum lists each rule's target once, in the piece's order; the only artifacts the model is
//! shown are the session's facts (accepted artifacts); nothing here has side effects.

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
    let slots = job.phase_session().map(|session| session.slots());
    prompt.push_str(&format!(
        "\n\nCurrent movement: `{}` (movement {} of at most {}).\n\n{}",
        movement.name.value,
        job.movements_entered,
        piece.max_movements.value,
        with_slots(movement.instructions.trim(), slots)
    ));
    let facts = job
        .phase_session()
        .map(crate::phase::RuntimeSession::facts)
        .unwrap_or_default();
    if !facts.is_empty() {
        prompt.push_str(
            "\n\nFacts (artifacts a reviewer accepted; cite them by id, and treat nothing \
             else as accepted):",
        );
        let mut budget = FACTS_BUDGET;
        for fact in &facts {
            let body = fact.content();
            let shown = cut(body, budget);
            budget -= shown.len();
            prompt.push_str(&format!(
                "\n\n[{}] {} ({}, {}):\n{}",
                fact.id(),
                fact.title(),
                fact.kind(),
                fact.media_type(),
                shown
            ));
            if shown.len() < body.len() {
                prompt.push_str(&format!(
                    "\n(… {} more bytes not shown)",
                    body.len() - shown.len()
                ));
            }
        }
    }
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

/// Bytes of fact bodies one system prompt carries at most.
const FACTS_BUDGET: usize = 64 << 10;

/// The longest prefix of `text` within `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `{{name}}` in a movement's instructions becomes the intake slot of that name; other text,
/// and a name the intake has no slot for, is left as it is.
fn with_slots(
    instructions: &str,
    slots: Option<&std::collections::BTreeMap<String, String>>,
) -> String {
    let Some(slots) = slots.filter(|slots| !slots.is_empty()) else {
        return instructions.to_owned();
    };
    let mut out = String::with_capacity(instructions.len());
    let mut rest = instructions;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        match after.find("}}") {
            Some(close) => {
                let name = after[..close].trim();
                match slots.get(name) {
                    Some(value) => out.push_str(value),
                    None => out.push_str(&rest[open..open + 2 + close + 2]),
                }
                rest = &after[close + 2..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fill_in_the_instructions_they_name() {
        let slots = std::collections::BTreeMap::from([
            ("topic".to_owned(), "tides".to_owned()),
            ("audience".to_owned(), "pupils".to_owned()),
        ]);
        assert_eq!(
            with_slots(
                "Write on {{topic}} for {{ audience }}; {{unknown}} stays, {{ unclosed",
                Some(&slots)
            ),
            "Write on tides for pupils; {{unknown}} stays, {{ unclosed"
        );
        assert_eq!(with_slots("no slots {{topic}}", None), "no slots {{topic}}");
    }

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut("short", 10), "short");
    }
}
