//! Lint: the rules a piece must obey before it may run.
//!
//! Invariant: lint reads the model and never fails; it returns every problem
//! it finds, ordered by position, and an empty list means the piece may run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::error::{LintError, LintKind};
use super::model::{DefaultNext, Next, Piece, Sentinel, SourcePosition};

/// Checks a parsed piece against the rules a runnable piece must obey (see the module
/// invariant). `known_tools` are the tool names the loaded plugins provide. Findings are
/// ordered by position in the file; an empty result means the piece may run.
pub fn lint(piece: &Piece, known_tools: &BTreeSet<String>) -> Vec<LintError> {
    let mut findings = Findings {
        piece,
        errors: Vec::new(),
    };
    let first_index_by_name = check_movement_names(&mut findings);
    if piece.movements.is_empty() {
        findings.report(
            piece.movements_at,
            "movements".to_owned(),
            LintKind::NoMovements,
            "a piece needs at least one movement".to_owned(),
        );
    } else {
        check_initial_movement(&mut findings, &first_index_by_name);
    }
    check_tools(&mut findings, known_tools);
    check_approvals(&mut findings);
    check_intake(&mut findings);
    check_transitions(&mut findings, &first_index_by_name);
    check_reachability(&mut findings, &first_index_by_name);

    let mut errors = findings.errors;
    errors.sort_by_key(|error| error.at);
    errors
}

struct Findings<'a> {
    piece: &'a Piece,
    errors: Vec<LintError>,
}

impl Findings<'_> {
    fn report(&mut self, at: SourcePosition, field: String, kind: LintKind, message: String) {
        self.errors.push(LintError {
            origin: self.piece.origin.clone(),
            at,
            field,
            kind,
            message,
        });
    }
}

/// Returns the index of the first movement bearing each name: later duplicates are reported
/// and ignored, so every other check sees one movement per name.
fn check_movement_names(findings: &mut Findings<'_>) -> BTreeMap<String, usize> {
    let mut first_index_by_name: BTreeMap<String, usize> = BTreeMap::new();
    for (index, movement) in findings.piece.movements.iter().enumerate() {
        let name = &movement.name;
        let field = format!("movements[{index}].name");
        if let Some(sentinel) = Sentinel::parse(&name.value) {
            findings.report(
                name.at,
                field.clone(),
                LintKind::SentinelAsMovementName,
                format!("movement name `{sentinel}` is reserved: it is an engine sentinel"),
            );
        }
        if let Some(first) = first_index_by_name.get(&name.value) {
            let first_at = findings.piece.movements[*first].name.at;
            findings.report(
                name.at,
                field,
                LintKind::DuplicateMovement,
                format!(
                    "duplicate movement name `{}` (first defined at {first_at})",
                    name.value
                ),
            );
        } else {
            first_index_by_name.insert(name.value.clone(), index);
        }
    }
    first_index_by_name
}

fn check_initial_movement(findings: &mut Findings<'_>, movements: &BTreeMap<String, usize>) {
    let initial = &findings.piece.initial_movement;
    if movements.contains_key(&initial.value) {
        return;
    }
    let hint = if Sentinel::parse(&initial.value).is_some() {
        "; a piece must start in a movement, not a sentinel"
    } else {
        ""
    };
    findings.report(
        initial.at,
        "initial_movement".to_owned(),
        LintKind::UnknownInitialMovement,
        format!(
            "initial movement `{}` is not a movement of this piece{hint}",
            initial.value
        ),
    );
}

fn check_tools(findings: &mut Findings<'_>, known_tools: &BTreeSet<String>) {
    for (index, movement) in findings.piece.movements.iter().enumerate() {
        for (tool_index, tool) in movement.tools.iter().enumerate() {
            if !known_tools.contains(&tool.value) {
                findings.report(
                    tool.at,
                    format!("movements[{index}].tools[{tool_index}]"),
                    LintKind::UnknownTool,
                    format!("no known plugin provides tool `{}`", tool.value),
                );
            }
        }
    }
}

/// Checks what pieces say of each other: every `workers` entry names one of `pieces`. (A
/// piece alone cannot tell; a folder of them can.)
pub fn lint_together(pieces: &[Piece]) -> Vec<LintError> {
    let names: BTreeSet<&str> = pieces.iter().map(|p| p.name.value.as_str()).collect();
    let mut errors = Vec::new();
    for piece in pieces {
        let mut findings = Findings {
            piece,
            errors: Vec::new(),
        };
        for (index, movement) in piece.movements.iter().enumerate() {
            for (worker_index, worker) in movement.workers.iter().enumerate() {
                if !names.contains(worker.value.as_str()) {
                    findings.report(
                        worker.at,
                        format!("movements[{index}].workers[{worker_index}]"),
                        LintKind::UnknownWorkerPiece,
                        format!(
                            "no piece named `{}` is loaded beside this one, so it cannot run \
                             as a worker",
                            worker.value
                        ),
                    );
                }
            }
        }
        errors.extend(findings.errors);
    }
    errors
}

