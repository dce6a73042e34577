//! Any bytes as the body of any `POST` route of the API: parsed and checked as the route does,
//! refused with a message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

use maestro::serve::{ROUTES_WITH_BODIES as ROUTES, check_request_body};

fuzz_target!(|input: (u8, &[u8])| {
    let (route, body) = input;
    let route = ROUTES[usize::from(route) % ROUTES.len()];
    let checked = check_request_body(route, body).expect("a POST route");
    if let Err(message) = checked {
        assert!(!message.is_empty());
    }
});
