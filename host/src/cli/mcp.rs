//! `maestro mcp`: the tools of a plugin folder served to an MCP client over stdin and stdout,
//! for a client that starts maestro as a subprocess.
//!
//! Invariant: stdout carries the protocol and nothing else; what the command has to say
//! (plugins that failed to load, what it serves) goes to stderr.

use std::sync::Arc;

use clap::Args;

use super::Failure;
use super::folder::load_folder;
use super::setup::{EngineOptions, Setup};
use crate::engine::{CatalogSlot, ToolCatalog};
use crate::mcp::{Sealer, ToolServer, serve_stdio};
use crate::plugin::Runtime;

#[derive(Debug, Args)]
pub struct McpCommand {
    #[command(flatten)]
    pub engine: EngineOptions,
}

pub async fn execute(command: &McpCommand, runtime: Runtime) -> Result<(), Failure> {
    let setup = Setup::resolve(&command.engine)?;
    let dir = setup.plugins.clone().ok_or_else(|| {
        Failure::usage(
            "maestro mcp serves a plugin folder: give --plugins DIR (or `plugins` in the config)",
        )
    })?;
    let policy = setup.policy(&runtime)?;
    let mut plugins = Vec::new();
    for loaded in load_folder(&runtime, &dir, &policy).await? {
        match loaded.plugin {
            Ok(plugin) => plugins.push(Arc::new(plugin)),
            Err(error) => eprintln!("warning: plugin {}: not loaded: {error}", loaded.name),
        }
    }
    let catalog = ToolCatalog::new(plugins).map_err(Failure::usage)?;
    eprintln!(
        "maestro mcp serves {} tools of {} on stdio",
        catalog.tool_names().len(),
        dir.display()
    );
    let sealer = Sealer::in_memory().map_err(Failure::failed)?;
    let server = ToolServer::new(Arc::new(CatalogSlot::new(Arc::new(catalog))), sealer);
    serve_stdio(server).await.map_err(Failure::failed)
}
