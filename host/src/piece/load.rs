//! Reading pieces from YAML (serde-saphyr).
//!
//! Invariant: the YAML shape types stay private to this file; what leaves it
//! is the public model with a position on every value lint may point at, or
//! a `PieceError` with file, line, column and field. Unknown and duplicate
//! keys are errors, never ignored.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::{MessageFormatter, Spanned};

use super::error::PieceError;
use super::model::{
    AcceptanceMode, Intake, IntakeSlot, Located, Movement, Piece, Rule, SourcePosition,
};

// The YAML shape, kept private so the public model does not depend on serde-saphyr's types.
// `Spanned` records where each value sits so lint can point at it later.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPiece {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    initial_movement: Spanned<String>,
    // Signed so that `0` and `-3` reach our own range check, whose message names the field.
    max_movements: Spanned<i64>,
    movements: Spanned<Vec<RawMovement>>,
    #[serde(default)]
    intake: Option<Spanned<RawIntake>>,
    #[serde(default)]
    acceptance: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIntake {
    prompt: String,
    #[serde(default)]
    slots: Vec<RawSlot>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlot {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    required: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMovement {
    name: Spanned<String>,
    instructions: String,
    #[serde(default)]
    tools: Vec<Spanned<String>>,
    #[serde(default)]
    rules: Vec<RawRule>,
    #[serde(default)]
    default_next: Option<Spanned<String>>,
    #[serde(default)]
    approve: Vec<Spanned<String>>,
    #[serde(default)]
    acceptance: Option<Spanned<String>>,
    #[serde(default)]
    workers: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    condition: Spanned<String>,
    next: Spanned<String>,
}

/// Reads and parses one piece file.
pub fn load_piece(path: impl AsRef<Path>) -> Result<Piece, PieceError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| PieceError::Io {
        origin: path.to_path_buf(),
        source,
    })?;
    parse_piece(&text, path)
}

/// Parses a piece from YAML text; `origin` names the source in the piece and in every error.
pub fn parse_piece(text: &str, origin: impl AsRef<Path>) -> Result<Piece, PieceError> {
    let origin = origin.as_ref().to_path_buf();
    let mut options = serde_saphyr::Options::default();
    // We render our own `file:line:column: field: message`; a snippet would duplicate it.
    options.with_snippet = false;
    let raw: RawPiece = serde_saphyr::from_str_with_options(text, options)
        .map_err(|error| parse_error(&origin, text, &error))?;
    into_piece(raw, origin)
}

/// Loads every `*.yaml` / `*.yml` file directly inside `dir`, in file-name order. A broken file
/// does not stop the others from loading.
pub fn load_dir(dir: impl AsRef<Path>) -> (Vec<Piece>, Vec<PieceError>) {
    let dir = dir.as_ref();
    let mut pieces = Vec::new();
    let mut errors = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(source) => {
            errors.push(PieceError::Io {
                origin: dir.to_path_buf(),
                source,
            });
            return (pieces, errors);
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) if is_piece_file(&entry.path()) => paths.push(entry.path()),
            Ok(_) => {}
            Err(source) => errors.push(PieceError::Io {
                origin: dir.to_path_buf(),
                source,
            }),
        }
    }
    paths.sort();
    for path in paths {
        match load_piece(&path) {
            Ok(piece) => pieces.push(piece),
            Err(error) => errors.push(error),
        }
    }
    (pieces, errors)
}

fn is_piece_file(path: &Path) -> bool {
    path.is_file()
        && path
            .extension()
            .and_then(|extension| extension.to_str())
            .is_some_and(|extension| extension == "yaml" || extension == "yml")
}

fn into_piece(raw: RawPiece, origin: PathBuf) -> Result<Piece, PieceError> {
    let max_movements_at = position(&raw.max_movements);
    let max_movements = u32::try_from(raw.max_movements.value)
        .ok()
        .filter(|limit| *limit > 0)
        .ok_or_else(|| PieceError::Parse {
            origin: origin.clone(),
            at: max_movements_at,
            field: "max_movements".to_owned(),
            message: format!(
                "must be a positive integer no larger than {}, got {}",
                u32::MAX,
                raw.max_movements.value
            ),
        })?;
    let acceptance = match &raw.acceptance {
        Some(mode) => acceptance(&origin, "acceptance", mode)?,
        None => AcceptanceMode::default(),
    };
    let intake = raw.intake.map(|intake| Intake {
        at: position(&intake),
        prompt: intake.value.prompt,
        slots: intake
            .value
            .slots
            .into_iter()
            .map(|slot| IntakeSlot {
                name: located(slot.name),
                description: slot.description,
                required: slot.required,
            })
            .collect(),
    });
    let movements_at = position(&raw.movements);
    let movements = raw
        .movements
        .value
        .into_iter()
        .enumerate()
        .map(|(index, movement)| into_movement(&origin, index, movement))
        .collect::<Result<_, _>>()?;
    Ok(Piece {
        name: located(raw.name),
        description: raw.description,
        initial_movement: located(raw.initial_movement),
        max_movements: Located::new(max_movements, max_movements_at),
        movements_at,
        movements,
        intake,
        acceptance,
        origin,
    })
}

