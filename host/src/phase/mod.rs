//! The runtime phase machine: who may act, which tools are open, when the user must be asked, and
//! when an artifact becomes a fact.
//!
//! Invariant: a [`RuntimeSession`] is the fold of its event log. [`apply_event`] is pure (no I/O, no
//! clock, no randomness); it either returns the next session or a [`TransitionError`] naming the
//! phase and the event, never a silent no-op, and a rejected event changes nothing. Every session
//! reachable through it satisfies:
//!
//! - `done` and `error` are absorbing: they accept no event;
//! - `waiting_user` always carries a [`WaitingReason`], and no other phase ever does;
//! - the tool-loop burst count never exceeds `max_burst`: the call that reaches it parks the
//!   session in `waiting_user/input`, and only a user event resets it;
//! - loop and boundary tools are accepted only while `running` with no worker set;
//! - nothing but an accepted artifact can be handed downstream: [`RuntimeSession::facts`] is the
//!   one accessor for that, and a [`Fact`] cannot be built from an unaccepted artifact.
//!
//! Waiting for subtasks is not waiting for the user: it is `running` with the worker set.

/// Gives a fieldless enum its snake_case name (the same one serde writes) and a `Display`.
macro_rules! snake_case_names {
    ($ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The snake_case name, as stored in JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name),+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

mod artifact;
mod error;
mod event;
mod park;
mod session;
mod transition;
mod waiting;
mod work;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod test_support;

pub use artifact::{ArtifactDraft, ArtifactRecord, ArtifactStatus, Fact, NotAFact};
pub use error::{PhaseLabel, TransitionError, Violation};
pub use event::{
    EventKind, FinishOutcome, MainAgentDecision, Park, ParkKind, Resume, ResumeKind, RuntimeEvent,
    SkillStart, SubtaskResult,
};
pub use session::{
    AcceptanceMode, DEFAULT_MAX_BURST, InvalidSession, LifecycleStage, ResumeContext,
    RuntimeSession, apply_event, fold,
};
pub use waiting::{RuntimePhase, SkillIndexEntry, WaitingKind, WaitingReason};
