//! `maestro piece lint`: check pieces before anything runs them; `maestro piece graph`: draw
//! one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::Failure;
use super::folder::load_folder;
use super::setup::find_piece;
use crate::piece::{Piece, PieceError, PieceGraph, lint, lint_together, load_dir, load_piece};
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
    /// Draw a piece: its movements, where rules and default_next lead, its ends and its parks.
    Graph {
        /// A piece file, or the name of a piece in the pieces folder.
        piece: String,
        /// The pieces folder [default: `pieces` when it exists].
        #[arg(long, value_name = "DIR", env = "MAESTRO_PIECES")]
        pieces: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
        format: GraphFormat,
        /// Mark this movement (where a job stands).
        #[arg(long, value_name = "MOVEMENT")]
        current: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum GraphFormat {
    /// Mermaid flowchart text (renders on GitHub and in most Markdown viewers).
    Mermaid,
    /// Graphviz DOT text.
    Dot,
    /// A finished SVG picture.
    Svg,
}

pub async fn execute(
    command: &PieceCommand,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
    match command {
        PieceCommand::Lint {
            path,
            plugins,
            policy,
        } => lint_pieces(path, plugins, policy.as_deref(), runtime).await,
        PieceCommand::Graph {
            piece,
            pieces,
            format,
            current,
        } => graph(piece, pieces.as_deref(), *format, current.as_deref()),
    }
}

fn graph(
    piece: &str,
    pieces: Option<&Path>,
    format: GraphFormat,
    current: Option<&str>,
) -> Result<(), Failure> {
    let default = Path::new("pieces");
    let pieces = pieces.or_else(|| default.is_dir().then_some(default));
    let piece = find_piece(pieces, piece)?;
    if let Some(movement) = current
        && piece.movement(movement).is_none()
    {
        return Err(Failure::usage(format!(
            "--current: piece `{}` has no movement `{movement}`",
            piece.name.value
        )));
    }
    let graph = PieceGraph::of(&piece);
    let drawn = match format {
        GraphFormat::Mermaid => graph.mermaid(current),
        GraphFormat::Dot => graph.dot(current),
        GraphFormat::Svg => graph.svg(current),
    };
    print!("{drawn}");
    Ok(())
}

async fn lint_pieces(
    path: &Path,
    plugins: &Path,
    policy: Option<&Path>,
    runtime: impl FnOnce() -> Result<Runtime, Failure>,
) -> Result<(), Failure> {
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
    let mut names = BTreeSet::new();
    for loaded in load_folder(runtime, dir, policy).await? {
        match loaded.plugin {
            Ok(plugin) => names.extend(plugin.specs().iter().map(|spec| spec.name.clone())),
            Err(err) => eprintln!("warning: {}: {err}", loaded.path.display()),
        }
    }
    Ok(names)
}