/// `auto` or `user_confirmed`, or an error naming the field and both choices.
fn acceptance(
    origin: &Path,
    field: &str,
    mode: &Spanned<String>,
) -> Result<AcceptanceMode, PieceError> {
    match mode.value.as_str() {
        "auto" => Ok(AcceptanceMode::Auto),
        "user_confirmed" => Ok(AcceptanceMode::UserConfirmed),
        other => Err(PieceError::Parse {
            origin: origin.to_path_buf(),
            at: position(mode),
            field: field.to_owned(),
            message: format!(
                "must be `auto` (accepted as handed in) or `user_confirmed` (a human reviews \
                 it), got `{other}`"
            ),
        }),
    }
}

fn into_movement(origin: &Path, index: usize, raw: RawMovement) -> Result<Movement, PieceError> {
    let acceptance = raw
        .acceptance
        .as_ref()
        .map(|mode| acceptance(origin, &format!("movements[{index}].acceptance"), mode))
        .transpose()?;
    Ok(Movement {
        name: located(raw.name),
        instructions: raw.instructions,
        tools: raw.tools.into_iter().map(located).collect(),
        rules: raw
            .rules
            .into_iter()
            .map(|rule| Rule {
                condition: located(rule.condition),
                next: located(rule.next),
            })
            .collect(),
        default_next: raw.default_next.map(located),
        approve: raw.approve.into_iter().map(located).collect(),
        acceptance,
        workers: raw.workers.into_iter().map(located).collect(),
    })
}

fn position<T>(spanned: &Spanned<T>) -> SourcePosition {
    SourcePosition {
        line: spanned.referenced.line(),
        column: spanned.referenced.column(),
    }
}

fn located<T>(spanned: Spanned<T>) -> Located<T> {
    let at = position(&spanned);
    Located::new(spanned.value, at)
}

fn parse_error(origin: &Path, text: &str, error: &serde_saphyr::Error) -> PieceError {
    let error = error.without_snippet();
    // The default formatter gives the message without the "at line X, column Y" suffix that
    // `Display` appends, since our own prefix already carries the position.
    let message = serde_saphyr::DefaultMessageFormatter
        .format_message(error)
        .escape_debug()
        .to_string();
    let at = error
        .location()
        .map(|location| SourcePosition {
            line: location.line(),
            column: location.column(),
        })
        .unwrap_or(SourcePosition { line: 1, column: 1 });
    let field = field_named_in(&message)
        .or_else(|| key_near(text, at))
        .unwrap_or_else(|| "(document)".to_owned());
    PieceError::Parse {
        origin: origin.to_path_buf(),
        at,
        field,
        message,
    }
}

/// serde names the field in "unknown field `x`" / "missing field `x`"; that beats guessing.
fn field_named_in(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("missing field `"))?;
    rest.split('`').next().map(str::to_owned)
}

/// serde-saphyr errors carry a position but no key path, so the field is recovered from the
/// source: the key on the error's line, or else the nearest less-indented key above it (the
/// owner of a block sequence or nested mapping the error sits in).
fn key_near(text: &str, at: SourcePosition) -> Option<String> {
    let lines = yaml_lines(text);
    let index = usize::try_from(at.line).ok()?.checked_sub(1)?;
    let error_line = lines.get(index)?;
    if let Some(key) = key_of_line(error_line) {
        return Some(key);
    }
    let error_indent = indentation(error_line);
    lines[..index]
        .iter()
        .rev()
        .filter(|line| indentation(line) < error_indent)
        .find_map(|line| key_of_line(line))
}

