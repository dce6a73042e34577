//! How runners behave while the store fails (a database restarting or out of reach, a full
//! disk): they wait longer after each failure, say so once rather than on every attempt, and
//! say when the store answers again.
//!
//! Invariant: only failures of the store itself ([`StoreError::Database`]) count as failures,
//! and only progress ends one: a run saved, or nothing left to claim. A store that refuses a
//! change (a lost lease), or takes a claim but then cannot save the run, has not recovered: a
//! full disk can still take the few bytes of a claim. The pause after a failure grows
//! from [`FIRST_PAUSE`] to [`LONGEST_PAUSE`] and drops back at the first progress; a failure is
//! logged at its start and then at most every [`SAY_AGAIN`] while it lasts.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// The pause after the first failure.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two attempts.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// How often a failure that lasts is said again.
const SAY_AGAIN: Duration = Duration::from_secs(30);

/// The store's health as a worker's runners see it.
#[derive(Default)]
pub struct Outage {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the store last started failing; `None` while it answers.
    since: Option<Instant>,
    /// When a failure was last said, kept across failures: a store that fails on and off
    /// (connections breaking one by one) is not said to fail on each.
    last_said: Option<Instant>,
    /// A failure was said and its end not yet.
    unresolved: bool,
    failures: u32,
    /// What the last failure said, and when.
    last_error: String,
    last_failed: Option<Instant>,
    /// A save failed during this outage: then "nothing to claim" is no sign of recovery (a
    /// full disk takes a claim's few bytes and refuses a save's).
    save_failed: bool,
}

impl Outage {
    /// Records that `doing` failed with `error`; how long to wait before trying again.
    pub fn failed(&self, doing: &str, error: &StoreError) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let since = *state.since.get_or_insert(now);
        state.failures = state.failures.saturating_add(1);
        state.last_error = format!("{doing}: {error}");
        state.last_failed = Some(now);
        let pause = FIRST_PAUSE
            .saturating_mul(1 << (state.failures - 1).min(6))
            .min(LONGEST_PAUSE);
        if state
            .last_said
            .is_none_or(|said| now.duration_since(said) >= SAY_AGAIN)
        {
            state.last_said = Some(now);
            state.unresolved = true;
            tracing::error!(
                "{doing}: {error} (the store has failed for {:.1} s; trying again with pauses of up \
                 to {} s)",
                now.duration_since(since).as_secs_f64(),
                LONGEST_PAUSE.as_secs()
            );
        }
        pause
    }

    /// Records that the store said there is nothing to claim: progress, unless a save failed
    /// during this outage.
    pub fn nothing_to_claim(&self) {
        let save_failed = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .save_failed;
        if !save_failed {
            self.progressed();
        }
    }

    /// Records that the store made progress: it saved a run.
    pub fn progressed(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.save_failed = false;
        if let Some(since) = state.since.take() {
            if state.unresolved {
                tracing::warn!(
                    "the store answers again, after {:.1} s and {} failed attempts",
                    since.elapsed().as_secs_f64(),
                    state.failures
                );
                state.unresolved = false;
            }
            state.failures = 0;
        }
    }

    /// How long the store has failed with no progress, how long ago it last failed, and what it
    /// last said; `None` once it progresses again.
    pub fn failing(&self) -> Option<(Duration, Duration, String)> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (since, last) = (state.since?, state.last_failed?);
        Some((since.elapsed(), last.elapsed(), state.last_error.clone()))
    }

    /// [`Outage::check`] of a save: a failure also marks the outage as one that refuses saves.
    pub fn check_save<T>(&self, result: &Result<T, StoreError>) -> Option<Duration> {
        let pause = self.check("cannot save a job", result);
        if pause.is_some() {
            self.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .save_failed = true;
        }
        pause
    }

    /// Whether `result` is a failure of the store, and if so records it: the pause to wait.
    pub fn check<T>(&self, doing: &str, result: &Result<T, StoreError>) -> Option<Duration> {
        match result {
            Err(error @ StoreError::Database { .. }) => Some(self.failed(doing, error)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> StoreError {
        StoreError::Database {
            path: "jobs.db".into(),
            message: "database or disk is full".into(),
        }
    }

    #[test]
    fn pauses_grow_to_a_bound_and_drop_back_once_the_store_answers() {
        let outage = Outage::default();
        let pauses: Vec<Duration> = (0..10)
            .map(|_| outage.failed("cannot claim a job", &failure()))
            .collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert!(
            pauses.windows(2).all(|pair| pair[0] <= pair[1]),
            "{pauses:?}"
        );
        assert_eq!(*pauses.last().unwrap(), LONGEST_PAUSE);
        let refused: Result<(), _> = Err(StoreError::NotFound("job-1".into()));
        assert_eq!(
            outage.check("cannot save", &refused),
            None,
            "a refusal is no failure"
        );
        assert_eq!(outage.check("claimed", &Ok(())), None);
        assert!(
            outage.failing().is_some(),
            "nor do a refusal and a claim end one: a full disk takes a claim, not a save"
        );
        outage.progressed();
        assert_eq!(outage.failed("cannot claim a job", &failure()), FIRST_PAUSE);
    }

    #[test]
    fn a_failure_lasts_until_the_store_answers_and_says_what_failed() {
        let outage = Outage::default();
        assert!(outage.failing().is_none());
        outage.failed("cannot claim a job", &failure());
        let (_, _, said) = outage.failing().expect("failing");
        assert_eq!(
            said,
            "cannot claim a job: store jobs.db: database or disk is full"
        );
        outage.progressed();
        assert!(outage.failing().is_none());
        outage.check_save(&Err::<(), _>(failure()));
        outage.nothing_to_claim();
        assert!(
            outage.failing().is_some(),
            "nothing to claim is no recovery while saves fail"
        );
    }
}
