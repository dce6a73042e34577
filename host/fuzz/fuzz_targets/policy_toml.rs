//! Any text as a policy file: it loads, or the refusal names the file (and, where there is one,
//! the line, column and key). Never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Err(error) = maestro::plugin::Policy::parse(text, "policy.toml") {
        assert!(error.location.starts_with("policy.toml"), "{error}");
        assert!(!error.message.is_empty(), "{error}");
    }
});
