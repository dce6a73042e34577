//! What the plugin folder reports: each plugin's status, how a change went, why a request
//! was refused.
//!
//! Invariant: plain data, no behaviour beyond naming where a version came from; what the API
//! shows of a plugin is exactly [`PluginStatus`] serialized.

use serde::Serialize;

/// What a plugin of the folder is doing now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginStatus {
    pub name: String,
    pub file: String,
    pub status: ServingState,
    /// The version serving new calls.
    pub content_hash: Option<String>,
    pub tools: Vec<String>,
    pub loaded_at_ms: Option<i64>,
    /// The last version that failed to load (the previous one, if any, keeps serving).
    pub last_error: Option<LoadFailure>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServingState {
    Serving,
    Failed,
    Removed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadFailure {
    pub message: String,
    pub at_ms: i64,
    pub content_hash: Option<String>,
    pub source: FailureSource,
}

/// Where the version that failed came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureSource {
    /// The plugin folder: the file is there, and its next change may mend it.
    Folder,
    /// A `PUT`: refused before it was written, so the folder never held it.
    Upload,
    /// Another node's install, refused here before it was written; the version this node
    /// served before keeps serving.
    Cluster,
}

/// Where a new version comes from. Only the first two are this node's own installs, which
/// the other nodes sharing the store are told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    Folder,
    Upload,
    Cluster,
}

impl Source {
    pub(super) fn failure(self) -> FailureSource {
        match self {
            Source::Folder => FailureSource::Folder,
            Source::Upload => FailureSource::Upload,
            Source::Cluster => FailureSource::Cluster,
        }
    }

    /// Whether the new version is written to the folder once it is accepted (the folder's own
    /// file is there already).
    pub(super) fn writes_file(self) -> bool {
        self != Source::Folder
    }
}

/// How one sync of a plugin went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new version serves.
    Loaded,
    /// The file holds the version already serving (or nothing changed).
    Unchanged,
    /// The file is gone; the plugin takes no new calls.
    Removed,
    /// The new version was refused; the message says why.
    Failed(String),
}

/// Why an upload or removal was refused before anything changed.
#[derive(Debug, thiserror::Error)]
pub enum PluginRequestError {
    #[error(
        "plugin name `{0}` is not allowed: use letters, digits, `-` and `_` (1 to 64 characters)"
    )]
    BadName(String),
    #[error("no plugin `{0}` in the plugin folder")]
    NotFound(String),
    #[error("{0}")]
    Io(String),
}
