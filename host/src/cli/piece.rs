//! `maestro piece lint`: check pieces before anything runs them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::Failure;
use super::plugin::plugin_name;
use crate::piece::{Piece, PieceError, lint, lint_together, load_dir, load_piece};
use crate::plugin::{Policy, Runtime};

#[derive(Debug, Subcommand)]
pub enum PieceCommand {
    /// Load pieces (a YAML file or a folder of them) and report every
    /// problem with its file, line and column. Exits 1 if there is any.
    Lint {
        /// A piece file, or a folder of `*.yaml` / `*.yml` pieces.
        path: PathBuf,
        /// The plugin folder whose tools the pieces may name.
        #[arg(long, value_name = "DIR", env = "MAESTRO_PLUGIN_DIR")]
        plugins: PathBuf,
        /// Operator policy used to load the plugins.
        #[arg(long, value_name = "FILE", env = "MAESTRO_POLICY")]
        policy: Option<PathBuf>,
    },
}

pub async fn execute(
    command: &PieceCommand,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
    let PieceCommand::Lint {
        path,
        plugins,
        policy,
    } = command;
    let policy = match policy {
        Some(file) => Policy::from_file(file).map_err(Failure::usage)?,
        None => Policy::default(),
    };
    let known_tools = tool_names(&runtime()?, plugins, &policy).await?;
    let (pieces, mut errors): (Vec<Piece>, Vec<PieceError>) = if path.is_dir() {
        load_dir(path)
    } else {
        match load_piece(path) {
            Ok(piece) => (vec![piece], Vec::new()),
            Err(err) => (Vec::new(), vec![err]),
        }
    };
    let mut problems: Vec<String> = errors.drain(..).map(|err| err.to_string()).collect();
    for piece in &pieces {
        problems.extend(lint(piece, &known_tools).iter().map(ToString::to_string));
    }
    if path.is_dir() {
        problems.extend(lint_together(&pieces).iter().map(ToString::to_string));
    }
    for problem in &problems {
        println!("{problem}");
    }
    if problems.is_empty() {
        eprintln!("{} piece(s) checked: no problem", pieces.len());
        Ok(())
    } else {
        eprintln!("{} problem(s) in {}", problems.len(), path.display());
        Err(Failure::reported(1))
    }
}

/// Every tool name the plugins in `dir` offer; a plugin that fails to load
/// is reported, and its tools count as missing.
async fn tool_names(
    runtime: &Runtime,
    dir: &Path,
    policy: &Policy,
) -> Result<BTreeSet<String>, Failure> {
    let entries = std::fs::read_dir(dir).map_err(|err| {
        Failure::usage(format!(
            "cannot read plugin folder {}: {err}",
            dir.display()
        ))
    })?;
    let mut names = BTreeSet::new();
    for path in entries.filter_map(|entry| entry.ok().map(|e| e.path())) {
        if path.extension().is_none_or(|ext| ext != "wasm") {
            continue;
        }
        match runtime
            .load_file(&path, policy.for_plugin(&plugin_name(&path)))
            .await
        {
            Ok(plugin) => names.extend(plugin.specs().iter().map(|spec| spec.name.clone())),
            Err(err) => eprintln!("warning: {}: {err}", path.display()),
        }
    }
    Ok(names)
}
