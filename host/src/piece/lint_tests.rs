//! One test per lint rule, each asserting the exact line and column.

use std::collections::BTreeSet;

use super::{LintError, LintKind, Sentinel, SourcePosition, lint, parse_piece};

const ORIGIN: &str = "pieces/review.yaml";

// Line numbers in the assertions below refer to this text.
const VALID: &str = "\
name: review
initial_movement: plan
max_movements: 10
movements:
  - name: plan
    instructions: Plan the work.
    tools: [complete]
    rules:
      - condition: planned
        next: act
    default_next: act
  - name: act
    instructions: Do it.
    rules:
      - condition: needs children
        next: WAIT_SUBTASKS
    default_next: COMPLETE
";

fn known_tools() -> BTreeSet<String> {
    ["complete", "WaitSubTask"].map(str::to_owned).into()
}

fn lint_yaml(yaml: &str) -> Vec<LintError> {
    let piece = parse_piece(yaml, ORIGIN).expect("test piece parses");
    lint(&piece, &known_tools())
}

fn mutated(from: &str, to: &str) -> String {
    assert!(VALID.contains(from), "`{from}` not in the test piece");
    VALID.replacen(from, to, 1)
}

fn at(line: u64, column: u64) -> SourcePosition {
    SourcePosition { line, column }
}

/// Asserts exactly one finding and returns it.
fn single(errors: Vec<LintError>) -> LintError {
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.into_iter().next().expect("one error")
}

#[test]
fn valid_multi_movement_piece_passes() {
    assert_eq!(lint_yaml(VALID), []);
}

#[test]
fn every_forbidden_sentinel_in_rule_next_is_rejected_at_its_line() {
    for sentinel in Sentinel::ALL
        .into_iter()
        .filter(|sentinel| *sentinel != Sentinel::WaitSubtasks)
    {
        let yaml = mutated("next: act", &format!("next: {sentinel}"));
        let error = single(lint_yaml(&yaml));
        assert_eq!(error.kind, LintKind::SentinelInRuleNext(sentinel));
        assert_eq!(error.at, at(10, 15));
        assert_eq!(error.field, "movements[0].rules[0].next");
        assert!(
            error
                .message
                .contains("sentinels come from control-flow tools, not rules"),
            "{}",
            error.message
        );
    }
}

#[test]
fn unknown_movement_in_rule_next_is_rejected() {
    let error = single(lint_yaml(&mutated("next: act", "next: nowhere")));
    assert_eq!(error.kind, LintKind::UnknownNextMovement);
    assert_eq!(error.at, at(10, 15));
}

#[test]
fn unknown_movement_in_default_next_is_rejected() {
    let error = single(lint_yaml(&mutated(
        "default_next: act",
        "default_next: nowhere",
    )));
    assert_eq!(error.kind, LintKind::UnknownNextMovement);
    assert_eq!(error.at, at(11, 19));
    assert_eq!(error.field, "movements[0].default_next");
}

#[test]
fn default_next_may_abort() {
    assert_eq!(
        lint_yaml(&mutated("default_next: COMPLETE", "default_next: ABORT")),
        []
    );
}

#[test]
fn park_sentinels_in_default_next_are_rejected() {
    for sentinel in [
        Sentinel::WaitSubtasks,
        Sentinel::Ask,
        Sentinel::WaitingHumanBrowser,
        Sentinel::WaitingHumanToolRequest,
    ] {
        let yaml = mutated(
            "default_next: COMPLETE",
            &format!("default_next: {sentinel}"),
        );
        let error = single(lint_yaml(&yaml));
        assert_eq!(error.kind, LintKind::SentinelInDefaultNext(sentinel));
        assert_eq!(error.at, at(17, 19));
    }
}

#[test]
fn wait_subtasks_rule_needs_a_default_next_to_resume_at() {
    let error = single(lint_yaml(&mutated("    default_next: COMPLETE\n", "")));
    assert_eq!(error.kind, LintKind::WaitSubtasksWithoutDefaultNext);
    assert_eq!(error.at, at(16, 15));
}

#[test]
fn unknown_initial_movement_is_rejected_without_cascading() {
    let error = single(lint_yaml(&mutated(
        "initial_movement: plan",
        "initial_movement: nope",
    )));
    assert_eq!(error.kind, LintKind::UnknownInitialMovement);
    assert_eq!(error.at, at(2, 19));
    assert_eq!(error.field, "initial_movement");
}

#[test]
fn sentinel_as_initial_movement_is_rejected() {
    let error = single(lint_yaml(&mutated(
        "initial_movement: plan",
        "initial_movement: COMPLETE",
    )));
    assert_eq!(error.kind, LintKind::UnknownInitialMovement);
    assert!(
        error.message.contains("not a sentinel"),
        "{}",
        error.message
    );
}

#[test]
fn piece_without_movements_is_rejected() {
    let yaml = "name: empty\ninitial_movement: a\nmax_movements: 1\nmovements: []\n";
    let error = single(lint_yaml(yaml));
    assert_eq!(error.kind, LintKind::NoMovements);
    assert_eq!(error.at, at(4, 12));
}

#[test]
fn duplicate_movement_name_is_rejected_at_the_second_one() {
    let errors = lint_yaml(&mutated("  - name: act", "  - name: plan"));
    let duplicates: Vec<_> = errors
        .iter()
        .filter(|error| error.kind == LintKind::DuplicateMovement)
        .collect();
    assert_eq!(duplicates.len(), 1, "{errors:#?}");
    assert_eq!(duplicates[0].at, at(12, 11));
    assert!(duplicates[0].message.contains("first defined at 5:11"));
}

#[test]
fn sentinel_as_movement_name_is_rejected() {
    let yaml = mutated("  - name: act", "  - name: ABORT")
        .replace("next: act", "next: plan")
        .replace("default_next: act", "default_next: COMPLETE");
    let errors = lint_yaml(&yaml);
    let reserved: Vec<_> = errors
        .iter()
        .filter(|error| error.kind == LintKind::SentinelAsMovementName)
        .collect();
    assert_eq!(reserved.len(), 1, "{errors:#?}");
    assert_eq!(reserved[0].at, at(12, 11));
}

#[test]
fn unreachable_movement_is_rejected_at_its_name() {
    let yaml = format!("{VALID}  - name: orphan\n    instructions: Nobody calls me.\n");
    let error = single(lint_yaml(&yaml));
    assert_eq!(error.kind, LintKind::UnreachableMovement);
    assert_eq!(error.at, at(18, 11));
    assert_eq!(error.field, "movements[2].name");
}

#[test]
fn unknown_tool_is_rejected_at_its_position() {
    let error = single(lint_yaml(&mutated(
        "tools: [complete]",
        "tools: [complete, Teleport]",
    )));
    assert_eq!(error.kind, LintKind::UnknownTool);
    assert_eq!(error.at, at(7, 23));
    assert_eq!(error.field, "movements[0].tools[1]");
}

#[test]
fn display_names_file_line_column_and_field() {
    let error = single(lint_yaml(&mutated("next: act", "next: ASK")));
    assert!(
        error.to_string().starts_with(
            "pieces/review.yaml:10:15: movements[0].rules[0].next: `ASK` is a sentinel"
        ),
        "{error}"
    );
}
