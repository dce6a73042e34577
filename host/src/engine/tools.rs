//! The tool catalog: which plugin answers which tool name, and which plugin version a parked
//! call is pinned to.
//!
//! Invariant: a tool name belongs to at most one plugin, and no plugin may take the name of the
//! engine's own transition tool; a catalog that would break either is never built. Every plugin
//! stays reachable by its content hash for as long as the catalog lives, so a parked call
//! resumes on the exact version that parked it. A [`CatalogSlot`] swaps whole catalogs: a run
//! takes one snapshot and keeps it, so its calls never see half of a reload.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use crate::plugin::{Plugin, ToolSpec};

/// The engine's own tool: the model moves the piece on by calling it.
pub const TRANSITION_TOOL: &str = "transition";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("tool `{tool}` is offered by two plugins: `{first}` and `{second}`")]
    Duplicate {
        tool: String,
        first: String,
        second: String,
    },
    #[error(
        "plugin `{plugin}` offers a tool named `{TRANSITION_TOOL}`, a name the engine keeps for moving between movements"
    )]
    Reserved { plugin: String },
}

#[derive(Default, Clone)]
pub struct ToolCatalog {
    by_tool: BTreeMap<String, Arc<Plugin>>,
    by_hash: HashMap<String, Arc<Plugin>>,
}

impl std::fmt::Debug for ToolCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.by_tool.iter().map(|(tool, p)| (tool, p.name())))
            .finish()
    }
}

impl ToolCatalog {
    pub fn new(plugins: impl IntoIterator<Item = Arc<Plugin>>) -> Result<Self, CatalogError> {
        let mut catalog = Self::default();
        for plugin in plugins {
            for spec in plugin.specs() {
                if spec.name == TRANSITION_TOOL {
                    return Err(CatalogError::Reserved {
                        plugin: plugin.name().to_owned(),
                    });
                }
                if let Some(first) = catalog.by_tool.get(&spec.name) {
                    return Err(CatalogError::Duplicate {
                        tool: spec.name.clone(),
                        first: first.name().to_owned(),
                        second: plugin.name().to_owned(),
                    });
                }
                catalog.by_tool.insert(spec.name.clone(), plugin.clone());
            }
            catalog
                .by_hash
                .insert(plugin.content_hash().to_owned(), plugin);
        }
        Ok(catalog)
    }

    /// The plugin that answers `tool`.
    pub fn plugin_for(&self, tool: &str) -> Option<&Arc<Plugin>> {
        self.by_tool.get(tool)
    }

    /// The spec of `tool`.
    pub fn spec(&self, tool: &str) -> Option<&ToolSpec> {
        self.by_tool
            .get(tool)
            .and_then(|plugin| plugin.specs().iter().find(|spec| spec.name == tool))
    }

    /// The plugin version with this content hash.
    pub fn pinned(&self, content_hash: &str) -> Option<&Arc<Plugin>> {
        self.by_hash.get(content_hash)
    }

    /// Every plugin tool name (what piece lint checks a piece's `tools` against).
    pub fn tool_names(&self) -> BTreeSet<String> {
        self.by_tool.keys().cloned().collect()
    }

    /// The plugins that answer tools, each once.
    pub fn plugins(&self) -> Vec<&Arc<Plugin>> {
        let mut seen = BTreeSet::new();
        self.by_tool
            .values()
            .filter(|plugin| seen.insert(plugin.content_hash()))
            .collect()
    }

    /// Keeps every version `previous` could resume on reachable by its hash here too, so that a
    /// reload never strands a parked call.
    pub fn keep_versions_of(&mut self, previous: &ToolCatalog) {
        for (hash, plugin) in &previous.by_hash {
            self.by_hash
                .entry(hash.clone())
                .or_insert_with(|| plugin.clone());
        }
    }

    /// Makes `plugin` reachable by its hash only (a version a parked job is pinned to, answering
    /// no new calls).
    pub fn add_pinned_version(&mut self, plugin: Arc<Plugin>) {
        self.by_hash
            .entry(plugin.content_hash().to_owned())
            .or_insert(plugin);
    }
}

/// The catalog an engine runs on, replaced whole when plugins are hot-loaded.
#[derive(Debug, Default)]
pub struct CatalogSlot(RwLock<Arc<ToolCatalog>>);

impl CatalogSlot {
    pub fn new(catalog: Arc<ToolCatalog>) -> Self {
        Self(RwLock::new(catalog))
    }

    /// The catalog as it is now; a run keeps this snapshot to its end.
    pub fn current(&self) -> Arc<ToolCatalog> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `catalog` in place for every run that starts from now on.
    pub fn replace(&self, catalog: Arc<ToolCatalog>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = catalog;
    }
}
