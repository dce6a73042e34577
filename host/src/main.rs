//! The `maestro` binary: all of it lives in `maestro::cli`.

/// The binary allocates through mimalloc: a park/resume cycle makes hundreds of short-lived
/// allocations on several threads, and the system allocator's were about a tenth of the
/// cycle's processor time. The library leaves the choice to whoever embeds it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    maestro::cli::run(std::env::args_os())
}
