//! The piece model: pieces, movements, rules, sentinels and typed targets.
//!
//! Invariant: a model value only says what the file said (with where it said
//! it); whether the piece may run is `lint`'s judgement, not the model's.

use std::fmt;
use std::path::PathBuf;

pub use crate::phase::AcceptanceMode;

/// A 1-based line and column in a piece file, as reported by the YAML parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourcePosition {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for SourcePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A value together with the position of the YAML node it was read from, so that lint errors
/// can point at the offending value rather than at the piece as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub at: SourcePosition,
}

impl<T> Located<T> {
    pub fn new(value: T, at: SourcePosition) -> Self {
        Self { value, at }
    }
}

/// A workflow of movements, as written in one YAML file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The file (or the caller-chosen name) the piece was read from; every error names it.
    pub origin: PathBuf,
    pub name: Located<String>,
    /// Free text for humans; optional in YAML and empty when absent.
    pub description: String,
    pub initial_movement: Located<String>,
    /// Guard against endless transitions; always at least 1.
    pub max_movements: Located<u32>,
    /// Where the `movements` sequence starts, so "no movements" can point somewhere.
    pub movements_at: SourcePosition,
    pub movements: Vec<Movement>,
    /// What a human fills in before the piece runs; without one, the job's input is its intake.
    pub intake: Option<Intake>,
    /// How the artifacts the piece's tools and workers hand in become facts [user_confirmed].
    pub acceptance: AcceptanceMode,
}

/// What a piece asks a human for before it runs (the session's `intake`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intake {
    pub prompt: String,
    pub slots: Vec<IntakeSlot>,
    pub at: SourcePosition,
}

/// One named value of an intake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntakeSlot {
    pub name: Located<String>,
    pub description: String,
    pub required: bool,
}

impl Piece {
    /// The first movement with this name (lint reports any later duplicate).
    pub fn movement(&self, name: &str) -> Option<&Movement> {
        self.movements
            .iter()
            .find(|movement| movement.name.value == name)
    }
}

/// One agent-loop stage of a piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement {
    pub name: Located<String>,
    pub instructions: String,
    /// Plugin tool names the LLM may call in this movement (control-flow tools included).
    pub tools: Vec<Located<String>>,
    pub rules: Vec<Rule>,
    /// Where to go when no rule fires, and where a rule-based `WAIT_SUBTASKS` resumes.
    pub default_next: Option<Located<String>>,
    /// Tools of this movement whose every call waits for a human's approval before it runs,
    /// like a policy's `require_approval` (a worker's start, say).
    pub approve: Vec<Located<String>>,
    /// Overrides the piece's acceptance for what is handed in during this movement.
    pub acceptance: Option<AcceptanceMode>,
    /// Pieces this movement may run as workers (`RunWorker`), whatever the tool's own grants.
    pub workers: Vec<Located<String>>,
}

impl Movement {
    /// Whether the piece lets this movement run `piece` as a worker.
    pub fn allows_worker(&self, piece: &str) -> bool {
        self.workers.iter().any(|name| name.value == piece)
    }

    /// Whether the piece wants a human to approve every call of `tool` here.
    pub fn needs_approval(&self, tool: &str) -> bool {
        self.approve.iter().any(|name| name.value == tool)
    }

    /// The typed `default_next`, or `None` when absent. `Err` carries a sentinel that is not
    /// allowed there; [`super::lint`] reports it, so after a clean lint this is always `Ok`.
    pub fn default_target(&self) -> Option<Result<DefaultNext, Sentinel>> {
        self.default_next
            .as_ref()
            .map(|next| DefaultNext::from_default_next(&next.value))
    }
}

/// A transition offered to the LLM: the `next` values of a movement's rules become the enum of
/// its transition tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub condition: Located<String>,
    pub next: Located<String>,
}

impl Rule {
    /// The typed target. `Err` carries a sentinel that rules may not name; [`super::lint`]
    /// reports it, so after a clean lint this is always `Ok`.
    pub fn target(&self) -> Result<Next, Sentinel> {
        Next::from_rule_next(&self.next.value)
    }
}

/// Engine-internal `next` values that control-flow outcomes turn into (DESIGN §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sentinel {
    Complete,
    Abort,
    Ask,
    WaitSubtasks,
    WaitingHumanBrowser,
    WaitingHumanToolRequest,
    /// An artifact waits for its review (or a revision for its instruction).
    WaitingHumanReview,
    /// The worker's question waits for an answer at its parent.
    WaitingHumanWorker,
}

