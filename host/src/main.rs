//! The `maestro` binary: all of it lives in `maestro::cli`.

fn main() -> std::process::ExitCode {
    maestro::cli::run(std::env::args_os())
}
