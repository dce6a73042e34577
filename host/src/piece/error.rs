//! Errors of loading (`PieceError`) and linting (`LintError`) a piece.
//!
//! Invariant: every error that comes from a file carries its path, the
//! 1-based line and column, and the field path (`movements[1].rules[0].next`),
//! and prints as `file:line:column: field: message`.

use std::fmt;
use std::path::PathBuf;

use super::model::{Sentinel, SourcePosition};

/// Why a piece file could not be turned into a [`super::Piece`].
#[derive(Debug, thiserror::Error)]
pub enum PieceError {
    /// The file or directory could not be read; there is no line or column to point at.
    #[error("{}: cannot read: {source}", origin.display())]
    Io {
        origin: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed, has an unknown/missing/duplicate key, or a value of the wrong
    /// type or range.
    #[error("{}:{at}: {field}: {message}", origin.display())]
    Parse {
        origin: PathBuf,
        at: SourcePosition,
        /// The YAML key the error is about, or `(document)` when no key applies.
        field: String,
        message: String,
    },
}

impl PieceError {
    pub fn origin(&self) -> &std::path::Path {
        match self {
            PieceError::Io { origin, .. } | PieceError::Parse { origin, .. } => origin,
        }
    }

    /// `None` for I/O errors, which have no position.
    pub fn position(&self) -> Option<SourcePosition> {
        match self {
            PieceError::Io { .. } => None,
            PieceError::Parse { at, .. } => Some(*at),
        }
    }
}

/// What a lint finding is about, for callers that react to particular problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LintKind {
    NoMovements,
    DuplicateMovement,
    /// A movement named like a sentinel could never be told apart from the sentinel.
    SentinelAsMovementName,
    UnknownInitialMovement,
    /// `rules[].next` names a sentinel that only control-flow tools may produce.
    SentinelInRuleNext(Sentinel),
    /// `default_next` names a park sentinel (anything but `COMPLETE` / `ABORT`).
    SentinelInDefaultNext(Sentinel),
    UnknownNextMovement,
    /// A rule parks on `WAIT_SUBTASKS` but the movement has no `default_next` to resume at.
    WaitSubtasksWithoutDefaultNext,
    UnreachableMovement,
    UnknownTool,
    /// `approve` names a tool the movement does not offer.
    ApprovalOfUnofferedTool,
    /// An intake slot's name is not a plain identifier, is taken twice, or is `input`.
    BadIntakeSlot,
    /// `workers` names a piece that is not among the pieces loaded with it.
    UnknownWorkerPiece,
}

/// One problem found by [`super::lint`], pointing at the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintError {
    pub origin: PathBuf,
    pub at: SourcePosition,
    /// Path of the offending field, e.g. `movements[1].rules[0].next`.
    pub field: String,
    pub kind: LintKind,
    pub message: String,
}

impl fmt::Display for LintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.origin.display(),
            self.at,
            self.field,
            self.message
        )
    }
}

impl std::error::Error for LintError {}