fn check_approvals(findings: &mut Findings<'_>) {
    for (index, movement) in findings.piece.movements.iter().enumerate() {
        for (approve_index, tool) in movement.approve.iter().enumerate() {
            if !movement
                .tools
                .iter()
                .any(|offered| offered.value == tool.value)
            {
                findings.report(
                    tool.at,
                    format!("movements[{index}].approve[{approve_index}]"),
                    LintKind::ApprovalOfUnofferedTool,
                    format!(
                        "`{}` is not one of this movement's tools, so no call of it could wait \
                         for approval here",
                        tool.value
                    ),
                );
            }
        }
    }
}

/// The name a job's free-text input takes among the intake's slots.
pub const INPUT_SLOT: &str = "input";

fn check_intake(findings: &mut Findings<'_>) {
    let Some(intake) = &findings.piece.intake else {
        return;
    };
    let mut seen = BTreeSet::new();
    for (index, slot) in intake.slots.iter().enumerate() {
        let name = &slot.name.value;
        let plain = name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let problem = if !plain {
            Some(format!(
                "slot name `{name}` must be lowercase letters, digits and `_`, starting with a \
                 letter"
            ))
        } else if name == INPUT_SLOT {
            Some(format!(
                "`{INPUT_SLOT}` is the job's own input, not a slot to declare"
            ))
        } else if !seen.insert(name.as_str()) {
            Some(format!("slot `{name}` is declared twice"))
        } else {
            None
        };
        if let Some(message) = problem {
            findings.report(
                slot.name.at,
                format!("intake.slots[{index}].name"),
                LintKind::BadIntakeSlot,
                message,
            );
        }
    }
}

fn check_transitions(findings: &mut Findings<'_>, movements: &BTreeMap<String, usize>) {
    for (index, movement) in findings.piece.movements.iter().enumerate() {
        for (rule_index, rule) in movement.rules.iter().enumerate() {
            let next = &rule.next;
            let field = format!("movements[{index}].rules[{rule_index}].next");
            match rule.target() {
                Err(sentinel) => findings.report(
                    next.at,
                    field,
                    LintKind::SentinelInRuleNext(sentinel),
                    format!(
                        "`{sentinel}` is a sentinel; sentinels come from control-flow tools, \
                         not rules (rules[].next may name a movement of this piece or WAIT_SUBTASKS)"
                    ),
                ),
                Ok(Next::Movement(name)) if !movements.contains_key(&name) => findings.report(
                    next.at,
                    field,
                    LintKind::UnknownNextMovement,
                    format!("next `{name}` is not a movement of this piece"),
                ),
                // A rule-based wait resumes at default_next (DESIGN §5); without one the job
                // would park with nowhere to come back to.
                Ok(Next::WaitSubtasks) if movement.default_next.is_none() => findings.report(
                    next.at,
                    field,
                    LintKind::WaitSubtasksWithoutDefaultNext,
                    "WAIT_SUBTASKS resumes at default_next, but this movement has no default_next"
                        .to_owned(),
                ),
                Ok(_) => {}
            }
        }
        let Some(default_next) = &movement.default_next else {
            continue;
        };
        let field = format!("movements[{index}].default_next");
        match movement.default_target() {
            Some(Err(sentinel)) => findings.report(
                default_next.at,
                field,
                LintKind::SentinelInDefaultNext(sentinel),
                format!(
                    "`{sentinel}` parks the job and may not be a default_next; park sentinels \
                     come from control-flow tools (default_next may name a movement, COMPLETE or ABORT)"
                ),
            ),
            Some(Ok(DefaultNext::Movement(name))) if !movements.contains_key(&name) => findings
                .report(
                    default_next.at,
                    field,
                    LintKind::UnknownNextMovement,
                    format!("default_next `{name}` is not a movement of this piece"),
                ),
            _ => {}
        }
    }
}

fn check_reachability(findings: &mut Findings<'_>, movements: &BTreeMap<String, usize>) {
    let piece = findings.piece;
    // With no valid start every movement would be "unreachable"; that is one error, already
    // reported, not one per movement.
    let Some(&start) = movements.get(&piece.initial_movement.value) else {
        return;
    };
    let mut reached = BTreeSet::from([start]);
    let mut queue = VecDeque::from([start]);
    while let Some(index) = queue.pop_front() {
        let movement = &piece.movements[index];
        let rule_targets = movement
            .rules
            .iter()
            .filter_map(|rule| match rule.target() {
                Ok(Next::Movement(name)) => Some(name),
                _ => None,
            });
        let default_target = match movement.default_target() {
            Some(Ok(DefaultNext::Movement(name))) => Some(name),
            _ => None,
        };
        for name in rule_targets.chain(default_target) {
            if let Some(&target) = movements.get(&name)
                && reached.insert(target)
            {
                queue.push_back(target);
            }
        }
    }
    for (name, &index) in movements {
        if !reached.contains(&index) {
            findings.report(
                piece.movements[index].name.at,
                format!("movements[{index}].name"),
                LintKind::UnreachableMovement,
                format!(
                    "movement `{name}` is unreachable from initial movement `{}`",
                    piece.initial_movement.value
                ),
            );
        }
    }
}