impl Sentinel {
    pub const ALL: [Sentinel; 8] = [
        Sentinel::Complete,
        Sentinel::Abort,
        Sentinel::Ask,
        Sentinel::WaitSubtasks,
        Sentinel::WaitingHumanBrowser,
        Sentinel::WaitingHumanToolRequest,
        Sentinel::WaitingHumanReview,
        Sentinel::WaitingHumanWorker,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Sentinel::Complete => "COMPLETE",
            Sentinel::Abort => "ABORT",
            Sentinel::Ask => "ASK",
            Sentinel::WaitSubtasks => "WAIT_SUBTASKS",
            Sentinel::WaitingHumanBrowser => "WAITING_HUMAN_BROWSER",
            Sentinel::WaitingHumanToolRequest => "WAITING_HUMAN_TOOL_REQUEST",
            Sentinel::WaitingHumanReview => "WAITING_HUMAN_REVIEW",
            Sentinel::WaitingHumanWorker => "WAITING_HUMAN_WORKER",
        }
    }

    /// Exact, case-sensitive match: `complete` is an ordinary movement name, not a sentinel.
    pub fn parse(text: &str) -> Option<Sentinel> {
        Sentinel::ALL
            .into_iter()
            .find(|sentinel| sentinel.as_str() == text)
    }

    /// Terminal sentinels end the job for good; every other one parks it for a later resume.
    pub fn is_terminal(self) -> bool {
        matches!(self, Sentinel::Complete | Sentinel::Abort)
    }
}

impl fmt::Display for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a rule may lead: another movement, or parking until the job's subtasks are done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Movement(String),
    WaitSubtasks,
}

impl Next {
    /// Classifies a `rules[].next` value. Whether a `Movement` name exists is checked by lint.
    pub fn from_rule_next(text: &str) -> Result<Next, Sentinel> {
        match Sentinel::parse(text) {
            None => Ok(Next::Movement(text.to_owned())),
            Some(Sentinel::WaitSubtasks) => Ok(Next::WaitSubtasks),
            Some(forbidden) => Err(forbidden),
        }
    }
}

/// Where a movement goes when no rule fires: another movement, or the end of the piece.
///
/// `COMPLETE` / `ABORT` are accepted because a movement without a successor must be able to say
/// how the piece ends, and because a rule-based `WAIT_SUBTASKS` resumes at `default_next`, so
/// "wait for the children, then finish" needs `default_next: COMPLETE`. Park sentinels are
/// rejected: a default transition cannot wait on anything, since nothing would resume it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultNext {
    Movement(String),
    Complete,
    Abort,
}

impl DefaultNext {
    /// Classifies a `default_next` value. Whether a `Movement` name exists is checked by lint.
    pub fn from_default_next(text: &str) -> Result<DefaultNext, Sentinel> {
        match Sentinel::parse(text) {
            None => Ok(DefaultNext::Movement(text.to_owned())),
            Some(Sentinel::Complete) => Ok(DefaultNext::Complete),
            Some(Sentinel::Abort) => Ok(DefaultNext::Abort),
            Some(forbidden) => Err(forbidden),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sentinel_round_trips_through_its_name() {
        for sentinel in Sentinel::ALL {
            assert_eq!(Sentinel::parse(sentinel.as_str()), Some(sentinel));
        }
        assert_eq!(Sentinel::parse("complete"), None);
    }

    #[test]
    fn rules_may_only_wait_for_subtasks() {
        assert_eq!(
            Next::from_rule_next("WAIT_SUBTASKS"),
            Ok(Next::WaitSubtasks)
        );
        assert_eq!(
            Next::from_rule_next("write"),
            Ok(Next::Movement("write".to_owned()))
        );
        for forbidden in Sentinel::ALL
            .into_iter()
            .filter(|sentinel| *sentinel != Sentinel::WaitSubtasks)
        {
            assert_eq!(Next::from_rule_next(forbidden.as_str()), Err(forbidden));
        }
    }

    #[test]
    fn default_next_may_end_the_piece_but_not_park() {
        assert_eq!(
            DefaultNext::from_default_next("COMPLETE"),
            Ok(DefaultNext::Complete)
        );
        assert_eq!(
            DefaultNext::from_default_next("ABORT"),
            Ok(DefaultNext::Abort)
        );
        assert_eq!(
            DefaultNext::from_default_next("WAIT_SUBTASKS"),
            Err(Sentinel::WaitSubtasks)
        );
        assert_eq!(DefaultNext::from_default_next("ASK"), Err(Sentinel::Ask));
    }
}
