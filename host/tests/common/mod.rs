//! What every test of the `maestro` binary shares.

use std::path::Path;
use std::process::Command;

/// The `maestro` binary with a compile cache shared across test runs (the Python and
/// JavaScript examples take seconds to compile) and none of the caller's `MAESTRO_*`
/// variables, so a developer's shell cannot change what a test chooses.
pub fn maestro_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_maestro"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MAESTRO_") {
            command.env_remove(&name);
        }
    }
    command.env(
        "MAESTRO_CACHE_DIR",
        Path::new(maestro_plugins::DIR).join("../e2e-cache"),
    );
    command
}
