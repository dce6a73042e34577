//! Pieces: YAML workflows of movements.
//!
//! Invariant: a [`Piece`] that came out of [`parse_piece`] / [`load_piece`] is well-typed and
//! remembers where every value came from (file, line, column), and a piece for which [`lint`]
//! returns no error is safe to run: every `rules[].next` names a movement of the piece or
//! `WAIT_SUBTASKS`, every `default_next` names a movement, `COMPLETE` or `ABORT`, the initial
//! movement exists, movement names are unique, every movement is reachable, and every tool is
//! provided by a known plugin. Sentinels other than `WAIT_SUBTASKS` never appear in `rules[].next`:
//! they are produced by control-flow tools, not by the piece author. [`PieceGraph`] draws a
//! piece.

mod error;
mod graph;
mod lint;
mod load;
mod model;

#[cfg(test)]
mod example_pieces_tests;
#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod lint_tests;

pub use error::{LintError, LintKind, PieceError};
pub use graph::{Edge, EdgeKind, Node, NodeKind, PieceGraph};
pub use lint::{INPUT_SLOT, lint, lint_together};
pub use load::{load_dir, load_piece, parse_piece};
pub use model::{
    AcceptanceMode, DefaultNext, Intake, IntakeSlot, Located, Movement, Next, Piece, Rule,
    Sentinel, SourcePosition,
};