/// The lines of `text` as YAML counts them (and so the positions of its errors): a line ends
/// at `\n`, `\r\n` or a lone `\r`.
fn yaml_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while let Some(end) = rest.find(['\r', '\n']) {
        lines.push(&rest[..end]);
        let width = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + width..];
    }
    lines.push(rest);
    lines
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn key_of_line(line: &str) -> Option<String> {
    let content = line.trim_start().trim_start_matches("- ").trim_start();
    let (key, _) = content.split_once(':')?;
    let is_plain_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    is_plain_key.then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "pieces/test.yaml";

    fn parse_failure(yaml: &str) -> (SourcePosition, String, String) {
        match parse_piece(yaml, ORIGIN) {
            Err(PieceError::Parse {
                origin,
                at,
                field,
                message,
            }) => {
                assert_eq!(origin, Path::new(ORIGIN));
                (at, field, message)
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    const HEADER: &str = "name: p\ninitial_movement: a\nmax_movements: 5\n";

    #[test]
    fn an_error_in_a_file_with_lone_carriage_returns_names_the_line_and_field_yaml_counts() {
        // Found by the piece_yaml fuzz target: YAML ends a line at a lone `\r`, `str::lines`
        // does not, so the field was looked for on the wrong line.
        let yaml = "name: p\ninitial_movement: a\nmax_movements: many\nmovements: []\n";
        let expected = parse_failure(yaml);
        assert_eq!(expected.0.line, 3);
        assert_eq!(expected.1, "max_movements");
        for line_end in ["\r", "\r\n"] {
            assert_eq!(
                parse_failure(&yaml.replace('\n', line_end)),
                expected,
                "{line_end:?}"
            );
        }
        assert_eq!(yaml_lines("a\rb\r\nc\n\nd"), ["a", "b", "c", "", "d"]);
    }

    #[test]
    fn parses_positions_of_every_located_value() {
        let yaml = format!(
            "{HEADER}movements:\n  - name: a\n    instructions: do it\n    tools: [complete]\n    rules:\n      - condition: done\n        next: a\n    default_next: COMPLETE\n"
        );
        let piece = parse_piece(&yaml, ORIGIN).expect("valid piece");
        assert_eq!(piece.name.at, SourcePosition { line: 1, column: 7 });
        assert_eq!(piece.max_movements.value, 5);
        assert_eq!(piece.description, "");
        let movement = &piece.movements[0];
        assert_eq!(
            movement.name.at,
            SourcePosition {
                line: 5,
                column: 11
            }
        );
        assert_eq!(
            movement.tools[0].at,
            SourcePosition {
                line: 7,
                column: 13
            }
        );
        assert_eq!(
            movement.rules[0].next.at,
            SourcePosition {
                line: 10,
                column: 15
            }
        );
        let default_next = movement.default_next.as_ref().expect("default_next");
        assert_eq!(
            default_next.at,
            SourcePosition {
                line: 11,
                column: 19
            }
        );
    }

    #[test]
    fn unknown_key_is_rejected_with_its_position_and_name() {
        let yaml =
            format!("{HEADER}movements:\n  - name: a\n    instructions: x\n    colour: red\n");
        let (at, field, message) = parse_failure(&yaml);
        assert_eq!(at, SourcePosition { line: 7, column: 5 });
        assert_eq!(field, "colour");
        assert!(message.contains("unknown field"), "{message}");
    }

    #[test]
    fn missing_key_names_the_field() {
        let yaml = format!("{HEADER}movements:\n  - name: a\n");
        let (at, field, _) = parse_failure(&yaml);
        assert_eq!(at, SourcePosition { line: 5, column: 5 });
        assert_eq!(field, "instructions");
    }

    #[test]
    fn max_movements_must_be_positive() {
        for (value, text) in [(0, "0"), (-3, "-3")] {
            let yaml =
                format!("name: p\ninitial_movement: a\nmax_movements: {text}\nmovements: []\n");
            let (at, field, message) = parse_failure(&yaml);
            assert_eq!(
                at,
                SourcePosition {
                    line: 3,
                    column: 16
                }
            );
            assert_eq!(field, "max_movements");
            assert!(message.contains(&format!("got {value}")), "{message}");
        }
    }

    #[test]
    fn wrong_type_names_the_key_on_its_line() {
        let yaml = "name: p\ninitial_movement: a\nmax_movements: many\nmovements: []\n";
        let (at, field, _) = parse_failure(yaml);
        assert_eq!(at.line, 3);
        assert_eq!(field, "max_movements");
    }

    #[test]
    fn wrong_type_in_a_block_sequence_names_its_owner() {
        let yaml = format!(
            "{HEADER}movements:\n  - name: a\n    instructions: x\n    tools:\n      - [nested]\n"
        );
        let (at, field, _) = parse_failure(&yaml);
        assert_eq!(at.line, 8);
        assert_eq!(field, "tools");
    }

    #[test]
    fn duplicate_key_is_rejected() {
        let yaml = format!("{HEADER}name: q\nmovements: []\n");
        let (at, field, _) = parse_failure(&yaml);
        assert_eq!(at, SourcePosition { line: 4, column: 1 });
        assert_eq!(field, "name");
    }

    #[test]
    fn error_display_names_file_line_column_and_field() {
        let error = parse_piece("name: p\nbogus: 1\n", ORIGIN).expect_err("unknown key");
        assert_eq!(
            error.to_string().split(": ").take(2).collect::<Vec<_>>(),
            ["pieces/test.yaml:2:1", "bogus"]
        );
    }

    #[test]
    fn load_dir_loads_yaml_and_yml_and_reports_broken_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = format!("{HEADER}movements:\n  - name: a\n    instructions: x\n");
        std::fs::write(dir.path().join("a.yaml"), &good).expect("write");
        std::fs::write(dir.path().join("b.yml"), &good).expect("write");
        std::fs::write(dir.path().join("c.yaml"), "name: [\n").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not a piece").expect("write");
        let (pieces, errors) = load_dir(dir.path());
        assert_eq!(pieces.len(), 2);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].origin(), dir.path().join("c.yaml"));
        assert!(errors[0].position().is_some());
    }

    #[test]
    fn load_piece_reports_missing_file_as_io() {
        let error = load_piece("/nonexistent/piece.yaml").expect_err("missing file");
        assert!(matches!(error, PieceError::Io { .. }));
        assert_eq!(error.position(), None);
    }
}
