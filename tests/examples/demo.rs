//! The offline demo (see `maestro_e2e::demo`): the research piece behind a login wall, the
//! approval piece, and the review piece with its worker, each run by `maestro` with the
//! scripted model against a small web site on 127.0.0.1.
//!
//! Run it with `cargo run --release -p maestro-e2e --example demo`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let demo = maestro_e2e::demo::run();
    if demo.ok() {
        ExitCode::SUCCESS
    } else {
        for (title, ok) in &demo.steps {
            if !ok {
                eprintln!("demo: this step failed: {title}");
            }
        }
        ExitCode::FAILURE
    }
}
