//! Any bytes as the body of any `POST` route of the API: parsed and checked as the route does,
//! refused with a message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

const ROUTES: [&str; 11] = [
    "jobs", "answer", "login", "approve", "deny", "cancel", "choose", "intake", "accept", "reject",
    "revise",
];

fuzz_target!(|input: (u8, &[u8])| {
    let (route, body) = input;
    let route = ROUTES[usize::from(route) % ROUTES.len()];
    let checked = maestro::serve::check_request_body(route, body).expect("a POST route");
    if let Err(message) = checked {
        assert!(!message.is_empty());
    }
});
