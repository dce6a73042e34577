//! The example pieces in `pieces/` load and lint clean against the
//! first-party tools.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{lint, lint_together, load_dir};

/// The example pieces live in a `pieces/` folder at the crate root or above it (a workspace),
/// so the test keeps working wherever this module is copied.
fn pieces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("pieces"))
        .find(|dir| dir.join("chat.yaml").is_file())
        .expect("a pieces/ folder with chat.yaml at or above the crate root")
}

#[test]
fn example_pieces_load_and_lint_clean() {
    let known_tools: BTreeSet<String> = [
        "complete",
        "BrowseWeb",
        "RequestTool",
        "WaitSubTask",
        "SpawnSubTask",
        "HandIn",
        "RunWorker",
    ]
    .map(str::to_owned)
    .into();
    let (pieces, errors) = load_dir(pieces_dir());
    assert!(errors.is_empty(), "{errors:#?}");
    let mut names: Vec<&str> = pieces
        .iter()
        .map(|piece| piece.name.value.as_str())
        .collect();
    names.sort_unstable();
    for expected in [
        "approval",
        "chat",
        "commission",
        "report",
        "research",
        "review",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    for piece in &pieces {
        let findings = lint(piece, &known_tools);
        assert!(
            findings.is_empty(),
            "{}: {findings:#?}",
            piece.origin.display()
        );
    }
    let findings = lint_together(&pieces);
    assert!(findings.is_empty(), "{findings:#?}");
}
