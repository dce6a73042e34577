//! What the tests of `maestro run` and `maestro jobs` on one store file share: the command on
//! a store, its output as text, and the flags of a scripted run over the repository's pieces.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `maestro ARGS --store STORE` (a file or a database URL), run to its end.
pub fn maestro(store: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
    let mut command = common::maestro_command();
    command.args(args).arg("--store").arg(store);
    command.output().unwrap()
}

/// What a command printed, stdout then stderr.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The engine flags for the model that replays `pieces/scripts/SCRIPT` over the first-party
/// plugins and the repository's pieces.
pub fn scripted_flags(script: &str) -> Vec<String> {
    let repo = repo();
    vec![
        "--model".into(),
        format!(
            "scripted:{}",
            repo.join("pieces/scripts").join(script).display()
        ),
        "--plugins".into(),
        maestro_plugins::DIR.into(),
        "--pieces".into(),
        repo.join("pieces").display().to_string(),
    ]
}

/// `args` followed by `flags`.
pub fn with<'a>(args: &[&'a str], flags: &'a [String]) -> Vec<&'a str> {
    args.iter()
        .copied()
        .chain(flags.iter().map(String::as_str))
        .collect()
}
