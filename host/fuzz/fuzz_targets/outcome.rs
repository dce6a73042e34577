//! Any outcome a guest can return, as the host receives it from either WIT version: its size is
//! measured and it is checked at the boundary without a panic, and one the host accepts comes
//! back unchanged from the JSON it is stored in (a parked call's wait, the event log).
#![no_main]

use libfuzzer_sys::fuzz_target;
use maestro::plugin::{CallError, Outcome};

fuzz_target!(|outcome: Outcome| {
    let _ = outcome.text_len();
    match outcome.problem() {
        Some(problem) => {
            let error = CallError::BadOutcome(problem).to_json();
            assert_eq!(error["code"], "bad-outcome", "{error}");
        }
        None => {
            let stored = serde_json::to_string(&outcome).unwrap();
            let back: Outcome = serde_json::from_str(&stored).unwrap();
            assert_eq!(back, outcome);
        }
    }
});
