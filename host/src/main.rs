fn main() -> std::process::ExitCode {
    maestro::cli::run(std::env::args_os())
}
