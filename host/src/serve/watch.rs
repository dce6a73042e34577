//! Watches the plugin folder and hands each changed plugin to the [`PluginHost`].
//!
//! Invariant: every `*.wasm` file that changes is synced after the folder has been quiet for the
//! debounce time; a change the watcher could have missed (an error, a queue overflow) syncs the
//! whole folder. Loading happens on this task, never on a request.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};

use super::plugins::{PluginHost, plugin_file_name};

/// Stops watching when dropped.
pub struct FolderWatch {
    _debouncer: Box<dyn std::any::Any + Send>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FolderWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `host`'s folder. Call [`PluginHost::sync_all`] first for what is already
/// there; files that change from now on are synced as they change.
pub fn watch_folder(host: Arc<PluginHost>, debounce: Duration) -> Result<FolderWatch, String> {
    let (sender, mut changes) = tokio::sync::mpsc::unbounded_channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(debounce, None, move |result: DebounceEventResult| {
        let _ = sender.send(result);
    })
    .map_err(|error| format!("cannot watch the plugin folder: {error}"))?;
    debouncer
        .watch(host.dir(), RecursiveMode::NonRecursive)
        .map_err(|error| format!("cannot watch {}: {error}", host.dir().display()))?;
    let task = tokio::spawn(async move {
        while let Some(result) = changes.recv().await {
            match result {
                Ok(events) if !events.iter().any(|event| event.need_rescan()) => {
                    let names: BTreeSet<String> = events
                        .iter()
                        .flat_map(|event| event.paths.iter())
                        .filter(|path| path.parent() == Some(host.dir()))
                        .filter_map(|path| plugin_file_name(path))
                        .collect();
                    for name in names {
                        host.sync(&name).await;
                    }
                }
                Ok(_) => {
                    tracing::warn!("the plugin watcher asks for a rescan; syncing every plugin");
                    host.sync_all().await;
                }
                Err(errors) => {
                    for error in errors {
                        tracing::warn!("plugin watcher: {error}");
                    }
                    host.sync_all().await;
                }
            }
        }
    });
    Ok(FolderWatch {
        _debouncer: Box::new(debouncer),
        task,
    })
}
